"""Geometry ops: crops and resizes (sample stage, fused into the decoder) and flips (batch stage)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from mediapipe.augment.base import Op, Params, Stage
from mediapipe.augment.functional import geometry as F
from mediapipe.decoders.base import DecodeHint
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

Size = int | tuple[int, int]


def _pair(size: Size, name: str) -> tuple[int, int]:
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or min(pair) <= 0:
        raise ValueError(f"{name}: expected a positive int or (height, width), got {size!r}")
    return int(pair[0]), int(pair[1])


def _check_interpolation(op: Op, interpolation: str) -> None:
    if interpolation not in F.INTERPOLATIONS:
        raise ValueError(f"{type(op).__name__}(interpolation={interpolation!r}): expected one of {F.INTERPOLATIONS}")


@dataclass(frozen=True)
class RandomResizedCrop(Op):
    """Crop a random region of random area and aspect ratio, resized to ``size`` (Inception-style).

    Input  ``key``: uint8 or float (C, H, W), or a clip (T, C, H, W) with one crop for all frames.
    Output: (C, *size), same dtype. Stage: sample, fused into the decoder (region-of-interest
    and DCT-scaled decoding).
    Args:
        size: output (height, width), or an int for a square.
        scale: (low, high) fraction of the image area the crop covers.
        ratio: (low, high) crop width / height, drawn log-uniformly.
        interpolation: "bilinear" (default), "bicubic" or "nearest"; antialias: for downscaling.
    """

    size: Size = 224
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    interpolation: str = "bilinear"
    antialias: bool = True
    stage: ClassVar[Stage] = Stage.SAMPLE

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "size", _pair(self.size, "RandomResizedCrop(size)"))
        if not 0 < self.scale[0] <= self.scale[1]:
            raise ValueError(f"RandomResizedCrop(scale={self.scale}): expected 0 < low <= high")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"RandomResizedCrop(ratio={self.ratio}): expected 0 < low <= high")
        _check_interpolation(self, self.interpolation)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        # torchvision's algorithm: ten tries, then a central crop with the ratio clamped.
        height, width = meta["size"]
        area = height * width
        for _ in range(10):
            target_area = area * rng.uniform(*self.scale)
            aspect = rng.log_uniform(*self.ratio)
            w = round(math.sqrt(target_area * aspect))
            h = round(math.sqrt(target_area / aspect))
            if 0 < w <= width and 0 < h <= height:
                return {"top": rng.integers(0, height - h + 1), "left": rng.integers(0, width - w + 1),
                        "height": h, "width": w}
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            w, h = width, round(width / self.ratio[0])
        elif in_ratio > self.ratio[1]:
            h, w = height, round(height * self.ratio[1])
        else:
            w, h = width, height
        return {"top": (height - h) // 2, "left": (width - w) // 2, "height": h, "width": w}

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return F.resized_crop_image(x, params["top"], params["left"], params["height"], params["width"],
                                    self.size, self.interpolation, self.antialias)

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint:
        roi = (params["top"], params["left"], params["height"], params["width"])
        return DecodeHint(roi=roi, size=self.size if self.interpolation != "nearest" else None)

    def apply_decoded(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return F.resize_image(x, self.size, self.interpolation, self.antialias)


@dataclass(frozen=True)
class Resize(Op):
    """Resize: the shorter side to ``size`` (int), exactly to (height, width), or the longer
    side to ``max_size`` (``size=None``); ``max_size`` also caps the longer side of an int resize.

    Input/Output: (..., C, H, W), same dtype. Stage: sample, fused into the decoder (DCT scaling).
    """

    size: Size | None = 256
    max_size: int | None = None
    interpolation: str = "bilinear"
    antialias: bool = True
    stage: ClassVar[Stage] = Stage.SAMPLE

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.size is None and self.max_size is None:
            raise ValueError("Resize: give size, max_size or both")
        if isinstance(self.size, (list, tuple)):
            object.__setattr__(self, "size", _pair(self.size, "Resize(size)"))
            if self.max_size is not None:
                raise ValueError("Resize: max_size applies only to an int (shorter side) size")
        _check_interpolation(self, self.interpolation)

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """The (height, width) an image of this size is resized to (torchvision's rounding)."""
        if isinstance(self.size, tuple):
            return self.size
        short, long = (height, width) if height <= width else (width, height)
        if self.size is None:
            new_long = self.max_size
            new_short = int(new_long * short / long)
        else:
            new_short, new_long = self.size, int(self.size * long / short)
            if self.max_size is not None and new_long > self.max_size:
                new_short, new_long = int(self.max_size * new_short / new_long), self.max_size
        return (new_short, new_long) if height <= width else (new_long, new_short)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"size": self.output_size(*meta["size"])}

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return F.resize_image(x, tuple(params["size"]), self.interpolation, self.antialias)

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint | None:
        return DecodeHint(size=tuple(params["size"])) if self.interpolation != "nearest" else None


@dataclass(frozen=True)
class CenterCrop(Op):
    """Crop the central (height, width) region; an image smaller than that is padded with zeros.

    Input/Output: (..., C, H, W) -> (..., C, *size). Stage: sample, fused into the decoder (region).
    """

    size: Size = 224
    stage: ClassVar[Stage] = Stage.SAMPLE

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "size", _pair(self.size, "CenterCrop(size)"))

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        ch, cw = self.size
        # torchvision rounds the offset: int(round((H - h) / 2.0))
        return {"top": int(round((height - ch) / 2.0)), "left": int(round((width - cw) / 2.0))}

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return F.crop_image(x, params["top"], params["left"], *self.size)

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint | None:
        height, width = meta["size"]
        top, left = params["top"], params["left"]
        if top < 0 or left < 0 or top + self.size[0] > height or left + self.size[1] > width:
            return None  # padding needed: decode whole, pad in apply
        return DecodeHint(roi=(top, left, *self.size))

    def apply_decoded(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return x


@dataclass(frozen=True)
class HorizontalFlip(Op):
    """Mirror left-right with probability ``p``, drawn per sample.

    Input/Output: (B, ..., C, H, W), any dtype. Stage: batch (one masked flip for the batch).
    """

    p: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"{type(self).__name__}(p={self.p}): expected 0 <= p <= 1")

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"flip": rng.bernoulli(self.p)}

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return F.hflip(x, params["flip"])


@dataclass(frozen=True)
class VerticalFlip(HorizontalFlip):
    """Mirror top-bottom with probability ``p``, drawn per sample. Stage: batch."""

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return F.vflip(x, params["flip"])
