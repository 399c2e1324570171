"""soundfile (libsndfile) audio backend: FLAC and WAV, faster than FFmpeg through PyAV.

libsndfile reads FLAC and PCM WAV straight into float32 and seeks to an exact sample, so
a window costs only its own frames. Other formats (Opus, Vorbis, MP3, AAC, video files)
go to the pyav backend, chosen per file from its first bytes: libsndfile also reads Ogg
and MP3, but slower than FFmpeg does (the audio bench measures both).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch

from mediapipe.decoders.audio import AudioDecoder, ChannelPick
from mediapipe.decoders.audio_pyav import PyAVAudioDecoder
from mediapipe.decoders.base import DecodeHint, Limits
from mediapipe.decoders.registry import register
from mediapipe.errors import DecodeError, SourceError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta

try:
    import soundfile as _sf
except (ImportError, OSError):  # OSError: the package is there, its libsndfile is not
    _sf = None

_HEAD_BYTES = 12
_CODECS = {"PCM_16": "pcm_s16le", "PCM_24": "pcm_s24le", "PCM_32": "pcm_s32le", "PCM_U8": "pcm_u8",
           "FLOAT": "pcm_f32le", "DOUBLE": "pcm_f64le"}  # libsndfile subtypes by FFmpeg's codec names
_UNKNOWN_LENGTH = (1 << 63) - 1  # libsndfile's frame count for a stream whose header gives none (SF_COUNT_MAX)
_CHUNK_FRAMES = 1 << 22  # a header may lie about its length: past this, read in pieces, not one allocation


def sniff(head: bytes) -> str | None:
    """The container libsndfile should read, from a file's first 12 bytes; None: another backend's."""
    if head.startswith(b"fLaC"):
        return "FLAC"
    if head[:4] in (b"RIFF", b"RIFX", b"RF64") and head[8:12] == b"WAVE":
        return "WAV"
    return None


@register("audio", "soundfile")
class SoundfileAudioDecoder(AudioDecoder):
    """libsndfile on the CPU for FLAC and WAV; the pyav backend for every other format."""

    priority = 50  # ahead of pyav (100): same output, faster on the formats it takes

    def __init__(self, *, device: torch.device | None = None, limits: Limits = Limits(), **options: Any) -> None:
        super().__init__(device=device, limits=limits, **options)
        self.fallback = PyAVAudioDecoder(device=device, limits=limits, **options)

    @classmethod
    def available(cls, device: torch.device | None) -> bool:
        return _sf is not None

    def at_rate(self, rate: int) -> AudioDecoder:
        twin = super().at_rate(rate)
        twin.fallback = self.fallback.at_rate(rate)  # type: ignore[attr-defined]
        return twin

    def _head(self, blob: Blob) -> bytes:
        if blob.data is not None:
            return blob.data[:_HEAD_BYTES]
        try:
            with open(blob.path, "rb") as f:  # type: ignore[arg-type]
                f.seek(blob.offset)
                return f.read(_HEAD_BYTES if blob.size is None else min(_HEAD_BYTES, blob.size))
        except OSError as err:
            raise SourceError(blob.name, err.strerror or str(err)) from err

    def _open(self, blob: Blob) -> Any | None:
        """An open SoundFile, or None when the blob is not a format this backend reads, or
        one whose header does not give its length."""
        head = self._head(blob)
        if not head:
            raise DecodeError(blob.name, self.name, "empty file (0 bytes)")
        if sniff(head) is None:
            return None
        if blob.data is not None:
            source: Any = io.BytesIO(blob.data)
        elif blob.offset == 0 and blob.size is None:
            source = blob.path  # libsndfile's own file I/O: no Python callback per read
        else:
            source = blob.open()
        try:
            f = _sf.SoundFile(source)
        except (_sf.LibsndfileError, RuntimeError, ValueError) as err:
            raise DecodeError(blob.name, self.name, f"cannot open: {err}") from err
        if f.frames >= _UNKNOWN_LENGTH:  # a FLAC written to a pipe: its header gives no length
            f.close()
            return None  # the pyav backend decodes it to its end, under max_duration
        return f

    @staticmethod
    def _header(f: Any) -> SampleMeta:
        rate, frames = int(f.samplerate), int(f.frames)
        return {"sample_rate": rate, "channels": int(f.channels), "codec": "flac" if f.format == "FLAC" else _CODECS.get(f.subtype, f.subtype.lower()),
                "duration": frames / rate if rate else 0.0, "num_samples": frames}

    def probe(self, blob: Blob, data: bytes | None = None) -> SampleMeta:
        """Duration (s), sample rate (Hz), channels and codec from the header; nothing is decoded."""
        if data is not None:
            blob = Blob(blob.name, data=data)
        f = self._open(blob)
        if f is None:
            return self.fallback.probe(blob)
        with f:
            return self._header(f)

    def decode_file(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta, pick: ChannelPick) -> Any:
        f = self._open(blob)
        if f is None:
            return self.fallback.decode_file(blob, hint, rng, meta, pick)
        with f:
            header = self._header(f)
            rate, frames = header["sample_rate"], header["num_samples"]
            self.check_duration(header["duration"], blob.name, rate, blob)
            if rate <= 0:
                raise DecodeError(blob.name, self.name, f"the header gives no sample rate ({rate})")
            try:
                windows, stacked = self.grid_windows(hint, rng, header["duration"], rate)
            except ValueError as err:
                raise DecodeError(blob.name, self.name, str(err)) from err
            ranges = [self.native_range(w, rate) for w in windows]
            first = min(min(r[0] for r in ranges), frames)
            last = None if any(r[1] is None for r in ranges) else max(r[1] for r in ranges)
            count = frames - first if last is None else max(0, min(last, frames) - first)
            try:
                if first:
                    f.seek(first)
                x = _read(f, count)
            except (_sf.LibsndfileError, RuntimeError) as err:
                raise DecodeError(blob.name, self.name, f"truncated or corrupt: {err}") from err
        if self.options.from_field is None:
            self.check_shortfall(blob.name, frames, rate, first, last, x.shape[0])
            if x.shape[0] == 0:
                raise self.no_samples(blob.name, windows, rate, header["duration"])
        x = pick.apply(x.T, blob.name, self.name)  # (N, C) as read to (C, N)
        pieces = [self.to_window(x[:, r0 - first : None if r1 is None else r1 - first], r0, rate, w)
                  for w, (r0, r1) in zip(windows, ranges)]
        return self.result(pieces, stacked)


def _read(f: Any, count: int) -> np.ndarray:
    """Up to ``count`` frames as float32 (N, C): one read, or pieces when the header declares a lot."""
    if count <= _CHUNK_FRAMES:
        return f.read(count, dtype="float32", always_2d=True)
    pieces, left = [], count
    while left > 0:
        piece = f.read(min(left, _CHUNK_FRAMES), dtype="float32", always_2d=True)
        pieces.append(piece)
        left -= len(piece)
        if len(piece) < min(left + len(piece), _CHUNK_FRAMES):  # the data ended early
            break
    return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
