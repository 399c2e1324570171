"""Audio ops: waveform edits, noise and speed; the features ops (spectrogram, mel, MFCC,
SpecAugment) are in `mediapipe.augment.features`, on the same base (`_AudioOp`).

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

import torch

from mediapipe.augment.base import Op, Params, Stage, check_positive, check_probability
from mediapipe.augment.functional import audio as F
from mediapipe.augment.params import promote
from mediapipe.fields import AUDIO, FEATURES, FieldType
from mediapipe.rng import SampleRNG, decoder_rng
from mediapipe.sample import SampleMeta

__all__ = [
    "AddNoise", "AudioNormalize", "Gain", "NonSilentRegion", "PadTrim", "PreEmphasis", "RandomTimeCrop", "Resample",
    "SpeedPerturb",
]

_INT64_MAX = (1 << 63) - 1


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
        clip = decoder.decode(Blob(path, path=path), NO_HINT, decoder_rng(0, 0, 0, 0), {})  # (a whole file: nothing drawn)
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
