"""PyAV audio backend: whatever FFmpeg decodes, to float32 planar, with seek, down-mix and resample.

A window decode seeks a little before its start (codecs with overlapping frames, such as
Opus, MP3 and AAC, need a few frames to settle), decodes forward, and places each frame
by its timestamp, so the window equals the same slice of a full decode.
"""

from __future__ import annotations

import math
from typing import Any

import av
import numpy as np
import torch

from mediapipe.decoders.audio import AudioDecoder, audio  # noqa: F401  (audio: re-exported by the package)
from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.registry import register
from mediapipe.errors import DecodeError, LimitError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta

# Containers whose header length is exact (stream info, sample counts, last granule), so a
# decode that comes out shorter means a truncated or corrupt file. MP3 and ADTS durations
# are estimated from the bit rate and are not checked.
_EXACT_LENGTH_FORMATS = ("wav", "flac", "ogg", "mov,mp4,m4a,3gp,3g2,mj2", "w64", "aiff", "matroska,webm")
_SHORTFALL_TOLERANCE = (0.05, 0.01)  # seconds, fraction: decoding may end this much early
_PREROLL_SECONDS = {"opus": 0.2, "mp3": 0.2, "mp3float": 0.2, "aac": 0.2, "vorbis": 0.2}
_INT_SCALE = {"s16": 1 / 32768.0, "s16p": 1 / 32768.0, "s32": 1 / 2147483648.0, "s32p": 1 / 2147483648.0,
              "u8": 1 / 128.0, "u8p": 1 / 128.0, "s64": 1 / 9223372036854775808.0, "s64p": 1 / 9223372036854775808.0}


@register("audio", "pyav")
class PyAVAudioDecoder(AudioDecoder):
    """FFmpeg through PyAV on the CPU: every audio codec FFmpeg has, and video files' audio tracks."""

    priority = 100

    def _open(self, blob: Blob) -> Any:
        if blob.nbytes() == 0:
            raise DecodeError(blob.name, self.name, "empty file (0 bytes)")
        if blob.path is not None and blob.data is None and blob.offset == 0 and blob.size is None:
            source: Any = blob.path  # FFmpeg's own file I/O: no Python callback per read
        else:
            source = blob.open()
        try:
            container = av.open(source, metadata_errors="ignore")
        except av.FFmpegError as err:
            raise DecodeError(blob.name, self.name, f"cannot open: {err}") from err
        except (OSError, ValueError) as err:
            raise DecodeError(blob.name, self.name, f"cannot open: {err}") from err
        if not container.streams.audio:
            container.close()
            raise DecodeError(blob.name, self.name, "no audio stream")
        return container

    @staticmethod
    def _header(container: Any) -> SampleMeta:
        stream = container.streams.audio[0]
        ctx = stream.codec_context
        sample_rate = int(ctx.sample_rate or stream.sample_rate or 0)
        channels = int(ctx.channels or 0)
        duration = None
        if stream.duration is not None and stream.time_base is not None:
            duration = float(stream.duration * stream.time_base)
        elif container.duration is not None:
            duration = container.duration / av.time_base
        meta: SampleMeta = {"sample_rate": sample_rate, "channels": channels, "codec": ctx.name}
        if duration is not None and duration >= 0:
            meta["duration"] = duration
            if sample_rate:
                meta["num_samples"] = round(duration * sample_rate)
        return meta

    def probe(self, blob: Blob, data: bytes | None = None) -> SampleMeta:
        """Duration (s), sample rate (Hz), channels and codec from the header; nothing is decoded."""
        if data is not None:
            blob = Blob(blob.name, data=data)
        container = self._open(blob)
        try:
            return self._header(container)
        finally:
            container.close()

    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> torch.Tensor:
        container = self._open(blob)
        try:
            header = self._header(container)
            self.check_duration(header.get("duration"), blob.name)
            start, length = self.window(hint, rng, header.get("duration"))
            x, rate = self._decode_window(container, blob.name, header, start, length)
        except (DecodeError, LimitError):
            raise
        except av.FFmpegError as err:
            raise DecodeError(blob.name, self.name, str(err)) from err
        finally:
            container.close()
        if x.shape[1] == 0:
            raise DecodeError(blob.name, self.name, f"no audio samples (window starts at {start:.3f} s)")
        if self.mono and x.shape[0] > 1:
            x = x.mean(axis=0, keepdims=True, dtype=np.float32)
        if self.sample_rate is not None and self.sample_rate != rate:
            x = resample(x, rate, self.sample_rate)
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))

    def _decode_window(self, container: Any, path: str, header: SampleMeta, start: float,
                       length: float | None) -> tuple[np.ndarray, int]:
        stream = container.streams.audio[0]
        stream.thread_type = "AUTO"
        rate = header["sample_rate"]
        tb = stream.time_base
        origin = stream.start_time or 0
        first = round(start * rate) if rate else 0
        last = None if length is None or not rate else first + round(length * rate)
        limit = None if self.max_duration is None or not rate else math.ceil(self.max_duration * rate)
        if first > 0:
            seek_to = max(0.0, start - _PREROLL_SECONDS.get(stream.codec_context.name, 0.0))
            if seek_to > 0:
                container.seek(origin + int(seek_to / tb), stream=stream, backward=True)
        pieces: list[np.ndarray] = []
        position = None  # sample index of the next decoded sample, in the full decode's numbering
        total = 0
        for frame in container.decode(stream):
            if frame.pts is not None and rate:
                position = round((frame.pts - origin) * tb * rate)
            elif position is None:
                position = 0
            n = frame.samples
            lo, hi = max(first - position, 0), n if last is None else min(n, last - position)
            position += n
            if hi <= lo:
                if last is not None and position >= last:
                    break
                continue
            x = _frame_to_float(frame)
            pieces.append(x[:, lo:hi] if (lo, hi) != (0, n) else x)
            total += hi - lo
            if limit is not None and total > limit:
                raise LimitError(path, self.name, f"decoded more than max_duration={self.max_duration:g} s; "
                                                  f"the header declared {header.get('duration')} s")
            if last is not None and position >= last:
                break
        channels = header["channels"] or (pieces[0].shape[0] if pieces else 1)
        x = np.concatenate(pieces, axis=1) if pieces else np.zeros((channels, 0), np.float32)
        self._check_shortfall(container, path, header, first, last, x.shape[1])
        return x, rate

    def _check_shortfall(self, container: Any, path: str, header: SampleMeta, first: int, last: int | None,
                         got: int) -> None:
        declared = header.get("num_samples")
        if declared is None or container.format.name not in _EXACT_LENGTH_FORMATS:
            return
        end = declared if last is None else min(last, declared)
        expected = max(0, end - first)
        seconds, fraction = _SHORTFALL_TOLERANCE
        slack = max(seconds * header["sample_rate"], fraction * expected)
        if got < expected - slack:
            rate = header["sample_rate"]
            raise DecodeError(path, self.name, f"truncated or corrupt: decoded {got / rate:.3f} s of the "
                                               f"{expected / rate:.3f} s the header declares")


def _frame_to_float(frame: Any) -> np.ndarray:
    """A frame as float32 (channels, samples), whatever its sample format."""
    x = frame.to_ndarray()
    name = frame.format.name
    if not frame.format.is_planar:
        x = x.reshape(-1, frame.layout.nb_channels).T
    if name in _INT_SCALE:
        if name.startswith("u8"):
            return (x.astype(np.float32) - 128.0) * _INT_SCALE[name]
        return x.astype(np.float32) * np.float32(_INT_SCALE[name])
    return x.astype(np.float32, copy=False)


def resample(x: np.ndarray, rate: int, target: int) -> np.ndarray:
    """float32 (C, N) from ``rate`` to ``target`` Hz with FFmpeg's swresample, in one call."""
    layout = {1: "mono", 2: "stereo"}.get(x.shape[0])
    if layout is None:  # swresample wants a named layout; resample channel by channel
        return np.concatenate([resample(c[None], rate, target) for c in x], axis=0)
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(x, dtype=np.float32), format="fltp", layout=layout)
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="fltp", layout=layout, rate=target)
    out = [f.to_ndarray() for f in resampler.resample(frame)] + [f.to_ndarray() for f in resampler.resample(None)]
    y = np.concatenate(out, axis=1) if out else np.zeros((x.shape[0], 0), np.float32)
    expected = round(x.shape[1] * target / rate)
    return y[:, :expected]
