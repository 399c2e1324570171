"""The pixel-value ops of the auto-augment policies as ops of their own, with torchvision v2's names
and arguments: RandomPosterize, RandomSolarize, RandomEqualize, RandomAutocontrast,
RandomAdjustSharpness, RandomInvert. Each applies to a sample with probability ``p`` (drawn per
sample from the keyed RNG); the kernels are `mediapipe.augment.functional.auto_color`'s."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mediapipe.augment.base import Op, Params, check_probability
from mediapipe.augment.functional import auto_color as F
from mediapipe.fields import FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

Canvas = tuple[int, int] | None


@dataclass(frozen=True)
class _RandomApply(Op):
    """Shared by the ops below: a per-sample coin of probability ``p`` (torchvision applies when
    ``rand < p``), then the kernel on the samples it selected. Images and clips (one draw per clip),
    uint8 or float; masks, boxes and the rest pass unchanged."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self, self.p)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"apply": rng.bernoulli(self.p)}

    def kernel(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return F.apply_where(x, params["apply"], lambda rows, sub: self.kernel(sub))


@dataclass(frozen=True)
class RandomPosterize(_RandomApply):
    """Keep the ``bits`` high bits of each channel, with probability ``p`` per sample (torchvision's
    ``RandomPosterize``).

    Input: images (B, C, H, W) and clips (B, T, C, H, W), uint8 (``x & mask``) or float (cut into
    2 ** bits levels). Output: same shape and dtype.
    Args:
        bits: 0 to 8; 8 is the identity, 0 black.
        p: probability per sample.
    Stage: batch.
    """

    bits: int = 4
    p: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.bits <= 8:
            raise ValueError(f"RandomPosterize(bits={self.bits}): expected 0 <= bits <= 8")

    def kernel(self, x: torch.Tensor) -> torch.Tensor:
        return F.posterize(x, torch.full((x.shape[0],), self.bits))


@dataclass(frozen=True)
class RandomSolarize(_RandomApply):
    """Invert the pixels at or above ``threshold``, with probability ``p`` per sample
    (torchvision's ``RandomSolarize``).

    Input: images (B, C, H, W) and clips (B, T, C, H, W), uint8 or float. Output: same.
    Args:
        threshold: in the images' units (0 to 255 for uint8, 0 to 1 for float); a threshold above the
            images' largest value is refused when the op meets them, as torchvision does.
        p: probability per sample.
    Stage: batch.
    """

    threshold: float = 128.0
    p: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.threshold >= 0:
            raise ValueError(f"RandomSolarize(threshold={self.threshold}): expected a threshold >= 0")

    def kernel(self, x: torch.Tensor) -> torch.Tensor:
        if self.threshold > F.max_value(x):
            raise ValueError(f"RandomSolarize(threshold={self.threshold}) is above the largest value of {x.dtype} "
                             f"images ({F.max_value(x):g}): give it in the images' units")
        return F.solarize(x, torch.full((x.shape[0],), float(self.threshold), dtype=torch.float64))


@dataclass(frozen=True)
class RandomEqualize(_RandomApply):
    """Equalise each channel's histogram, with probability ``p`` per sample (torchvision's
    ``RandomEqualize``: Pillow's lookup table; float images are equalised as uint8).

    Input: images (B, C, H, W) and clips (B, T, C, H, W, each frame on its own), uint8 or float.
    Output: same. Args: p: probability per sample. Stage: batch.
    """

    p: float = 0.5

    def kernel(self, x: torch.Tensor) -> torch.Tensor:
        return F.equalize(x)


@dataclass(frozen=True)
class RandomAutocontrast(_RandomApply):
    """Stretch each channel to the full range (minimum to 0, maximum to the top), with probability
    ``p`` per sample (torchvision's ``RandomAutocontrast``).

    Input: images (B, C, H, W) and clips (B, T, C, H, W, each frame on its own), uint8 or float.
    Output: same. Args: p: probability per sample. Stage: batch.
    """

    p: float = 0.5

    def kernel(self, x: torch.Tensor) -> torch.Tensor:
        return F.autocontrast(x)


@dataclass(frozen=True)
class RandomAdjustSharpness(_RandomApply):
    """Sharpen (factor > 1) or smooth (factor < 1), with probability ``p`` per sample (torchvision's
    ``RandomAdjustSharpness``: a blend with a 3x3 smoothing, the one-pixel border kept).

    Input: images (B, C, H, W) and clips (B, T, C, H, W), uint8 or float. Output: same.
    Args:
        sharpness_factor: >= 0; 0 smooth, 1 the identity, 2 twice as sharp.
        p: probability per sample.
    Stage: batch.
    """

    sharpness_factor: float = 2.0
    p: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.sharpness_factor >= 0:
            raise ValueError(f"RandomAdjustSharpness(sharpness_factor={self.sharpness_factor}): expected >= 0")

    def kernel(self, x: torch.Tensor) -> torch.Tensor:
        return F.adjust_sharpness(x, torch.full((x.shape[0],), float(self.sharpness_factor), dtype=torch.float64))


@dataclass(frozen=True)
class RandomInvert(_RandomApply):
    """Invert the colours (255 - x, or 1 - x for float), with probability ``p`` per sample
    (torchvision's ``RandomInvert``).

    Input: images (B, C, H, W) and clips (B, T, C, H, W), uint8 or float. Output: same.
    Args: p: probability per sample. Stage: batch.
    """

    p: float = 0.5

    def kernel(self, x: torch.Tensor) -> torch.Tensor:
        return F.invert(x)
