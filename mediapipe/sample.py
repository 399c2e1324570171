"""What a source hands to the pipeline: a sample's reference and its media blobs.

A `SampleRef` is cheap (no media bytes): its index, a key, an optional label, the
metadata known without decoding, and a `Blob` per media file. Bytes are read
lazily, in the worker that decodes the sample.
"""

from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from mediapipe.errors import SourceError

IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff", "ppm", "pgm"})
VIDEO_EXTENSIONS = frozenset({"mp4", "mkv", "webm", "ivf", "mov", "avi", "obu"})
AUDIO_EXTENSIONS = frozenset({"wav", "flac", "ogg", "opus", "mp3", "m4a", "aac", "oga"})

SampleMeta = dict[str, Any]
"""Metadata known before decoding: width/height, duration, frames, fps, sample_rate..."""


def kind_of_extension(ext: str) -> str | None:
    """'image', 'video' or 'audio' for a file extension (without the dot), else None."""
    ext = ext.lower().lstrip(".")
    if ext in IMAGE_EXTENSIONS:
        return "image"
    if ext in VIDEO_EXTENSIONS:
        return "video"
    if ext in AUDIO_EXTENSIONS:
        return "audio"
    return None


def kind_of_bytes(head: bytes) -> str | None:
    """Guess the media kind from a file's first bytes (magic numbers)."""
    if head.startswith((b"\xff\xd8\xff", b"\x89PNG", b"BM", b"GIF8")) or head[8:12] == b"WEBP":
        return "image"
    if head[4:8] == b"ftyp":
        return "audio" if head[8:12] in (b"M4A ", b"M4B ") else "video"
    if head.startswith((b"\x1a\x45\xdf\xa3", b"DKIF")):
        return "video"
    if head.startswith((b"RIFF", b"fLaC", b"OggS", b"ID3")) or head[:2] in (b"\xff\xfb", b"\xff\xf3"):
        return "audio"
    return None


_IRREGULAR = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
              (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _refuse_irregular(name: str, mode: int) -> None:
    """A media file must be a regular file: reading a FIFO waits for a writer, a device never ends."""
    if not stat.S_ISREG(mode):
        what = next((kind for test, kind in _IRREGULAR if test(mode)), "not a file")
        raise SourceError(name, f"not a regular file ({what})", category="not a regular file")


@dataclass(frozen=True)
class Blob:
    """The bytes of one media file: a whole file, a byte range of one, or bytes in memory.

    ``name`` is what errors print: a path, or ``shard-000003.tar:key.jpg`` for a tar member.
    """

    name: str
    path: str | None = None
    offset: int = 0
    size: int | None = None
    data: bytes | None = None

    @property
    def extension(self) -> str:
        base = self.name.rsplit("/", 1)[-1]
        return base.rsplit(".", 1)[-1].lower() if "." in base else ""

    def read(self) -> bytes:
        """All of the blob's bytes, read in one call (no more than the file held when opened)."""
        if self.data is not None:
            return self.data
        fd, st = self._open_regular()
        try:
            with os.fdopen(fd, "rb") as f:
                if self.offset:
                    f.seek(self.offset)
                data = f.read(max(st.st_size - self.offset, 0) if self.size is None else self.size)
        except OSError as err:
            raise SourceError(self.name, err.strerror or str(err)) from err
        if self.size is not None and len(data) != self.size:
            raise SourceError(self.name, f"expected {self.size} bytes at offset {self.offset}, got {len(data)}")
        return data

    def open(self) -> BinaryIO:
        """A seekable binary file object over the blob (for demuxers that seek)."""
        if self.data is None and self.offset == 0 and self.size is None:
            fd, _ = self._open_regular()
            return os.fdopen(fd, "rb")
        return io.BytesIO(self.read())

    def check(self) -> None:
        """Refuse a blob's file that is not a regular file, before a decoder opens its path itself:
        opening a FIFO waits for a writer forever, a device (a link to /dev/zero) never ends."""
        if self.data is None and self.path is not None:
            try:
                st = os.stat(self.path)
            except OSError as err:
                raise SourceError(self.name, err.strerror or str(err)) from err
            _refuse_irregular(self.name, st.st_mode)


    def _open_regular(self) -> tuple[int, os.stat_result]:
        """A descriptor on the blob's file and its stat, refused unless it is a regular file
        (opened without blocking: a FIFO is refused, not waited on)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))  # type: ignore[arg-type]
        except OSError as err:
            raise SourceError(self.name, err.strerror or str(err)) from err
        try:
            st = os.fstat(fd)
            _refuse_irregular(self.name, st.st_mode)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def nbytes(self) -> int:
        if self.data is not None:
            return len(self.data)
        if self.size is not None:
            return self.size
        return os.path.getsize(self.path)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SampleRef:
    """One sample of a source: no media bytes, only where to find them.

    ``blobs`` maps a media kind (``image``, ``video``, ``audio``) or a file
    extension to its blob; ``fields`` holds extra values passed through to the
    batch: numbers (stacked into tensors), ``str`` (a list of str), tensors; ``meta`` holds what is known without decoding.
    """

    index: int
    key: str
    blobs: dict[str, Blob]
    label: int | None = None
    meta: SampleMeta = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)

    def blob(self, kind: str, field: str | None = None) -> Blob:
        """The blob that the decoder of field ``field`` (media ``kind``) reads: the one named
        after the field (a manifest's ``"mask": "m.png"``), else the one of that kind, else
        the only one."""
        if field is not None and field in self.blobs:
            return self.blobs[field]
        if kind in self.blobs:
            return self.blobs[kind]
        for ext, blob in self.blobs.items():
            if kind_of_extension(ext) == kind:
                return blob
        if len(self.blobs) == 1:  # one file, e.g. the audio track of a video file
            return next(iter(self.blobs.values()))
        raise SourceError(self.key, f"sample has no {kind} media; it has {sorted(self.blobs)}")
