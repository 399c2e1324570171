"""`StageStats`: what the loader counts (samples, bytes, seconds per stage, failed samples by reason).

Failures are counted by reason *class*: one key per (decoder, kind of failure), so a thousand
truncated JPEGs are one line with a count of a thousand, whatever their paths, sizes or the
addresses of the objects their messages mention. The exact messages go to ``failed``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mediapipe.errors import DecodeError, SourceError

MAX_FAILED = 100  # entries kept in `StageStats.failed`

_OBJECT = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")  # <_io.BytesIO object at 0x7f...>
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")  # quoted names: paths, keys
_PATH = re.compile(r"(?<![\w=])(?:[A-Za-z]:)?[\w.~-]*[/\\][^\s,;:()\[\]]*")
_SIZE = re.compile(r"(?<![\w=.])\d+(?:x\d+)+(?!\w)")  # 4000x3000
_NUMBER = re.compile(r"(?<![\w=.])[-+]?(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?![\w])")


def normalise_reason(reason: str) -> str:
    """A failure's message with what varies from file to file taken out: object addresses,
    quoted names, paths and numbers (a ``name=value`` setting, the same for every file, stays)."""
    text = _OBJECT.sub("<object>", reason)
    text = _QUOTED.sub("'…'", text)
    text = _PATH.sub("<path>", text)
    text = _SIZE.sub("NxN", text)
    return _NUMBER.sub("N", text)


def reason_class(err: BaseException) -> str:
    """The key ``stats.errors`` counts ``err`` under: "<decoder>: <category>", "source: <category>",
    or "<ErrorType>: <category>"; the category is the error's own, else its normalised message."""
    category = getattr(err, "category", None)
    if isinstance(err, DecodeError):
        return f"{err.decoder}: {category or normalise_reason(err.reason)}"
    if isinstance(err, SourceError):
        return f"source: {category or normalise_reason(err.reason)}"
    return f"{type(err).__name__}: {category or normalise_reason(str(err))}"


def failure_line(err: BaseException) -> str:
    """``"path: reason"`` for ``stats.failed``: the file and the exact message."""
    path = getattr(err, "path", None)
    reason = getattr(err, "reason", None) or str(err)
    return f"{path}: {reason}" if path is not None else f"{type(err).__name__}: {reason}"


@dataclass
class StageStats:
    """Counts and seconds per stage; a loader merges a batch's into its own when it delivers
    the batch (so a batch prefetched and never delivered counts nothing)."""

    samples: int = 0
    batches: int = 0
    bytes: int = 0
    frames: int = 0  # video frames the decoders produced (lead-in included; frames skip_frame skipped not)
    reused_buffers: int = 0  # batches written into shared memory a worker got back (no page faults)
    seconds: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)  # reason class (`reason_class`) -> failed samples
    failed: list[str] = field(default_factory=list)  # "path: reason", the first MAX_FAILED
    fallbacks: Counter = field(default_factory=Counter)  # "<decoder>: <reason>" -> samples decoded on the CPU
    # by a backend meant for a GPU (no NVDEC in a forked worker, a PNG for nvJPEG...)

    def merge(self, other: StageStats) -> None:
        self.samples += other.samples
        self.batches += other.batches
        self.bytes += other.bytes
        self.frames += other.frames
        self.reused_buffers += other.reused_buffers
        self.seconds.update(other.seconds)
        self.errors.update(other.errors)
        self.fallbacks.update(other.fallbacks)
        self.failed.extend(other.failed[: max(0, MAX_FAILED - len(self.failed))])

    def count_error(self, err: BaseException) -> None:
        """Count one failed sample of a batch (under on_error="skip" or "replace"), by reason class."""
        self.errors[reason_class(err)] += 1
        if len(self.failed) < MAX_FAILED:
            self.failed.append(failure_line(err))

    def count_fallback(self, decoder: str, reason: str) -> None:
        """Count one sample that ``decoder``, a GPU backend, decoded on the CPU, and why."""
        self.fallbacks[f"{decoder}: {reason}"] += 1

    def as_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "batches": self.batches, "bytes": self.bytes,
                "frames": self.frames, "reused_buffers": self.reused_buffers,
                "seconds": dict(self.seconds), "errors": dict(self.errors), "failed": list(self.failed),
                "fallbacks": dict(self.fallbacks)}
