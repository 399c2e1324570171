"""Colour and dtype ops (batch stage, on the device)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mediapipe.augment.base import Op, Params, check_choice, check_probability
from mediapipe.augment.functional import color as F
from mediapipe.augment.geometry import HorizontalFlip, VerticalFlip
from mediapipe.fields import FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

Canvas = tuple[int, int] | None

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Normalize(Op):
    """uint8 to float and (x / 255 - mean) / std per channel, in one pass over contiguous memory.

    Input: images and videos, uint8 (read as x / 255) or float, (..., C, H, W). Masks, boxes and
    the rest are not normalised (naming a mask in ``keys`` is refused: its values are class ids).
    Output: ``dtype`` (float32, float16 or bfloat16), same shape. Stage: batch; on the CPU it
    does a flip right before it (same fields, in place) while it writes, as DALI's
    CropMirrorNormalize does.
    Args:
        mean, std: per channel, in [0, 1] units, one std > 0 per mean; identity is mean 0, std 1.
    """

    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    dtype: str = "float32"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))
        if not self.mean or len(self.mean) != len(self.std) or not min(self.std) > 0:
            raise ValueError(f"Normalize(mean={self.mean}, std={self.std}): one positive std per mean")
        check_choice(self, "dtype", self.dtype, F.FLOAT_DTYPES)

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return self._normalize(x)

    def absorbs(self, before: Op) -> bool:
        """A flip right before, in place on (at least) this op's fields: mirrored while normalising
        (the flip still moves its other fields: a mask, boxes)."""
        return (type(before) in (HorizontalFlip, VerticalFlip) and before.outputs == before.inputs
                and self.outputs == self.inputs and set(self.inputs) <= set(before.inputs))

    def apply_absorbing(self, x: torch.Tensor, params: Params, before: Op, before_params: Params) -> torch.Tensor:
        return self._normalize(x, mirror=before_params["flip"], mirror_dim=-2 if type(before) is VerticalFlip else -1)

    def _normalize(self, x: torch.Tensor, **mirror: Any) -> torch.Tensor:
        if x.shape[-3] != len(self.mean):
            raise ValueError(f"Normalize: {len(self.mean)} means for {x.shape[-3]} channels (shape {tuple(x.shape)})")
        return F.normalize(x, torch.tensor(self.mean), torch.tensor(self.std), dtype=F.dtype_of(self.dtype), **mirror)


@dataclass(frozen=True)
class ToDtype(Op):
    """Convert dtype; with ``scale`` uint8 [0, 255] maps to float [0, 1] (and back as torchvision:
    ``x * 255.999`` truncated, saturated outside [0, 1]).

    Input/Output: images and videos (..., C, H, W) of any dtype -> ``dtype``. Stage: batch.
    Args: dtype: "float32", "float16", "bfloat16", "float64" or "uint8"; scale: rescale the range.
    """

    dtype: str = "float32"
    scale: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self, "dtype", self.dtype, F.DTYPES)

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return F.to_dtype(x, F.dtype_of(self.dtype), self.scale)


def _factor_range(value: float | tuple[float, float], name: str, center: float, bound: tuple[float, float]
                  ) -> tuple[float, float] | None:
    """torchvision's ColorJitter ranges: v -> (center - v, center + v) clamped; None when it is the identity."""
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"ColorJitter({name}={value}): a single number must be non-negative")
        low, high = center - float(value), center + float(value)
        low = max(low, bound[0]) if name != "hue" else low
    else:
        if len(value) != 2:
            raise ValueError(f"ColorJitter({name}={value!r}): expected a number or (low, high)")
        low, high = float(value[0]), float(value[1])
    if not bound[0] <= low <= high <= bound[1]:
        raise ValueError(f"ColorJitter({name}={value!r}): expected {bound[0]} <= low <= high <= {bound[1]}")
    return None if low == high == center else (low, high)


@dataclass(frozen=True)
class ColorJitter(Op):
    """Random brightness, contrast, saturation and hue per sample, applied in a random order per
    sample (torchvision's ``ColorJitter``).

    Input: RGB images (B, 3, H, W) and clips (B, T, 3, H, W), uint8 or float in [0, 1]; one draw
    per clip; masks, boxes and the rest pass unchanged. Output: same shape and dtype. uint8 follows torchvision exactly: every adjustment
    computes in float32 and truncates back to uint8 before the next.
    Args:
        brightness: v for a factor in [max(0, 1 - v), 1 + v], or (low, high); multiplies; 0 is the identity.
        contrast: likewise, blends with the image's mean grey; 0 is the identity.
        saturation: likewise, blends with the grey image; 0 is the identity.
        hue: h in [0, 0.5] for a shift in [-h, h] turns of the hue circle, or (low, high); 0 is the identity.
    Stage: batch (a loop over the 4 positions of the order, not over samples).
    """

    brightness: float | tuple[float, float] = 0.0
    contrast: float | tuple[float, float] = 0.0
    saturation: float | tuple[float, float] = 0.0
    hue: float | tuple[float, float] = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("brightness", "contrast", "saturation"):
            _factor_range(getattr(self, name), name, 1.0, (0.0, float("inf")))
        _factor_range(self.hue, "hue", 0.0, (-0.5, 0.5))

    def ranges(self) -> dict[str, tuple[float, float]]:
        """The active adjustments and their factor ranges, in `F.JITTER_ORDER`."""
        out = {}
        for name in F.JITTER_ORDER:
            center, bound = (0.0, (-0.5, 0.5)) if name == "hue" else (1.0, (0.0, float("inf")))
            r = _factor_range(getattr(self, name), name, center, bound)
            if r is not None:
                out[name] = r
        return out

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        order = list(range(len(F.JITTER_ORDER)))
        for i in range(len(order) - 1, 0, -1):  # Fisher-Yates
            j = rng.integers(0, i + 1)
            order[i], order[j] = order[j], order[i]
        params: Params = {"order": tuple(order)}
        for name, (low, high) in self.ranges().items():
            params[name] = rng.uniform(low, high)
        return params

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return F.color_jitter(x, params["order"], **{k: v for k, v in params.items() if k != "order"})


@dataclass(frozen=True)
class RandomGrayscale(Op):
    """Turn each sample to grayscale with probability ``p``, keeping 3 channels (torchvision's
    ``RandomGrayscale``: 0.2989 R + 0.587 G + 0.114 B; uint8 truncates).

    Input: RGB images (B, 3, H, W) and clips (B, T, 3, H, W), uint8 or float. Output: same.
    Args:
        p: probability per sample; 0 never, 1 always.
    Stage: batch (only the selected samples are computed).
    """

    p: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self, self.p)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"gray": rng.bernoulli(self.p)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return F.random_grayscale(x, params["gray"])


@dataclass(frozen=True)
class GaussianBlur(Op):
    """Blur each sample with a Gaussian of its own random std (torchvision's ``GaussianBlur``).

    Input: images (B, C, H, W) and clips (B, T, C, H, W), uint8 or float. Output: same shape and
    dtype (uint8 blurred in float32 and rounded). Borders reflect.
    Args:
        kernel_size: odd taps, an int or (x, y); each must be smaller than twice the image side.
        sigma: std in pixels, a number or (low, high) drawn uniformly per sample; must be > 0.
            Small sigmas (0.1) are close to the identity.
    Stage: batch (two grouped convolutions with per-sample kernels: separable).
    """

    kernel_size: int | tuple[int, int] = 3
    sigma: float | tuple[float, float] = (0.1, 2.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        ks = (self.kernel_size,) * 2 if isinstance(self.kernel_size, int) else tuple(self.kernel_size)
        if len(ks) != 2 or any(not isinstance(k, int) or k <= 0 or k % 2 == 0 for k in ks):
            raise ValueError(f"GaussianBlur(kernel_size={self.kernel_size!r}): expected odd positive ints")
        sigma = (self.sigma, self.sigma) if isinstance(self.sigma, (int, float)) else tuple(self.sigma)
        if len(sigma) != 2 or not 0.0 < sigma[0] <= sigma[1]:
            raise ValueError(f"GaussianBlur(sigma={self.sigma!r}): expected a number or (low, high), 0 < low <= high")
        object.__setattr__(self, "kernel_size", ks)
        object.__setattr__(self, "sigma", tuple(float(s) for s in sigma))

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"sigma": rng.uniform(*self.sigma)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return F.gaussian_blur(x, self.kernel_size, params["sigma"])
