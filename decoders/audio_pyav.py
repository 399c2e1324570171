"""PyAV audio backend: whatever FFmpeg decodes, to float32 planar, with seek, down-mix and resample.

Of several audio tracks (a film's commentary, a dub) it decodes the one FFmpeg's command line
picks: the default-flagged track, else the one with the most channels, else the first.

A window decode seeks a little before its start (codecs with overlapping frames, such as
Opus, MP3 and AAC, need a few frames to settle), decodes forward, and places each frame
by its timestamp, so the window equals the same slice of a full decode.
"""

from __future__ import annotations

import math
from typing import Any

import av
import numpy as np

from mediapipe.decoders.audio import AudioDecoder, audio, resample  # noqa: F401  (re-exported)
from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.registry import register
from mediapipe.errors import DecodeError, LimitError
from mediapipe.reasons import reason
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta
from mediapipe.streams import main_stream

# Containers whose header length is exact (stream info, sample counts, last granule), so a
# decode that comes out shorter means a truncated or corrupt file. MP3 and ADTS durations
# are estimated from the bit rate and are not checked.
_EXACT_LENGTH_FORMATS = ("wav", "flac", "ogg", "mov,mp4,m4a,3gp,3g2,mj2", "w64", "aiff", "matroska,webm")
_PREROLL_SECONDS = {"opus": 0.2, "mp3": 0.2, "mp3float": 0.2, "aac": 0.2, "vorbis": 0.2}
_INT_SCALE = {"s16": 1 / 32768.0, "s16p": 1 / 32768.0, "s32": 1 / 2147483648.0, "s32p": 1 / 2147483648.0,
              "u8": 1 / 128.0, "u8p": 1 / 128.0, "s64": 1 / 9223372036854775808.0, "s64p": 1 / 9223372036854775808.0}


@register("audio", "pyav")
class PyAVAudioDecoder(AudioDecoder):
    """FFmpeg through PyAV on the CPU: every audio codec FFmpeg has, and video files' audio tracks."""

    priority = 100

    def _open(self, blob: Blob, absent_ok: bool = False) -> Any:
        """The open container; None when it has no audio track and ``absent_ok``."""
        if blob.nbytes() == 0:
            raise DecodeError(blob.name, self.name, "empty file (0 bytes)")
        if blob.path is not None and blob.data is None and blob.offset == 0 and blob.size is None:
            source: Any = blob.path  # FFmpeg's own file I/O: no Python callback per read
        else:
            source = blob.open()
        try:
            container = av.open(source, metadata_errors="ignore")
        except (av.FFmpegError, OSError, ValueError) as err:
            raise DecodeError(blob.name, self.name, f"cannot open: {reason(err)}") from err
        if not container.streams.audio:
            kinds = ", ".join(sorted({st.type for st in container.streams})) or "none"
            container.close()
            if absent_ok:
                return None
            raise DecodeError(blob.name, self.name, f"no audio stream (streams: {kinds})")
        return container

    @staticmethod
    def _header(container: Any) -> SampleMeta:
        stream = main_stream(container.streams.audio)
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

    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> Any:
        """float32 (C, N) of the window (see `AudioDecoder.grid_windows`); with ``from_field``, a
        `Decoded` of the clips' audio and side field ``present``."""
        container = self._open(blob, absent_ok=self.from_field is not None)
        if container is None:
            return self.absent(hint)
        try:
            header = self._header(container)
            self.check_duration(header.get("duration"), blob.name, header["sample_rate"], blob)
            rate = header["sample_rate"]
            if rate <= 0:
                raise DecodeError(blob.name, self.name, f"the header gives no sample rate ({rate})")
            stream = main_stream(container.streams.audio)
            track_start = 0.0
            if stream.start_time is not None and stream.time_base is not None:
                track_start = float(stream.start_time * stream.time_base)
            try:
                windows, stacked = self.grid_windows(hint, rng, header.get("duration"), rate, track_start)
            except ValueError as err:
                raise DecodeError(blob.name, self.name, str(err)) from err
            ranges = [self.native_range(w, rate) for w in windows]
            lo = min(r[0] for r in ranges)
            hi = None if any(r[1] is None for r in ranges) else max(r[1] for r in ranges)
            x = self._decode_window(container, blob.name, header, lo, hi)
        except (DecodeError, LimitError):
            raise
        except av.FFmpegError as err:  # FFmpeg refused a packet: a damaged stream
            raise DecodeError(blob.name, self.name, f"truncated or corrupt: {reason(err)}") from err
        finally:
            container.close()
        if x.shape[1] == 0 and self.from_field is None:
            raise DecodeError(blob.name, self.name, f"no audio samples (window starts at {lo / rate:.3f} s)")
        pieces = [self.to_window(x[:, r0 - lo : None if r1 is None else r1 - lo], r0, rate, w)
                  for w, (r0, r1) in zip(windows, ranges)]
        return self.result(pieces, stacked)

    def _decode_window(self, container: Any, path: str, header: SampleMeta, first: int,
                       last: int | None) -> np.ndarray:
        """Native samples [first, last) of the track (last None: to the end), as float32 (C, n)."""
        stream = main_stream(container.streams.audio)
        rate = header["sample_rate"]
        tb_num, tb_den = (stream.time_base.numerator, stream.time_base.denominator) if stream.time_base else (1, 1)
        origin = stream.start_time or 0
        limit = None if self.max_duration is None or not rate else math.ceil(self.max_duration * rate)
        if first > 0:
            seek_to = max(0.0, first / rate - _PREROLL_SECONDS.get(stream.codec_context.name, 0.0))
            if seek_to > 0:
                container.seek(origin + int(seek_to * tb_den / tb_num), stream=stream, backward=True)
        if first == 0 and last is None:
            x = self._decode_all(container, stream, path, header, limit)
            self._check_shortfall(container, path, header, 0, None, x.shape[1])
            return x
        pieces: list[np.ndarray] = []
        position = None  # sample index of the next decoded sample, in the full decode's numbering
        total, fmt = 0, None
        scale = 2 * tb_den
        for frame in container.decode(stream):
            if frame.pts is not None and rate:  # integer arithmetic: Fractions cost more than decoding
                position = (2 * (frame.pts - origin) * tb_num * rate + tb_den) // scale
            elif position is None:
                position = 0
            n = frame.samples
            lo, hi = max(first - position, 0), n if last is None else min(n, last - position)
            position += n
            if hi <= lo:
                if last is not None and position >= last:
                    break
                continue
            if fmt is None:
                fmt = (frame.format.name, frame.format.is_planar, frame.layout.nb_channels)
            elif fmt != (frame.format.name, frame.format.is_planar, frame.layout.nb_channels):
                raise DecodeError(path, self.name, f"sample format changed mid-stream: {fmt} to {frame.format.name}")
            x = _frame_samples(frame, n)
            pieces.append(x[:, lo:hi] if (lo, hi) != (0, n) else x)
            total += hi - lo
            if limit is not None and total > limit:
                raise LimitError(path, self.name, f"decoded more than max_duration={self.max_duration:g} s; "
                                                  f"the header declared {header.get('duration')} s")
            if last is not None and position >= last:
                break
        channels = header["channels"] or (fmt[2] if fmt else 1)
        if not pieces:
            x = np.zeros((channels, 0), np.float32)
        else:  # one concatenation of the raw samples, then one conversion to float
            x = _to_float(np.concatenate(pieces, axis=1) if len(pieces) > 1 else pieces[0], fmt[0])
        if self.from_field is None:  # a video's track may end before the clip: that is padded, not an error
            self._check_shortfall(container, path, header, first, last, x.shape[1])
        return x

    def _decode_all(self, container: Any, stream: Any, path: str, header: SampleMeta, limit: int | None
                    ) -> np.ndarray:
        """The whole stream through an AudioFifo: frames are appended in C, converted once at the end."""
        fifo = av.AudioFifo()
        total = 0
        for frame in container.decode(stream):
            frame.pts = None  # the FIFO checks timestamps for gaps; a whole decode keeps every sample
            try:
                fifo.write(frame)
            except ValueError as err:  # the format, layout or rate changed mid-stream
                raise DecodeError(path, self.name, f"stream parameters changed mid-stream: {err}") from err
            total += frame.samples
            if limit is not None and total > limit:
                raise LimitError(path, self.name, f"decoded more than max_duration={self.max_duration:g} s; "
                                                  f"the header declared {header.get('duration')} s")
        if fifo.samples == 0:
            return np.zeros((header["channels"] or 1, 0), np.float32)
        frame = fifo.read()
        return _to_float(_frame_samples(frame, frame.samples), frame.format.name)

    def _check_shortfall(self, container: Any, path: str, header: SampleMeta, first: int, last: int | None,
                         got: int) -> None:
        if container.format.name in _EXACT_LENGTH_FORMATS:
            self.check_shortfall(path, header.get("num_samples"), header["sample_rate"], first, last, got)


_DTYPES = {"u8": np.uint8, "s16": np.int16, "s32": np.int32, "s64": np.int64, "flt": np.float32, "dbl": np.float64}


def _frame_samples(frame: Any, n: int) -> np.ndarray:
    """A frame's samples as (channels, samples) in its own dtype: views of its planes, no conversion."""
    name = frame.format.name
    dtype = _DTYPES[name.rstrip("p")]
    if frame.format.is_planar:
        planes = [np.frombuffer(p, dtype, count=n) for p in frame.planes]
        return planes[0][None] if len(planes) == 1 else np.stack(planes)
    channels = frame.layout.nb_channels
    return np.frombuffer(frame.planes[0], dtype, count=n * channels).reshape(n, channels).T


def _to_float(x: np.ndarray, name: str) -> np.ndarray:
    """Samples of FFmpeg format ``name`` to float32 in [-1, 1]."""
    if name in _INT_SCALE:
        if name.startswith("u8"):
            return (x.astype(np.float32) - 128.0) * np.float32(_INT_SCALE[name])
        return x.astype(np.float32) * np.float32(_INT_SCALE[name])
    return np.ascontiguousarray(x, dtype=np.float32)
