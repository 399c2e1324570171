"""The audio decoder spec and what every audio backend shares: options, windows, limits,
the length check, and the resampler."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import torch

from mediapipe.decoders.base import Decoded, DecodeHint, Decoder, size_of
from mediapipe.decoders.options import DecoderOptions, written_unless_default
from mediapipe.decoders.spec import DecoderSpec
from mediapipe.errors import DecodeError, LimitError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta

try:  # libsoxr: faster than swresample, and closer to an ideal filter
    import soxr as _soxr
except ImportError:  # pragma: no cover - exercised by monkeypatching in the tests
    _soxr = None

# more samples per byte than any codec's stream holds (FLAC's longest block, 65535 samples of
# silence, still takes a frame of several bytes): a header that claims more is corrupt
MAX_SAMPLES_PER_BYTE = 1 << 16
SHORTFALL_TOLERANCE = (0.05, 0.01)  # seconds, fraction: decoding may end this much early
RESAMPLE_MARGIN = 0.02  # seconds decoded either side of a resampled window, for the filter to settle
ABSENT_CHANNELS = 2  # channels of the empty result for a video without audio (1 with mono=True)
# A source's meta key naming which channels of which files make a sample's audio (a Lhotse cut's
# channels): ((path, channel indices in that file), ...), the first file being the sample's blob.
# Absent: every channel of the blob.
CHANNEL_SOURCES = "channel_sources"
# A source's meta key giving the rate its manifest declares for the sample's audio (a Lhotse
# recording's sampling_rate). With sample_rate=None the sample is decoded at that rate, as
# cut.load_audio() gives it: an Opus file, which FFmpeg decodes at 48 kHz, comes at the 16 kHz
# its recording says. Absent: the file's own rate.
SOURCE_RATE = "source_sample_rate"
# seconds by which one file of a sample whose channels lie in several may end before the others
# and be zero-padded (Lhotse's default audio duration mismatch tolerance); more is an error
CHANNEL_LENGTH_TOLERANCE = 0.5


@dataclass(frozen=True)
class AudioOptions(DecoderOptions):
    """The options of `audio` (documented there), as every audio backend reads them."""

    factory: ClassVar[str] = "audio"

    sample_rate: int | None = None
    mono: bool = False
    offset: float = 0.0
    duration: float | None = None
    random_crop: float | None = None
    max_duration: float | None = None
    from_field: str | None = written_unless_default(None)

    def check(self) -> None:
        if self.sample_rate is not None and self.sample_rate <= 0:
            raise self.refuse("sample_rate", "expected a positive rate in Hz or None")
        if self.offset < 0:
            raise self.refuse("offset", "expected seconds >= 0")
        for name in ("duration", "max_duration"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise self.refuse(name, "expected positive seconds or None")
        if self.random_crop is not None and (self.random_crop <= 0 or self.duration is not None):
            raise self.refuse("random_crop", "expected positive seconds, and no duration=")
        if self.from_field is not None and (self.offset or self.duration is not None or self.random_crop is not None):
            raise self.refuse("from_field", "expected a field name, and no offset, duration or random_crop (the "
                                            "window is the field's clips)")


def audio(
    sample_rate: int | None = AudioOptions.sample_rate,
    mono: bool = AudioOptions.mono,
    offset: float = AudioOptions.offset,
    duration: float | None = AudioOptions.duration,
    random_crop: float | None = AudioOptions.random_crop,
    max_duration: float | None = AudioOptions.max_duration,
    from_field: str | None = AudioOptions.from_field,
    backend: str = "auto",
) -> DecoderSpec:
    """An audio decoder: WAV, FLAC, Ogg Vorbis, Opus, MP3, AAC/M4A, or a video file's audio track.

    Output: float32 (C, N) in [-1, 1]; batches hold ``<field>`` (B, C, N_max), zero-padded,
    and ``<field>_lengths`` int64 (B,) in samples.
    Args:
        sample_rate: resample to this rate in Hz in the decoder; None keeps the file's rate.
        mono: average the channels down to one (before resampling, which is then cheaper).
        offset, duration: a fixed window in seconds; only that window is decoded (seek, then
            decode forward). ``duration=None`` reads to the end.
        random_crop: seconds; each sample gets a window of this length at a start drawn from
            its keyed generator (files shorter than that are returned whole).
        max_duration: seconds; files whose header declares more are rejected with
            `LimitError` before anything is decoded. The pipeline's ``max_duration`` applies too.
        from_field: the name of a video field of the same pipeline: decode that field's file's
            audio track over the time each of its clips plays (first frame's time to the last
            frame's end), ``round(duration * rate)`` samples per clip, zeros where the track starts
            later; a track that ends early gives fewer (``<field>_lengths``), a file without audio
            none (``(2, 0)``, ``(1, 0)`` with ``mono``), and ``<field>_present`` (bool) says which
            had audio. Several clips per video give (N, C, n), shorter clips zero-padded.
        backend: "auto", "soundfile" (libsndfile for FLAC and WAV, the pyav backend for the
            rest; what "auto" picks where the soundfile package is installed) or "pyav".
    """
    options = AudioOptions(sample_rate=sample_rate, mono=mono, offset=offset, duration=duration,
                           random_crop=random_crop, max_duration=max_duration, from_field=from_field)
    return DecoderSpec("audio", backend, options)


@dataclass(frozen=True)
class ChannelPick:
    """The channels of one file a sample takes, in order (None: all of them), and whether they
    are then averaged down to one (``mono``)."""

    indices: tuple[int, ...] | None
    mix: bool

    def apply(self, x: np.ndarray, path: str, decoder: str) -> np.ndarray:
        """(C, n) samples to the picked channels, averaged when ``mix``; a `DecodeError` where the
        manifest names a channel the file does not have."""
        if self.indices is not None:
            if max(self.indices) >= x.shape[0]:
                raise DecodeError(path, decoder, f"the manifest maps channel index {max(self.indices)} of this "
                                                 f"file, which has {x.shape[0]} channel{'s' * (x.shape[0] != 1)}")
            if self.indices != tuple(range(x.shape[0])):
                x = x[list(self.indices)]
        if self.mix and x.shape[0] > 1:
            x = x.mean(axis=0, keepdims=True, dtype=np.float32)
        return x


@dataclass(frozen=True)
class GridWindow:
    """Output samples [first, first + count) on the output rate's grid, sample 0 being the
    track's first sample: a window of a resampled decode is the same slice of the whole
    file's resampled decode. ``first < 0`` lies before the track (zeros); ``count`` None: to the end."""

    first: int
    count: int | None


class AudioDecoder(Decoder):
    """Base of the audio backends: options, the duration limit and the decode window."""

    kind: ClassVar[str] = "audio"
    collate: ClassVar[str] = "pad"
    reads_whole: ClassVar[bool] = False  # the demuxer seeks inside the file; no need to read it all
    options_type: ClassVar[type[DecoderOptions]] = AudioOptions
    options: AudioOptions

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        caps = [d for d in (self.options.max_duration, self.limits.max_duration) if d is not None]
        self.max_duration = min(caps) if caps else None  # the option's or the pipeline's, the smaller

    @classmethod
    def side_fields_for(cls, options: AudioOptions) -> tuple[str, ...]:
        return ("present",) if options.from_field else ()

    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> Any:
        """float32 (C, N) of the window (see `grid_windows`), of the channels the source names
        (``meta[CHANNEL_SOURCES]``, else all); with ``from_field``, a `Decoded` with ``present``."""
        declared = meta.get(SOURCE_RATE)
        if self.options.sample_rate is None and isinstance(declared, int) and declared > 0:
            return self.at_rate(declared).decode(blob, hint, rng, {k: v for k, v in meta.items() if k != SOURCE_RATE})
        parts = meta.get(CHANNEL_SOURCES)
        if not parts:
            out = self.decode_file(blob, hint, rng, meta, ChannelPick(None, self.options.mono))
        elif len(parts) == 1:
            out = self.decode_file(blob, hint, rng, meta, ChannelPick(tuple(parts[0][1]), self.options.mono))
        else:
            out = self.decode_files(blob, parts, hint, rng, meta)
        segment = meta.get("segment")
        if segment is not None and hint.window is not None and tuple(hint.window) == tuple(segment) \
                and self.options.from_field is None:
            self.check_segment(blob, out, segment)
        return out

    def check_segment(self, blob: Blob, out: torch.Tensor, segment: tuple[float, float]) -> None:
        """A manifest's utterance (``meta["segment"]``: start, duration s) that its file ends well
        before is a `DecodeError` naming both ends: its transcript would go with less audio than
        it was written for. (A window of ``audio(offset=, duration=)`` may pass a file's end.)"""
        start, length = segment
        rate = self.options.sample_rate or int(self.probe(blob)["sample_rate"])
        expected = round((start + length) * rate) - round(start * rate)
        seconds, fraction = SHORTFALL_TOLERANCE
        if out.shape[-1] < expected - max(seconds * rate, fraction * expected):
            raise DecodeError(blob.name, self.name, f"the manifest's segment [{start:.3f}, {start + length:.3f}) s "
                                                    f"passes the end of the audio, which ends at "
                                                    f"{start + out.shape[-1] / rate:.3f} s (a truncated file, or "
                                                    f"a manifest written for another one)")

    def at_rate(self, rate: int) -> AudioDecoder:
        """This decoder with ``sample_rate=rate`` (for a sample whose source declares its rate)."""
        twin = copy.copy(self)
        twin.options = replace(self.options, sample_rate=rate)
        return twin

    def decode_file(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta,
                    pick: ChannelPick) -> Any:
        """`decode` of one file's ``pick`` of channels: what each backend implements."""
        raise NotImplementedError

    def decode_files(self, blob: Blob, parts: Any, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> Any:
        """A sample whose channels lie in several files (a recording of one file per microphone):
        each file's channels over the same window at one rate, stacked in the source's order (a
        file that ends up to `CHANNEL_LENGTH_TOLERANCE` early zero-padded, as Lhotse does; more, or
        files of different rates with ``sample_rate=None``, a `DecodeError`), then averaged with ``mono``."""
        if self.options.from_field is not None:
            raise DecodeError(blob.name, self.name, f"audio(from_field={self.options.from_field!r}) reads one file; this "
                                                    f"sample's channels lie in {len(parts)} files")
        pieces, rates = [], []
        for i, (path, indices) in enumerate(parts):
            part = blob if i == 0 else Blob(path, path=path)
            part.check()
            if self.options.sample_rate is None:  # each file at its own rate: they must share one
                rates.append((part.name, int(self.probe(part)["sample_rate"])))
                if rates[-1][1] != rates[0][1]:
                    raise DecodeError(part.name, self.name, f"this file is {rates[-1][1]} Hz and {rates[0][0]} of "
                                                            f"the same sample {rates[0][1]} Hz: pass "
                                                            f"audio(sample_rate=...) to decode both at one rate")
            x = self.decode_file(part, hint, copy.copy(rng), meta, ChannelPick(tuple(indices), False))
            pieces.append((part.name, x.numpy()))
        longest_name, longest = max(((name, p.shape[1]) for name, p in pieces), key=lambda item: item[1])
        rate = self.options.sample_rate or rates[0][1]
        for name, p in pieces:
            if longest - p.shape[1] > CHANNEL_LENGTH_TOLERANCE * rate:
                raise DecodeError(name, self.name, f"this file gives {p.shape[1] / rate:.3f} s of the sample's window "
                                                   f"and {longest_name} {longest / rate:.3f} s: the files of one "
                                                   f"recording's channels differ in length by more than "
                                                   f"{CHANNEL_LENGTH_TOLERANCE:g} s")
        x = np.concatenate([np.pad(p, ((0, 0), (0, longest - p.shape[1]))) for _, p in pieces])
        return torch.from_numpy(ChannelPick(None, self.options.mono).apply(x, blob.name, self.name))

    def no_samples(self, path: str, windows: list[GridWindow], rate: int, duration: float | None) -> DecodeError:
        """The error for a window that holds no sample: where it starts, and how long the file is."""
        start = min(w.first for w in windows) / self.out_rate(rate)
        length = "" if duration is None else f", past the end of the audio ({duration:.3f} s long)"
        return DecodeError(path, self.name, f"no audio samples: the window starts at {start:.3f} s{length}")

    def check_duration(self, seconds: float | None, path: str, rate: int = 0, blob: Blob | None = None) -> None:
        """`LimitError` when the header declares more than ``max_duration``; a `DecodeError` saying
        the file is truncated or corrupt when that claim is more than its size could hold."""
        if seconds is None or self.max_duration is None or seconds <= self.max_duration:
            return
        nbytes = size_of(blob)
        if rate > 0 and nbytes is not None and seconds * rate > nbytes * MAX_SAMPLES_PER_BYTE:
            raise DecodeError(path, self.name, f"truncated or corrupt: the header declares {seconds * rate:.0f} "
                                               f"samples ({seconds:.1f} s at {rate} Hz) in a file of {nbytes} bytes, "
                                               f"more than any audio codec stores in so few")
        raise LimitError(path, self.name, f"header declares {seconds:.1f} s of audio, "
                                          f"above max_duration={self.max_duration:g} s")

    def check_shortfall(self, path: str, declared: int | None, rate: int, first: int, last: int | None,
                        got: int) -> None:
        """DecodeError when a decode of [first, last) ends well before the ``declared`` length:
        a truncated or corrupt file whose header promised more."""
        if declared is None or not rate:
            return
        end = declared if last is None else min(last, declared)
        expected = max(0, end - first)
        seconds, fraction = SHORTFALL_TOLERANCE
        if got < expected - max(seconds * rate, fraction * expected):
            raise DecodeError(path, self.name, f"truncated or corrupt: decoded {got / rate:.3f} s of the "
                                               f"{expected / rate:.3f} s the header declares")

    def out_rate(self, rate: int) -> int:
        return self.options.sample_rate or rate

    def grid_windows(self, hint: DecodeHint, rng: SampleRNG, total: float | None, rate: int,
                     track_start: float = 0.0) -> tuple[list[GridWindow], bool]:
        """The windows to decode on the output grid, and whether they stack along a leading dim.

        The time spans of a ``from_field`` video (``hint.span``, on the file's timeline; the
        track starts at ``track_start`` seconds on it) give one window per clip; else one from
        `window`. A window starts on the output rate's own grid, ``round(start * out_rate)``.
        """
        out = self.out_rate(rate)
        if self.options.from_field is not None:
            if hint.span is None:
                raise ValueError(f"audio(from_field={self.options.from_field!r}) got no time span from that field")
            windows = [GridWindow(round((s - track_start) * out), max(0, round((e - s) * out)))
                       for s, e in hint.span.spans]
            return windows, hint.span.stacked
        start, length = self.window(hint, rng, total)
        return [GridWindow(round(start * out), None if length is None else round(length * out))], False

    def native_range(self, window: GridWindow, rate: int) -> tuple[int, int | None]:
        """The native samples [lo, hi) that give ``window`` (hi None: to the end): the same ones
        without resampling; else from a sample where both rates' grids meet (a multiple of
        rate / gcd), with `RESAMPLE_MARGIN` either side for the filter, so that the resampled
        slice equals the whole file's resampled decode there."""
        out = self.out_rate(rate)
        if out == rate:
            lo = max(0, window.first)
            return lo, None if window.count is None else max(lo, window.first + window.count)
        step = rate // math.gcd(rate, out)
        margin = math.ceil(RESAMPLE_MARGIN * rate)
        lo = max(0, (window.first * rate // out - margin) // step * step)
        if window.count is None:
            return lo, None
        return lo, max(lo, -(-(window.first + window.count) * rate // out) + margin)

    def to_window(self, x: np.ndarray, lo: int, rate: int, window: GridWindow) -> np.ndarray:
        """Native samples ``x`` (C, n) decoded from native sample ``lo`` (`native_range`), their
        channels picked (`ChannelPick`), to the window's output samples: resampled, cut on the
        output grid, zeros before the track. Fewer than ``count`` where the track ends early."""
        out = self.out_rate(rate)
        origin = lo
        if out != rate:
            x = resample(x, rate, out)
            origin = lo * out // rate  # exact: lo is on both grids
        begin = window.first - origin
        end = None if window.count is None else begin + window.count
        lead = max(0, -begin)
        x = x[:, max(0, begin) : None if end is None else max(0, end)]
        if lead:
            x = np.concatenate([np.zeros((x.shape[0], min(lead, window.count or lead)), np.float32), x], axis=1)
        return np.ascontiguousarray(x, dtype=np.float32)

    def result(self, pieces: list[np.ndarray], stacked: bool, present: bool = True) -> Any:
        """The output: (C, n), or (N, C, n) for stacked windows (shorter ones zero-padded);
        a `Decoded` with ``present`` for a ``from_field`` decoder."""
        if stacked:
            longest = max(p.shape[1] for p in pieces)
            value = torch.from_numpy(np.stack([np.pad(p, ((0, 0), (0, longest - p.shape[1]))) for p in pieces]))
        else:
            value = torch.from_numpy(pieces[0])
        if self.options.from_field is None:
            return value
        return Decoded(value, {"present": present})

    def absent(self, hint: DecodeHint) -> Decoded:
        """What a ``from_field`` decoder gives for a file without an audio track: no samples."""
        channels = 1 if self.options.mono else ABSENT_CHANNELS
        count = len(hint.span.spans) if hint.span is not None else 1
        empty = [np.zeros((channels, 0), np.float32)] * count
        return self.result(empty, hint.span is not None and hint.span.stacked, present=False)

    def window(self, hint: DecodeHint, rng: SampleRNG, total: float | None) -> tuple[float, float | None]:
        """(start, length) in seconds to decode; length None means to the end.

        A hint's window (start, duration) wins; else ``random_crop`` draws a start in
        [0, total - crop] from the sample's generator; else the fixed offset/duration.
        """
        if hint.window is not None:
            start, length = hint.window
            return max(0.0, float(start)), None if length is None else float(length)
        if self.options.random_crop is not None:
            if total is None or total <= self.options.random_crop:
                return 0.0, self.options.random_crop
            return rng.uniform(0.0, total - self.options.random_crop), self.options.random_crop
        return self.options.offset, self.options.duration


def resample(x: np.ndarray, rate: int, target: int) -> np.ndarray:
    """float32 (C, N) from ``rate`` to ``target`` Hz: round(N * target / rate) samples per channel.

    libsoxr's HQ filter where the soxr package is installed (faster, and closer to the ideal
    band-limited result), else FFmpeg's swresample. Both are single-threaded, which suits a
    loader worker. (torchaudio's sinc resampler is not used: its OpenMP threads compete with
    the other workers' in a process with several.)
    """
    n = round(x.shape[1] * target / rate)
    if x.shape[1] == 0:
        return np.zeros((x.shape[0], 0), np.float32)
    if _soxr is not None:
        x = np.asarray(x, dtype=np.float32)
        y = _soxr.resample(x[0] if x.shape[0] == 1 else x.T, rate, target, quality="HQ")
        y = y[None] if y.ndim == 1 else y.T
    else:
        y = resample_swr(x, rate, target)
    if y.shape[1] < n:  # the filters may round the length down by a sample
        y = np.pad(y, ((0, 0), (0, n - y.shape[1])))
    return np.ascontiguousarray(y[:, :n], dtype=np.float32)


def resample_swr(x: np.ndarray, rate: int, target: int) -> np.ndarray:
    """float32 (C, N) from ``rate`` to ``target`` Hz with FFmpeg's swresample, in one call."""
    import av

    layout = {1: "mono", 2: "stereo"}.get(x.shape[0])
    if layout is None:  # swresample wants a named layout; resample channel by channel
        return np.concatenate([resample_swr(c[None], rate, target) for c in x], axis=0)
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(x, dtype=np.float32), format="fltp", layout=layout)
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="fltp", layout=layout, rate=target)
    out = [f.to_ndarray() for f in resampler.resample(frame)] + [f.to_ndarray() for f in resampler.resample(None)]
    y = np.concatenate(out, axis=1) if out else np.zeros((x.shape[0], 0), np.float32)
    return y[:, : round(x.shape[1] * target / rate)]
