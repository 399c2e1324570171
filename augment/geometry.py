"""Geometry ops: crops, resizes and pads (sample stage, fused into the decoder), flips (batch stage);
the affine warps are in `mediapipe.augment.warp`.

Each moves every spatial field it is given with one draw: images and videos (a clip moves as a
whole), masks (nearest, never smoothed, new pixels 0), boxes and keypoints (in pixels of the
image they move with), through the kernels of `mediapipe.augment.functional.spatial`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mediapipe.augment.base import Op, Params, check_positive, check_probability, check_range
from mediapipe.augment.functional import geometry as F
from mediapipe.augment.functional import resample as R
from mediapipe.augment.functional import spatial as S
from mediapipe.decoders.base import DecodeHint
from mediapipe.fields import FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

Size = int | tuple[int, int]
Canvas = tuple[int, int] | None


def _pair(size: Size, name: str) -> tuple[int, int]:
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or min(pair) <= 0:
        raise ValueError(f"{name}: expected a positive int or (height, width), got {size!r}")
    return int(pair[0]), int(pair[1])


def _check_interpolation(op: Op, interpolation: str) -> None:
    if interpolation not in F.INTERPOLATIONS:
        raise ValueError(f"{type(op).__name__}(interpolation={interpolation!r}): expected one of {F.INTERPOLATIONS}")


def _meta(field: FieldType, canvas_size: Canvas) -> dict:
    """What a kernel of ``field``'s kind needs besides the op's options."""
    return {"kind": field.kind, "canvas_size": canvas_size, "format": field.format}


@dataclass(frozen=True)
class RandomResizedCrop(Op):
    """Crop a random region of random area and aspect ratio, resized to ``size`` (Inception-style).

    Input: images (C, H, W), clips (T, C, H, W) with one crop for all frames, masks (resized
    with nearest), boxes and keypoints (cropped, clamped, scaled). Output: (..., C, *size), same
    dtype. Stage: sample, fused into the image or video decoder (region-of-interest and
    DCT-scaled decoding); a mask, boxes and keypoints follow the drawn region exactly.
    Args:
        size: output (height, width) in pixels, or an int for a square.
        scale: (low, high) fraction of the image area the crop covers, 0 < low <= high.
        ratio: (low, high) crop width / height, drawn log-uniformly, 0 < low <= high.
        interpolation: "bilinear" (default), "bicubic", "nearest" (torchvision's) or "nearest-exact"
            (pixel centres, Pillow's), for images. antialias: when downscaling images.
    """

    size: Size = 224
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    interpolation: str = "bilinear"
    antialias: bool = True
    functional = S.resized_crop
    batched = False
    schedulable = frozenset({"size"})  # progressive resolution: `mediapipe.augment.schedule`

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "size", _pair(self.size, "RandomResizedCrop(size)"))
        check_range(self, "scale", self.scale, 0.0, strict_low=True)
        check_range(self, "ratio", self.ratio, 0.0, strict_low=True)
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

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return S.resized_crop(x, params["top"], params["left"], params["height"], params["width"], self.size,
                              interpolation=self.interpolation, antialias=self.antialias, **_meta(field, canvas_size))

    def fusable(self, field_type: FieldType) -> bool:
        return field_type.spec.decoder_fuses  # a mask is never smoothed by a reduced-scale decode

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint | None:
        roi = (params["top"], params["left"], params["height"], params["width"])
        nearest = self.interpolation.startswith("nearest")
        return DecodeHint(roi=roi, size=None if nearest else self.size, interpolation=self.interpolation,
                          antialias=self.antialias)

    def apply_decoded(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        """Resize the decoded region; a no-op where the decoder already resampled it to ``size``
        (a JPEG decoded at a reduced DCT scale: see `mediapipe.decoders.image.plan_decode`)."""
        return F.resize_image(x, self.size, self.interpolation, self.antialias)

    def apply_decoded_batch(self, xs: list[torch.Tensor], params: list[Params]) -> torch.Tensor | None:
        """The decoded regions, each of its own size, resized together (`resize_regions`)."""
        if not self.antialias or self.interpolation not in R.BATCHED or any(x.ndim != 3 for x in xs):
            return None
        return R.resize_regions(xs, self.size, self.interpolation)


@dataclass(frozen=True)
class _Resizing(Op):
    """Shared by the resizes whose size is drawn per sample (``params["size"]``, (H, W)): every
    spatial field resized to it (masks nearest, boxes and keypoints scaled), fused into the image
    or video decoder (DCT-scaled decoding) unless the interpolation is nearest. Subclasses define
    ``interpolation`` and ``antialias``."""

    functional = S.resize
    batched = False

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return S.resize(x, tuple(params["size"]), interpolation=self.interpolation, antialias=self.antialias,
                        **_meta(field, canvas_size))

    def fusable(self, field_type: FieldType) -> bool:
        return field_type.spec.decoder_fuses

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint | None:
        if self.interpolation.startswith("nearest"):
            return None
        return DecodeHint(size=tuple(params["size"]), interpolation=self.interpolation, antialias=self.antialias)


@dataclass(frozen=True)
class Resize(_Resizing):
    """Resize: the shorter side to ``size`` (int), exactly to (height, width), or the longer
    side to ``max_size`` (``size=None``); ``max_size`` also caps the longer side of an int resize.

    Input/Output: images, clips and masks (..., C, H, W), same dtype; boxes and keypoints scaled
    (not clamped). Stage: sample, fused into the image or video decoder (DCT scaling).
    Args:
        size: int (shorter side), (height, width), or None (then ``max_size`` sets the longer side), in pixels.
        max_size: cap on the longer side, in pixels.
        interpolation: "bilinear", "bicubic", "nearest" or "nearest-exact", for images (masks: nearest);
            antialias: when downscaling images (torchvision's default).
    """

    size: Size | None = 256
    max_size: int | None = None
    interpolation: str = "bilinear"
    antialias: bool = True
    schedulable = frozenset({"size", "max_size"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.size is None and self.max_size is None:
            raise ValueError("Resize: give size, max_size or both")
        if isinstance(self.size, tuple):
            object.__setattr__(self, "size", _pair(self.size, "Resize(size)"))
            if self.max_size is not None:
                raise ValueError("Resize: max_size applies only to an int (shorter side) size")
        check_positive(self, size=self.size if isinstance(self.size, int) else None, max_size=self.max_size)
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


@dataclass(frozen=True)
class CenterCrop(Op):
    """Crop the central (height, width) region; an image smaller than that is padded with zeros.

    Input/Output: images, clips, masks (..., C, H, W) -> (..., C, *size), same dtype; boxes
    clamped to the crop. Stage: sample, fused into the decoder (region).
    Args: size: (height, width) or an int for a square, in pixels.
    """

    size: Size = 224
    functional = S.crop
    batched = False
    schedulable = frozenset({"size"})

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "size", _pair(self.size, "CenterCrop(size)"))

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        ch, cw = self.size
        # torchvision rounds the offset: int(round((H - h) / 2.0))
        return {"top": int(round((height - ch) / 2.0)), "left": int(round((width - cw) / 2.0))}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return S.crop(x, params["top"], params["left"], *self.size, **_meta(field, canvas_size))

    def fusable(self, field_type: FieldType) -> bool:
        return field_type.spec.decoder_fuses

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

    Input: images (B, C, H, W), clips (B, T, C, H, W) flipped as a whole, masks, boxes and
    keypoints; any dtype. Output: same shape and dtype. Stage: batch (only the selected samples
    are flipped); on the CPU a `Normalize` right after does the flip while it writes.
    Args:
        p: probability of a flip per sample; 0 never flips, 1 always does.
    """

    p: float = 0.5
    functional = S.hflip

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self, self.p)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"flip": rng.bernoulli(self.p)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return self.functional(x, params["flip"], **_meta(field, canvas_size or tuple(x.shape[-2:])))


@dataclass(frozen=True)
class VerticalFlip(HorizontalFlip):
    """Mirror top-bottom with probability ``p``, drawn per sample.

    Input: images, clips, masks, boxes and keypoints, any dtype. Output: same shape and dtype.
    Args: p: probability of a flip per sample; 0 never, 1 always. Stage: batch.
    """

    functional = S.vflip


Fill = float | tuple[float, ...]


def _padding4(op: Op, padding: int | tuple[int, ...], name: str) -> tuple[int, int, int, int]:
    """torchvision's padding forms to (left, top, right, bottom)."""
    pad = (padding,) if isinstance(padding, int) else tuple(padding)
    if len(pad) not in (1, 2, 4) or any(not isinstance(p, int) or p < 0 for p in pad):
        raise ValueError(f"{type(op).__name__}({name}={padding!r}): expected a non-negative int or a sequence "
                         "of 1, 2 or 4 of them")
    if len(pad) == 1:
        return pad * 4
    if len(pad) == 2:
        return (pad[0], pad[1], pad[0], pad[1])
    return pad


def _check_padding_mode(op: Op, mode: str) -> None:
    if mode not in PADDING_MODES:
        raise ValueError(f"{type(op).__name__}(padding_mode={mode!r}): expected one of {PADDING_MODES}")


def _check_fill(op: Op, fill: Fill | None, scalar_only: bool = False) -> None:
    if fill is None and not scalar_only:
        return
    values = fill if isinstance(fill, tuple) else (fill,)
    if not values or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values) or (
            scalar_only and len(values) != 1):
        expected = "a finite number" if scalar_only else "a finite number or one per channel"
        raise ValueError(f"{type(op).__name__}(fill={fill!r}): expected {expected}")


def _constant_only(op: Op, field: FieldType) -> str | None:
    """Boxes and keypoints move with a constant pad only (torchvision refuses the other modes)."""
    if field.spec.is_objects and op.padding_mode != "constant":
        return f"padding_mode={op.padding_mode!r} mirrors pixels, which no box or keypoint can follow; pad " \
               "with padding_mode='constant'"
    return None


PADDING_MODES = ("constant", "edge", "reflect", "symmetric")


@dataclass(frozen=True)
class Pad(Op):
    """Pad the borders (torchvision's ``Pad``).

    Input: images, clips, masks (..., C, H, W), any dtype; boxes and keypoints shifted (constant
    padding only). Output: (..., C, H + top + bottom, W + left + right).
    Args:
        padding: pixels; an int for all sides, (left/right, top/bottom) or (left, top, right, bottom).
            0 is the identity.
        fill: value of the new pixels for ``padding_mode="constant"`` (a number, in the input's
            units); a mask's new pixels are 0.
        padding_mode: "constant", "edge", "reflect" or "symmetric".
    Stage: sample (changes the shape).
    """

    padding: int | tuple[int, ...] = 0
    fill: float = 0
    padding_mode: str = "constant"
    functional = S.pad
    batched = False

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "padding", _padding4(self, self.padding, "padding"))
        _check_fill(self, self.fill, scalar_only=True)
        _check_padding_mode(self, self.padding_mode)

    def refuses(self, field_type: FieldType) -> str | None:
        return super().refuses(field_type) or _constant_only(self, field_type)

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return S.pad(x, *self.padding, fill=self.fill, padding_mode=self.padding_mode, **_meta(field, canvas_size))


@dataclass(frozen=True)
class RandomCrop(Op):
    """Crop a (height, width) region at a random position, after optional padding (torchvision's
    ``RandomCrop``).

    Input: images (C, H, W), clips (T, C, H, W) with one crop for all frames, masks, boxes and
    keypoints (with constant padding); any dtype. Output: (..., C, *size). Stage: sample; fused
    into the decoder (region) when no padding is needed.
    Args:
        size: (height, width) in pixels, or an int for a square.
        padding: pixels added first on every side (int), (left/right, top/bottom) or
            (left, top, right, bottom); None for none.
        pad_if_needed: pad an image smaller than ``size`` up to it (on both sides, like torchvision).
        fill, padding_mode: as in `Pad`.
    """

    size: Size = 224
    padding: int | tuple[int, ...] | None = None
    pad_if_needed: bool = False
    fill: float = 0
    padding_mode: str = "constant"
    functional = S.crop
    batched = False
    schedulable = frozenset({"size"})

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "size", _pair(self.size, "RandomCrop(size)"))
        if self.padding is not None:
            object.__setattr__(self, "padding", _padding4(self, self.padding, "padding"))
        _check_fill(self, self.fill, scalar_only=True)
        _check_padding_mode(self, self.padding_mode)

    def refuses(self, field_type: FieldType) -> str | None:
        pads = self.pad_if_needed or any(self.padding or ())
        return super().refuses(field_type) or (_constant_only(self, field_type) if pads else None)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        left, top, right, bottom = self.padding or (0, 0, 0, 0)
        height, width = height + top + bottom, width + left + right
        crop_h, crop_w = self.size
        if self.pad_if_needed and height < crop_h:
            diff = crop_h - height
            top, bottom, height = top + diff, bottom + diff, height + 2 * diff
        if self.pad_if_needed and width < crop_w:
            diff = crop_w - width
            left, right, width = left + diff, right + diff, width + 2 * diff
        if height < crop_h or width < crop_w:
            raise ValueError(f"RandomCrop(size={self.size}): larger than the (padded) image {(height, width)}; "
                             "set pad_if_needed=True or crop smaller")
        return {"top": rng.integers(0, height - crop_h + 1) if height > crop_h else 0,
                "left": rng.integers(0, width - crop_w + 1) if width > crop_w else 0,
                "padding": (left, top, right, bottom)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        padding = tuple(params["padding"])
        if any(padding):
            x = S.pad(x, *padding, fill=self.fill, padding_mode=self.padding_mode, **_meta(field, canvas_size))
            if canvas_size is not None:
                left, top, right, bottom = padding
                canvas_size = (canvas_size[0] + top + bottom, canvas_size[1] + left + right)
        return S.crop(x, params["top"], params["left"], *self.size, **_meta(field, canvas_size))

    def fusable(self, field_type: FieldType) -> bool:
        return field_type.spec.decoder_fuses

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint | None:
        if any(params["padding"]):
            return None
        return DecodeHint(roi=(params["top"], params["left"], *self.size))

    def apply_decoded(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return x
