"""Failure reasons a person can read: an exception's message without FFmpeg's error numbers,
placeholder file names or Python object reprs, and an OS error with the file it concerns."""

from __future__ import annotations

import re

from mediapipe.errors import MediapipeError

_OBJECT_REPR = re.compile(r"\s*<[\w.]+ object at 0x[0-9a-fA-F]+>")
_ERRNO_PREFIX = re.compile(r"^\[Errno -?\d+\]\s*")


def reason(err: BaseException) -> str:
    """What went wrong, in words: "Invalid data found when processing input" for FFmpeg's
    ``[Errno 1094995529] Invalid data found when processing input: '<none>'``, "No space left
    on device: /out/x.tar" for ``[Errno 28] No space left on device``, and the message of
    anything else with object reprs taken out."""
    if isinstance(err, MediapipeError):  # (a SourceError is an OSError whose "strerror" is its reason)
        return str(err)
    if _is_ffmpeg_error(err):
        return err.strerror or _clean(str(err))  # type: ignore[attr-defined]
    if isinstance(err, OSError) and err.strerror:
        return f"{err.strerror}: {err.filename}" if err.filename is not None else err.strerror
    if type(err).__name__ == "UnidentifiedImageError":  # PIL's, whose message names a BytesIO
        return "not an image format Pillow recognises"
    return _clean(str(err)) or type(err).__name__


def readable(message: str, cause: BaseException | None) -> str:
    """``message`` with the text of the ``cause`` it quotes replaced by `reason` (cause)."""
    if cause is None:
        return _clean(message)
    raw = str(cause)
    return _clean(message.replace(raw, reason(cause)) if raw and raw in message else message)


def _clean(text: str) -> str:
    return _ERRNO_PREFIX.sub("", _OBJECT_REPR.sub("", text)).strip()


def _is_ffmpeg_error(err: BaseException) -> bool:
    try:
        import av
    except ImportError:  # pragma: no cover - PyAV is a dependency
        return False
    return isinstance(err, av.FFmpegError)
