"""PyAV audio backend: whatever FFmpeg decodes, to float32 planar, with seek, down-mix and resample.

Of several audio tracks (a film's commentary, a dub) it decodes the one FFmpeg's command line
picks: the default-flagged track, else the one with the most channels, else the first.

A window decode seeks a little before its start (codecs with overlapping frames, such as
Opus, MP3 and AAC, need a few frames to settle), decodes forward, and places each frame at
its first sample's index in a full decode, so the window equals the same slice of a full
decode: by its timestamp where a tick is no longer than a sample (MP4, Ogg), by counting the
samples decoded from a frame whose index is known where stamps are coarser (Matroska, WebM).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import av
import numpy as np

from mediapipe.decoders.audio import AudioDecoder, ChannelPick, audio, resample  # noqa: F401  (re-exported)
from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.registry import register
from mediapipe.decoders.streams import main_stream
from mediapipe.errors import DecodeError, LimitError
from mediapipe.reasons import reason
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta

# Containers whose header length is exact (stream info, sample counts, last granule), so a
# decode that comes out shorter means a truncated or corrupt file. MP3 and ADTS durations
# are estimated from the bit rate and are not checked.
_EXACT_LENGTH_FORMATS = ("wav", "flac", "ogg", "mov,mp4,m4a,3gp,3g2,mj2", "w64", "aiff", "matroska,webm")
_PREROLL_SECONDS = {"opus": 0.3, "mp3": 0.2, "mp3float": 0.2, "aac": 0.2, "vorbis": 0.2}
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

    def decode_file(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta, pick: ChannelPick) -> Any:
        """float32 (C, N) of the window (see `AudioDecoder.grid_windows`) and ``pick``'s channels;
        with ``from_field``, a `Decoded` of the clips' audio and side field ``present``."""
        container = self._open(blob, absent_ok=self.options.from_field is not None)
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
            x = self._decode_window(container, blob, header, lo, hi)
        except (DecodeError, LimitError):
            raise
        except av.FFmpegError as err:  # FFmpeg refused a packet: a damaged stream
            raise DecodeError(blob.name, self.name, f"truncated or corrupt: {reason(err)}") from err
        finally:
            container.close()
        if x.shape[1] == 0 and self.options.from_field is None:
            raise self.no_samples(blob.name, windows, rate, header.get("duration"))
        x = pick.apply(x, blob.name, self.name)
        pieces = [self.to_window(x[:, r0 - lo : None if r1 is None else r1 - lo], r0, rate, w)
                  for w, (r0, r1) in zip(windows, ranges)]
        return self.result(pieces, stacked)

    def _decode_window(self, container: Any, blob: Blob, header: SampleMeta, first: int,
                       last: int | None) -> np.ndarray:
        """Native samples [first, last) of the track (last None: to the end), as float32 (C, n)."""
        stream = main_stream(container.streams.audio)
        limit = None if self.max_duration is None or not header["sample_rate"] \
            else math.ceil(self.max_duration * header["sample_rate"])
        if first == 0 and last is None:
            x = self._decode_all(container, stream, blob.name, header, limit)
            self._check_shortfall(container, blob.name, header, 0, None, x.shape[1])
            return x
        try:
            frames = _placed_frames(container, stream, header["sample_rate"], first)
            x = self._collect(frames, blob.name, header, first, last, limit)
        except _Misplaced:  # the seek point's sample cannot be known: decode from the start, counting
            fresh = self._open(blob)
            try:
                x = self._collect(_counted(fresh.decode(main_stream(fresh.streams.audio))), blob.name, header,
                                  first, last, limit)
            finally:
                fresh.close()
        if self.options.from_field is None:  # a video's track may end before the clip: that is padded, not an error
            self._check_shortfall(container, blob.name, header, first, last, x.shape[1])
        return x

    def _collect(self, frames: Iterator[tuple[Any, int]], path: str, header: SampleMeta, first: int,
                 last: int | None, limit: int | None) -> np.ndarray:
        """The samples [first, last) of frames placed at their first sample's index in the whole
        decode's numbering, as float32 (C, n)."""
        pieces: list[np.ndarray] = []
        total, fmt = 0, None
        for frame, position in frames:
            n = frame.samples
            lo, hi = max(first - position, 0), n if last is None else min(n, last - position)
            if hi <= lo:
                if last is not None and position + n >= last:
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
            if last is not None and position + n >= last:
                break
        channels = header["channels"] or (fmt[2] if fmt else 1)
        if not pieces:
            return np.zeros((channels, 0), np.float32)
        # one concatenation of the raw samples, then one conversion to float
        return _to_float(np.concatenate(pieces, axis=1) if len(pieces) > 1 else pieces[0], fmt[0])

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


class _Misplaced(Exception):
    """A frame after a seek lies off where the stream's frame grid puts it: place by counting instead."""


def _placed_frames(container: Any, stream: Any, rate: int, first: int) -> Iterator[tuple[Any, int]]:
    """The frames from a little before native sample ``first``, each with the index of its first
    sample in the whole decode's numbering.

    Where a timestamp tick is no longer than a sample (MP4, Ogg, WAV), a frame's timestamp gives
    its index. Where it is longer (Matroska and WebM stamp whole milliseconds, up to 24 samples
    at 48 kHz), the stamp only says roughly where a frame is: frames are placed by counting the
    samples decoded before them (`_seek_on_grid`, else from the start).
    """
    tb = stream.time_base or Fraction(1, 1)
    seek_to = max(0.0, first / rate - _PREROLL_SECONDS.get(stream.codec_context.name, 0.0)) if first > 0 else 0.0
    origin = stream.start_time or 0
    if rate * tb.numerator <= tb.denominator:
        if seek_to > 0:
            container.seek(origin + int(seek_to * tb.denominator / tb.numerator), stream=stream, backward=True)
        return _stamped(container.decode(stream), origin, tb, rate)
    return _seek_on_grid(container, stream, rate, tb, seek_to, first)


def _stamped(frames: Iterator[Any], origin: int, tb: Fraction, rate: int) -> Iterator[tuple[Any, int]]:
    """Frames placed by their timestamps (rounded to the nearest sample), counted on where one has none."""
    num, den = tb.numerator, tb.denominator
    position = None
    for frame in frames:
        if frame.pts is not None:  # integer arithmetic: Fractions cost more than decoding
            position = (2 * (frame.pts - origin) * num * rate + den) // (2 * den)
        elif position is None:
            position = 0
        yield frame, position
        position += frame.samples


def _counted(frames: Iterator[Any], position: int = 0) -> Iterator[tuple[Any, int]]:
    """Frames decoded from the stream's start, placed by the samples decoded before them."""
    for frame in frames:
        yield frame, position
        position += frame.samples


def _seek_on_grid(container: Any, stream: Any, rate: int, tb: Fraction, seek_to: float, first: int
                  ) -> Iterator[tuple[Any, int]]:
    """Frames placed exactly under coarse timestamps. The stream's first frames are decoded to
    an anchor (the second frame that holds samples: any samples the codec skips at the start are
    behind it), whose index is counted. Every packet of the codecs in `_grid` holds a multiple of
    a fixed number of samples, wider than two ticks, so after a seek a frame's stamp, counted from
    the anchor's, is rounded onto that grid, and the frames after it are counted on from there.
    A frame whose stamp strays from its counted place by more than a tick, or a seek that lands
    after sample ``first``, raises `_Misplaced`.
    Without a grid (Vorbis, FLAC, PCM), or when the window is near the start, frames are counted
    from the start."""
    frames = container.decode(stream)
    probed: list[tuple[Any, int]] = []
    position, holding, anchor = 0, 0, None
    for frame in frames:
        probed.append((frame, position))
        position += frame.samples
        holding += frame.samples > 0
        if holding == 2:
            anchor = probed[-1]
            break
    tick = rate * tb.numerator / tb.denominator  # samples per timestamp tick
    grid = _grid(stream.codec_context.name, anchor[0].samples, rate) if anchor is not None else None
    if (grid is None or grid <= 2 * (tick + 1) or anchor[0].pts is None  # type: ignore[index]
            or seek_to * rate <= position):
        yield from probed
        yield from _counted(frames, position)
        return
    anchor_frame, anchor_at = anchor  # type: ignore[misc]
    origin = stream.start_time or 0
    container.seek(origin + int(seek_to * tb.denominator / tb.numerator), stream=stream, backward=True)
    placed = None
    for frame in container.decode(stream):
        if frame.pts is None:
            raise _Misplaced
        if frame.pts <= anchor_frame.pts:  # before the window, and maybe still in the codec's skipped start
            continue
        stamped = anchor_at + (frame.pts - anchor_frame.pts) * tick
        if placed is None:
            placed = anchor_at + round((stamped - anchor_at) / grid) * grid
            if placed > first:
                raise _Misplaced
        if abs(stamped - placed) > tick + 1:
            raise _Misplaced
        yield frame, placed
        placed += frame.samples


# codecs whose every packet holds a multiple of a fixed number of samples: that number from the
# anchor frame's size (a stream's frames all have it), or as a function of the rate (an Opus frame
# holds a multiple of rate / 400 samples)
_FIXED_FRAMES = {"aac", "aac_fixed", "aac_latm", "libfdk_aac", "mp1", "mp1float", "mp2", "mp2float", "mp3",
                 "mp3float", "ac3", "ac3_fixed"}


def _grid(codec: str, anchor_samples: int, rate: int) -> int | None:
    """The number of samples every packet of ``codec`` holds a multiple of; None where unknown."""
    if codec in _FIXED_FRAMES:
        return anchor_samples
    if codec in ("opus", "libopus"):
        return rate // 400 if rate % 400 == 0 else None
    if codec == "eac3":  # audio blocks of 256 samples, 1 to 6 per frame
        return 256
    return None


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
