"""The audio decoder spec and what every audio backend shares: options, windows, limits."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from mediapipe.decoders.base import DecodeHint, Decoder, DecoderSpec, Limits
from mediapipe.errors import LimitError
from mediapipe.rng import SampleRNG


def audio(
    sample_rate: int | None = None,
    mono: bool = False,
    offset: float = 0.0,
    duration: float | None = None,
    random_crop: float | None = None,
    max_duration: float | None = None,
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
        backend: "auto" or "pyav".
    """
    if sample_rate is not None and sample_rate <= 0:
        raise ValueError(f"audio(sample_rate={sample_rate}): expected a positive rate in Hz or None")
    if offset < 0:
        raise ValueError(f"audio(offset={offset}): expected seconds >= 0")
    if duration is not None and duration <= 0:
        raise ValueError(f"audio(duration={duration}): expected positive seconds or None")
    if random_crop is not None and (random_crop <= 0 or duration is not None):
        raise ValueError(f"audio(random_crop={random_crop}): expected positive seconds, and no duration=")
    if max_duration is not None and max_duration <= 0:
        raise ValueError(f"audio(max_duration={max_duration}): expected positive seconds or None")
    return DecoderSpec("audio", backend, {
        "sample_rate": sample_rate, "mono": mono, "offset": offset, "duration": duration,
        "random_crop": random_crop, "max_duration": max_duration,
    })


class AudioDecoder(Decoder):
    """Base of the audio backends: options, the duration limit and the decode window."""

    kind: ClassVar[str] = "audio"
    collate: ClassVar[str] = "pad"
    reads_whole: ClassVar[bool] = False  # the demuxer seeks inside the file; no need to read it all

    def __init__(
        self,
        *,
        device: torch.device | None = None,
        limits: Limits = Limits(),
        sample_rate: int | None = None,
        mono: bool = False,
        offset: float = 0.0,
        duration: float | None = None,
        random_crop: float | None = None,
        max_duration: float | None = None,
    ) -> None:
        super().__init__(device=device, limits=limits)
        self.sample_rate, self.mono = sample_rate, mono
        self.offset, self.duration, self.random_crop = offset, duration, random_crop
        caps = [d for d in (max_duration, limits.max_duration) if d is not None]
        self.max_duration = min(caps) if caps else None

    def check_duration(self, seconds: float | None, path: str) -> None:
        if seconds is not None and self.max_duration is not None and seconds > self.max_duration:
            raise LimitError(path, self.name, f"header declares {seconds:.1f} s of audio, "
                                              f"above max_duration={self.max_duration:g} s")

    def window(self, hint: DecodeHint, rng: SampleRNG, total: float | None) -> tuple[float, float | None]:
        """(start, length) in seconds to decode; length None means to the end.

        A hint's window (start, duration) wins; else ``random_crop`` draws a start in
        [0, total - crop] from the sample's generator; else the fixed offset/duration.
        """
        if hint.window is not None:
            start, length = hint.window
            return max(0.0, float(start)), None if length is None else float(length)
        if self.random_crop is not None:
            if total is None or total <= self.random_crop:
                return 0.0, self.random_crop
            return rng.uniform(0.0, total - self.random_crop), self.random_crop
        return self.offset, self.duration


def describe(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in options.items() if v is not None)
