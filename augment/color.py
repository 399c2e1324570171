"""Colour and dtype ops (batch stage, on the device)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mediapipe.augment.base import Op, Params
from mediapipe.augment.functional import color as F

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Normalize(Op):
    """uint8 to float and (x / 255 - mean) / std per channel, in one pass over contiguous memory.

    Input  ``key``: uint8 (read as x / 255) or float, (..., C, H, W).
    Output: ``dtype`` (float32, float16 or bfloat16), same shape. Stage: batch.
    Args:
        mean, std: per channel, in [0, 1] units; identity is mean 0, std 1.
    """

    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    dtype: str = "float32"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))
        if len(self.mean) != len(self.std) or min(self.std) <= 0:
            raise ValueError(f"Normalize(mean={self.mean}, std={self.std}): one positive std per mean")
        F.dtype_of(self.dtype)

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        if x.shape[-3] != len(self.mean):
            raise ValueError(f"Normalize: {len(self.mean)} means for {x.shape[-3]} channels (shape {tuple(x.shape)})")
        return F.normalize(x, torch.tensor(self.mean), torch.tensor(self.std), dtype=F.dtype_of(self.dtype))


@dataclass(frozen=True)
class ToDtype(Op):
    """Convert dtype; with ``scale`` uint8 [0, 255] maps to float [0, 1] (and back). Stage: batch."""

    dtype: str = "float32"
    scale: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        F.dtype_of(self.dtype)

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return F.to_dtype(x, F.dtype_of(self.dtype), self.scale)
