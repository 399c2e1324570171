"""Audio ops: waveform edits, noise, speed, and features (spectrogram, mel, MFCC, SpecAugment).

Each transforms one field: waveforms (kind "audio", (C, N) samples per sample), or features
(kind "features", (C, F, T) frames: what the spectrogram ops write). Left unset, ``key`` is the
pipeline's one field of that kind. Lengths are in samples for waveforms and in frames for
features; durations are never in seconds here (decode windows in seconds are the audio
decoder's: ``mp.decoders.audio(random_crop=seconds)``).

Batch-stage ops see the padded batch (B, C, N) on the device and read ``<key>_lengths``
(samples); they write ``<out>_lengths`` (samples, or frames for features), and keep
padding out of every valid value. Sample-stage ops see one sample (C, N); the pad-collate
computes the lengths after them. Where a batch op is placed in the sample stage (a later
sample op reads its output), it runs on that one sample as a batch of one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from mediapipe.augment.base import Op, Params, Stage, check_positive, check_probability, promote
from mediapipe.augment.functional import audio as F
from mediapipe.fields import AUDIO, FEATURES, FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

__all__ = [
    "MFCC", "AddNoise", "AmplitudeToDB", "AudioNormalize", "Gain", "LogMelSpectrogram", "MelSpectrogram",
    "NonSilentRegion", "PadTrim", "PreEmphasis", "RandomTimeCrop", "Resample", "SpecAugment", "Spectrogram",
    "SpeedPerturb",
]

_INT64_MAX = (1 << 63) - 1
WINDOWS = tuple(F.WINDOWS)


def _range(op: Op, value: float | tuple[float, float], name: str) -> tuple[float, float]:
    low, high = (value, value) if isinstance(value, (int, float)) else tuple(value)
    if not low <= high:
        raise ValueError(f"{type(op).__name__}({name}={value!r}): expected a number or (low, high) with low <= high")
    return float(low), float(high)


@dataclass(frozen=True)
class _AudioOp(Op):
    """An op over one field (``key``) and its ``<key>_lengths``; writes ``out`` and ``<out>_lengths``."""

    accepts: ClassVar[frozenset[str]] = frozenset({AUDIO})
    single_input: ClassVar[bool] = True

    @property
    def src(self) -> str:
        return self.inputs[0]

    @property
    def dst(self) -> str:
        return self.outputs[0]

    def reads(self) -> tuple[str, ...]:
        return (self.src, f"{self.src}_lengths")

    def writes(self) -> tuple[str, ...]:
        return (self.dst, f"{self.dst}_lengths")

    def apply_fields(self, data: dict[str, Any], params: Params, only: Any = None, canvas_size: Any = None) -> None:
        x, lengths = data[self.src], data.get(f"{self.src}_lengths")
        if lengths is None:  # one sample, in the sample stage: run it as a batch of one
            xb, pb = promote(x, params)
            y, new_lengths = self.apply_batch(xb, torch.tensor([x.shape[-1]]), pb)
            data[self.dst] = y[0, ..., : int(new_lengths[0])]
            return
        data[self.dst], data[f"{self.dst}_lengths"] = self.apply_batch(x, lengths, params)

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Any) -> torch.Tensor:
        lengths = torch.full((x.shape[0],), x.shape[-1], dtype=torch.int64)
        return self.apply_batch(x, lengths, params)[0]

    def apply_batch(self, x: torch.Tensor, lengths: torch.Tensor, params: Params
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


# -- waveform, batch stage ----------------------------------------------------------------


@dataclass(frozen=True)
class Gain(_AudioOp):
    """Scale each utterance by its own random gain (batch stage).

    Input: float waveforms (B, C, N) with ``<key>_lengths`` (samples). Output: same shape; padding stays zero.
    Args:
        db: (low, high) gain in dB, drawn uniformly per sample, or one number; 0 leaves the audio as is.
    """

    db: float | tuple[float, float] = (-6.0, 6.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "db", _range(self, self.db, "db"))

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"db": rng.uniform(*self.db)}

    def apply_batch(self, x, lengths, params):
        return F.gain(x, params["db"]), lengths


@dataclass(frozen=True)
class PreEmphasis(_AudioOp):
    """y[n] = x[n] - coef * x[n-1] (x[-1] = 0), per sample; padding stays zero. Stage: batch.

    Args: coef: the filter's coefficient, in [0, 1].
    """

    coef: float = 0.97

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.coef <= 1.0:
            raise ValueError(f"PreEmphasis(coef={self.coef}): expected 0 <= coef <= 1")

    def apply_batch(self, x, lengths, params):
        return F.preemphasis(x, lengths, self.coef), lengths


@dataclass(frozen=True)
class AudioNormalize(_AudioOp):
    """Zero mean, unit variance per utterance over its valid samples (all channels). Stage: batch.

    Args: eps: added to the variance, > 0.
    """

    eps: float = 1e-8

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, eps=self.eps)

    def apply_batch(self, x, lengths, params):
        return F.normalize(x, lengths, self.eps), lengths


@dataclass(frozen=True)
class PadTrim(_AudioOp):
    """Cut or zero-pad every utterance to ``length`` (from the start): samples of a waveform,
    frames of features. Stage: batch.

    Output (B, C, length); ``<out>_lengths`` = min(length, input length): padding stays marked.
    """

    length: int = 16000
    accepts: ClassVar[frozenset[str]] = frozenset({AUDIO, FEATURES})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.length <= 0:
            raise ValueError(f"PadTrim(length={self.length}): expected a positive number of samples (or frames)")

    def apply_batch(self, x, lengths, params):
        return F.pad_trim(x, lengths, self.length)


@dataclass(frozen=True)
class Resample(_AudioOp):
    """Band-limited sinc resampling of the batch from ``orig_freq`` to ``new_freq`` Hz (torchaudio).

    Output lengths: ceil(len * new / orig) samples. Stage: batch. To resample while decoding (cheaper
    before down-mixing and batching) use ``mp.decoders.audio(sample_rate=...)``.
    Args: orig_freq, new_freq: sample rates in Hz, > 0.
    """

    orig_freq: int = 48000
    new_freq: int = 16000

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, orig_freq=self.orig_freq, new_freq=self.new_freq)

    def apply_batch(self, x, lengths, params):
        return F.resample(x, lengths, self.orig_freq, self.new_freq)


@dataclass(frozen=True)
class AddNoise(_AudioOp):
    """Add noise at a random signal-to-noise ratio: white (batch stage, on the device) or mixed from
    noise files (``noise=`` paths; sample stage, in the worker).

    Input: float waveforms (B, C, N) or (C, N). Output: same shape; padding stays zero.
    Args:
        snr_db: (low, high) SNR in dB over the valid samples, drawn per sample, or one number.
        noise: audio files to draw the noise from (a file and an offset per sample; the clip
            repeats to cover the utterance), or empty for white Gaussian noise.
        sample_rate: the rate in Hz the noise files are decoded to (the utterances' rate); None
            keeps each file's own.
        p: probability of adding noise to a sample.
    """

    snr_db: float | tuple[float, float] = (5.0, 30.0)
    noise: tuple[str, ...] = ()
    sample_rate: int | None = None
    p: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "snr_db", _range(self, self.snr_db, "snr_db"))
        check_positive(self, sample_rate=self.sample_rate)
        check_probability(self, self.p)

    def placement(self) -> Stage:
        return Stage.SAMPLE if self.noise else Stage.BATCH  # noise files are read in the workers

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        params: Params = {"snr_db": rng.uniform(*self.snr_db), "on": rng.bernoulli(self.p),
                          "key": rng.bits() & _INT64_MAX}
        if self.noise:
            params["file"] = rng.integers(0, len(self.noise))
            params["offset"] = rng.random()
        return params

    def apply_fields(self, data: dict[str, Any], params: Params, only: Any = None, canvas_size: Any = None) -> None:
        if self.noise and f"{self.src}_lengths" not in data:
            data[self.dst] = self._mix_file(data[self.src], params)
            return
        super().apply_fields(data, params)

    def _mix_file(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        if not params["on"]:
            return x
        clip = _noise_clip(self.noise[int(params["file"])], self.sample_rate)
        n = x.shape[-1]
        start = int(params["offset"] * clip.shape[-1])
        reps = -(-(start + n) // clip.shape[-1])
        noise = clip.repeat(1, reps)[:, start : start + n]
        if noise.shape[0] != x.shape[0]:
            noise = noise.mean(dim=0, keepdim=True).expand(x.shape[0], -1)
        lengths = torch.tensor([n])
        return F.add_noise(x[None], lengths, noise[None], torch.tensor([params["snr_db"]]))[0]

    def apply_batch(self, x, lengths, params):
        noise = F.counter_normal(params["key"], tuple(x.shape[1:]), x.device)
        y = F.add_noise(x, lengths, noise, params["snr_db"])
        on = params["on"].to(x.device).reshape(-1, *(1,) * (x.ndim - 1))
        return torch.where(on, y, x), lengths


_NOISE_CACHE: dict[tuple[str, int | None], torch.Tensor] = {}


def _noise_clip(path: str, sample_rate: int | None) -> torch.Tensor:
    """A noise file decoded once per process (mono-or-not as stored, at ``sample_rate``)."""
    clip = _NOISE_CACHE.get((path, sample_rate))
    if clip is None:
        from mediapipe.decoders.audio_pyav import PyAVAudioDecoder
        from mediapipe.decoders.base import NO_HINT
        from mediapipe.sample import Blob

        decoder = PyAVAudioDecoder(sample_rate=sample_rate)
        clip = decoder.decode(Blob(path, path=path), NO_HINT, SampleRNG(0, 0, 0, 0), {})
        if len(_NOISE_CACHE) < 256:
            _NOISE_CACHE[path, sample_rate] = clip
    return clip


# -- waveform, sample stage ---------------------------------------------------------------


@dataclass(frozen=True)
class _SampleAudioOp(_AudioOp):
    """An op on one sample (C, N) in the worker; the pad-collate measures its new length."""

    batched: ClassVar[bool] = False

    def reads(self) -> tuple[str, ...]:
        return self.inputs

    def writes(self) -> tuple[str, ...]:
        return self.outputs

    def apply_fields(self, data: dict[str, Any], params: Params, only: Any = None, canvas_size: Any = None) -> None:
        data[self.dst] = self.apply(data[self.src], params)


@dataclass(frozen=True)
class RandomTimeCrop(_SampleAudioOp):
    """Crop ``length`` samples at a random start (sample stage). Shorter utterances pass whole.

    Input (C, N); output (C, min(N, length)). Args: length: an int number of samples (not
    seconds: 16000 is one second at 16 kHz). To decode only the window, prefer
    ``mp.decoders.audio(random_crop=seconds)``.
    """

    length: int = 16000

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.length <= 0:
            raise ValueError(f"RandomTimeCrop(length={self.length}): expected a positive number of samples")

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        n = meta["shape"][-1]
        return {"start": rng.integers(0, max(1, n - self.length + 1))}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Any) -> torch.Tensor:
        start = int(params["start"])
        return x[..., start : start + self.length].contiguous()


@dataclass(frozen=True)
class SpeedPerturb(_SampleAudioOp):
    """Play each utterance at a speed drawn from ``factors`` (resampling: pitch moves too, as in
    Kaldi's speed perturbation). Input (C, N); output (C, about N / factor) samples. Stage: sample.

    Args: factors: speeds to draw from, each > 0 (1 is the identity).
    """

    factors: tuple[float, ...] = (0.9, 1.0, 1.1)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "factors", tuple(float(f) for f in self.factors))
        if not self.factors or not min(self.factors) > 0:
            raise ValueError(f"SpeedPerturb(factors={self.factors}): expected positive factors")

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"factor": rng.choice(self.factors)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Any) -> torch.Tensor:
        return F.speed(x, float(params["factor"]))


@dataclass(frozen=True)
class NonSilentRegion(_SampleAudioOp):
    """Trim leading and trailing silence: keep the region whose short-time power (a moving mean of
    ``window`` samples, averaged over channels) is within ``cutoff_db`` of its maximum, as DALI's
    nonsilent_region. All-silent input is kept whole. Stage: sample.

    Args: cutoff_db: dB below the maximum, <= 0; window: an int number of samples, > 0.
    """

    cutoff_db: float = -60.0
    window: int = 2048

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.cutoff_db <= 0:
            raise ValueError(f"NonSilentRegion(cutoff_db={self.cutoff_db}): expected <= 0 dB (below the maximum)")
        check_positive(self, window=self.window)

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Any) -> torch.Tensor:
        start, length = F.nonsilent_region(x, self.cutoff_db, self.window)
        if length == 0:
            return x
        return x[..., start : start + length].contiguous()


# -- features, batch stage ----------------------------------------------------------------


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
