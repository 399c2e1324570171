"""Features ops: waveforms to spectrograms (STFT, mel, log-mel, MFCC) and the ops on features
(decibels, SpecAugment), all in the batch stage on the padded batch and its lengths.

Each transforms one field, as the audio ops of `mediapipe.augment.audio` do (same base): the
spectrogram ops turn an audio field (B, C, N) into a features field (B, C, F, T) and write
``<out>_lengths`` in frames; `AmplitudeToDB` and `SpecAugment` take features. Padded frames
never leak into a valid value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from mediapipe.augment.audio import _AudioOp
from mediapipe.augment.base import Params, check_positive
from mediapipe.augment.functional import audio as F
from mediapipe.fields import FEATURES, FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

__all__ = ["MFCC", "AmplitudeToDB", "LogMelSpectrogram", "MelSpectrogram", "SpecAugment", "Spectrogram"]

WINDOWS = tuple(F.WINDOWS)


@dataclass(frozen=True)
class Spectrogram(_AudioOp):
    """|STFT|**power: (B, C, N) to (B, C, n_fft // 2 + 1, T); ``<out>_lengths`` in frames. Stage: batch.

    Each sample is reflect-padded at its own ends (``center=True``), so its frames equal those
    of the sample alone; frames past its length are zero. Turns an audio field into features.
    Args:
        n_fft, hop_length, win_length (default n_fft, at most n_fft): ints, in samples. window:
        "hann" (periodic), "hamming" or "rectangular". power: 2 (power), 1 (magnitude), > 0.
    """

    n_fft: int = 400
    hop_length: int = 160
    win_length: int | None = None
    window: str = "hann"
    power: float = 2.0
    center: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, n_fft=self.n_fft, hop_length=self.hop_length, win_length=self.win_length,
                       power=self.power)
        if self.win_length is not None and self.win_length > self.n_fft:
            raise ValueError(f"{type(self).__name__}(win_length={self.win_length}): expected <= n_fft={self.n_fft}")
        if self.window not in WINDOWS:
            raise ValueError(f"{type(self).__name__}(window={self.window!r}): expected one of {WINDOWS}")

    def output_type(self, field_type: FieldType) -> FieldType:
        return FieldType(FEATURES)

    def _stft(self, x: torch.Tensor, lengths: torch.Tensor, masked: bool = True
              ) -> tuple[torch.Tensor, torch.Tensor]:
        return F.spectrogram(x, lengths, n_fft=self.n_fft, hop_length=self.hop_length,
                             win_length=self.win_length, window=self.window, power=self.power,
                             center=self.center, zero_padding_frames=masked)

    def apply_batch(self, x, lengths, params):
        return self._stft(x, lengths)


@dataclass(frozen=True)
class MelSpectrogram(Spectrogram):
    """Waveform to mel power spectrogram (B, C, n_mels, T); ``<out>_lengths`` in frames. Stage: batch.

    Args: as `Spectrogram`, plus sample_rate (Hz, > 0), n_mels (> 0), f_min / f_max (Hz,
    0 <= f_min < f_max; f_max None is sample_rate / 2), norm (None or "slaney") and mel_scale
    ("htk" or "slaney"), as torchaudio.
    """

    sample_rate: int = 16000
    n_mels: int = 80
    f_min: float = 0.0
    f_max: float | None = None
    norm: str | None = None
    mel_scale: str = "htk"

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        check_positive(self, sample_rate=self.sample_rate, n_mels=self.n_mels)
        f_max = self.f_max if self.f_max is not None else self.sample_rate / 2
        if not 0.0 <= self.f_min < f_max:
            raise ValueError(f"{name}(f_min={self.f_min}, f_max={self.f_max}): expected 0 <= f_min < f_max")
        if self.norm not in (None, "slaney"):
            raise ValueError(f"{name}(norm={self.norm!r}): expected None or 'slaney'")
        if self.mel_scale not in ("htk", "slaney"):
            raise ValueError(f"{name}(mel_scale={self.mel_scale!r}): expected 'htk' or 'slaney'")

    def _mel(self, x: torch.Tensor, lengths: torch.Tensor, masked: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        bank = (self.n_fft // 2 + 1, float(self.f_min), float(self.f_max or self.sample_rate / 2), self.n_mels,
                self.sample_rate, self.norm, self.mel_scale, str(x.device))
        if self.power == 2.0:  # the common case: |z|^2 folded into the mel projection
            mel, frames = F.mel_power_spectrogram(x, lengths, F.mel_filters_paired(*bank), n_fft=self.n_fft,
                                                  hop_length=self.hop_length, win_length=self.win_length,
                                                  window=self.window, center=self.center)
        else:
            spec, frames = self._stft(x, lengths, masked=False)  # the (smaller) mel output is masked instead
            mel = F.mel_scale(spec, F.mel_filters(*bank))
        return (F.zero_padding(mel, frames) if masked else mel), frames

    def apply_batch(self, x, lengths, params):
        return self._mel(x, lengths)


@dataclass(frozen=True)
class LogMelSpectrogram(MelSpectrogram):
    """`MelSpectrogram` then `AmplitudeToDB` (10 log10, floored at ``amin``; ``top_db`` per sample),
    in one op. Padded frames are ``pad_value``. Stage: batch."""

    amin: float = 1e-10
    top_db: float | None = None
    pad_value: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, amin=self.amin, top_db=self.top_db)

    def apply_batch(self, x, lengths, params):
        mel, frames = self._mel(x, lengths, masked=False)  # amplitude_to_db sets the padded frames
        return F.amplitude_to_db(mel, frames, amin=self.amin, top_db=self.top_db, pad_value=self.pad_value,
                                 inplace=True), frames


@dataclass(frozen=True)
class AmplitudeToDB(_AudioOp):
    """multiplier * log10(max(x, amin)) on a (B, C, F, T) spectrogram; ``top_db`` floors each sample at
    its own peak minus top_db over its valid frames; padded frames are ``pad_value``. Stage: batch.

    ``stype``: "power" (multiplier 10) or "magnitude" (20); amin > 0; top_db None or > 0.
    """

    stype: str = "power"
    amin: float = 1e-10
    top_db: float | None = None
    pad_value: float = 0.0
    accepts: ClassVar[frozenset[str]] = frozenset({FEATURES})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, amin=self.amin, top_db=self.top_db)
        if self.stype not in ("power", "magnitude"):
            raise ValueError(f"AmplitudeToDB(stype={self.stype!r}): expected 'power' or 'magnitude'")

    def apply_batch(self, x, lengths, params):
        mult = 10.0 if self.stype == "power" else 20.0
        return F.amplitude_to_db(x, lengths, multiplier=mult, amin=self.amin, top_db=self.top_db,
                                 pad_value=self.pad_value), lengths


@dataclass(frozen=True)
class MFCC(MelSpectrogram):
    """Waveform to MFCC (B, C, n_mfcc, T), as torchaudio: mel power, to dB (top_db per sample), DCT-II
    (``dct_norm`` "ortho"). ``<out>_lengths`` in frames; padded frames are zero. Stage: batch."""

    n_mfcc: int = 40
    top_db: float | None = 80.0
    dct_norm: str | None = "ortho"
    amin: float = 1e-10

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, n_mfcc=self.n_mfcc, amin=self.amin, top_db=self.top_db)
        if self.n_mfcc > self.n_mels:
            raise ValueError(f"MFCC(n_mfcc={self.n_mfcc}): expected at most n_mels={self.n_mels}")
        if self.dct_norm not in (None, "ortho"):
            raise ValueError(f"MFCC(dct_norm={self.dct_norm!r}): expected None or 'ortho'")

    def apply_batch(self, x, lengths, params):
        mel, frames = self._mel(x, lengths, masked=False)
        db = F.amplitude_to_db(mel, frames, amin=self.amin, top_db=self.top_db, inplace=True)
        dct = F.dct_matrix(self.n_mfcc, self.n_mels, self.dct_norm, str(db.device))
        out = torch.matmul(db.transpose(-1, -2), dct).transpose(-1, -2)
        return out * F.valid_mask(frames, out.shape[-1])[:, None, None, :], frames


@dataclass(frozen=True)
class SpecAugment(_AudioOp):
    """Time and frequency masking (Park et al. 2019) on (B, C, F, T) features. Stage: batch.

    Per sample: the number of frequency masks is drawn from ``freq_masks`` (low, high), each
    of width uniform in [0, freq_width] bins at a uniform start; likewise in time over the
    sample's valid frames (``<key>_lengths``), with widths capped at ``time_width`` frames and
    at ``max_time_ratio`` (in [0, 1]) of the sample's frames. Masked values become ``value``.
    Counts and widths are ints >= 0 (bins and frames).
    """

    freq_masks: int | tuple[int, int] = (2, 2)
    freq_width: int = 27
    time_masks: int | tuple[int, int] = (2, 2)
    time_width: int = 40
    max_time_ratio: float = 1.0
    value: float = 0.0
    accepts: ClassVar[frozenset[str]] = frozenset({FEATURES})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.freq_width < 0 or self.time_width < 0:
            raise ValueError(f"SpecAugment(freq_width={self.freq_width}, time_width={self.time_width}): "
                             "expected widths >= 0")
        if not 0.0 <= self.max_time_ratio <= 1.0:
            raise ValueError(f"SpecAugment(max_time_ratio={self.max_time_ratio}): expected 0 <= max_time_ratio <= 1")
        for name in ("freq_masks", "time_masks"):
            value = getattr(self, name)
            pair = (value, value) if isinstance(value, int) else tuple(int(v) for v in value)
            if len(pair) != 2 or not 0 <= pair[0] <= pair[1]:
                raise ValueError(f"SpecAugment({name}={value!r}): expected a count or (low, high) counts >= 0")
            object.__setattr__(self, name, pair)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        # Widths in bins/frames; starts as fractions of the room left, resolved on the device
        # against the number of bins and the sample's valid frames, unknown here.
        out: Params = {}
        for axis, counts, width in (("freq", self.freq_masks, self.freq_width),
                                    ("time", self.time_masks, self.time_width)):
            k = counts[1]
            n = rng.integers(counts[0], counts[1] + 1) if counts[1] > counts[0] else counts[0]
            widths = np.array([rng.integers(0, width + 1) if i < n else 0 for i in range(k)], np.int64)
            starts = np.array([rng.random() for _ in range(k)], np.float32)
            out[f"{axis}_widths"], out[f"{axis}_starts"] = torch.from_numpy(widths), torch.from_numpy(starts)
        return out

    def apply_batch(self, x, lengths, params):
        if x.ndim < 3:
            raise ValueError(f"SpecAugment expects features (B, [C,] F, T), got shape {tuple(x.shape)}")
        frames = lengths.to(x.device)
        n_freq = x.shape[-2]
        fw = params["freq_widths"].to(x.device).clamp(max=n_freq)
        fs = (params["freq_starts"].to(x.device) * (n_freq - fw + 1).float()).long()
        cap = (frames.float() * self.max_time_ratio).long()[:, None]
        tw = torch.minimum(params["time_widths"].to(x.device), cap)
        ts = (params["time_starts"].to(x.device) * (frames[:, None] - tw + 1).clamp(min=1).float()).long()
        # one pass; padded frames keep their value (the extractor's pad value), untouched by masks
        return F.spec_augment(x, frames, (fs, fw), (ts, tw), self.value), lengths
