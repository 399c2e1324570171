"""Geometry ops: crops and resizes (sample stage, fused into the decoder) and flips (batch stage)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from mediapipe.augment.base import Op, Params, Stage, check_probability
from mediapipe.augment.functional import geometry as F
from mediapipe.augment.functional.batching import as_batch
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


def _check_mask_keys(op: Op) -> None:
    object.__setattr__(op, "mask_keys", tuple(op.mask_keys))
    unknown = [k for k in op.mask_keys if k not in op.inputs]
    if unknown:
        raise ValueError(f"{type(op).__name__}(mask_keys={op.mask_keys!r}): {unknown} not among the inputs {op.inputs}")


@dataclass(frozen=True)
class _Resample(Op):
    """Shared by the resizing ops: ``mask_keys`` fields are resized with "nearest", no antialias."""

    mask_keys: tuple[str, ...] = field(default=(), kw_only=True)

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return self._resample(x, params, self.interpolation, self.antialias)

    def apply_to(self, x: torch.Tensor, params: Params, field: str) -> torch.Tensor:
        if field in self.mask_keys:
            return self._resample(x, params, "nearest", False)
        return self.apply(x, params)

    def fusable(self, field: str) -> bool:
        return field not in self.mask_keys and super().fusable(field)  # a mask is never smoothed

    def _resample(self, x: torch.Tensor, params: Params, interpolation: str, antialias: bool) -> torch.Tensor:
        raise NotImplementedError


@dataclass(frozen=True)
class RandomResizedCrop(_Resample):
    """Crop a random region of random area and aspect ratio, resized to ``size`` (Inception-style).

    Input  ``key``: uint8 or float (C, H, W), or a clip (T, C, H, W) with one crop for all frames.
    Output: (C, *size), same dtype. Stage: sample, fused into the decoder (region-of-interest
    and DCT-scaled decoding).
    Args:
        size: output (height, width), or an int for a square.
        scale: (low, high) fraction of the image area the crop covers.
        ratio: (low, high) crop width / height, drawn log-uniformly.
        interpolation: "bilinear" (default), "bicubic", "nearest" (torchvision's) or "nearest-exact"
            (pixel centres, Pillow's). antialias: when downscaling.
        mask_keys: input fields (segmentation masks) resized with "nearest", with the same crop
            as the other ``keys``. Setting it turns off the fusion into the decoder.
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
        _check_mask_keys(self)

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

    def _resample(self, x: torch.Tensor, params: Params, interpolation: str, antialias: bool) -> torch.Tensor:
        return F.resized_crop_image(x, params["top"], params["left"], params["height"], params["width"],
                                    self.size, interpolation, antialias)

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint | None:
        roi = (params["top"], params["left"], params["height"], params["width"])
        nearest = self.interpolation.startswith("nearest")
        return DecodeHint(roi=roi, size=None if nearest else self.size, interpolation=self.interpolation,
                          antialias=self.antialias)

    def apply_decoded(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        """Resize the decoded region; a no-op where the decoder already resampled it to ``size``
        (a JPEG decoded at a reduced DCT scale: see `mediapipe.decoders.image.plan_decode`)."""
        return F.resize_image(x, self.size, self.interpolation, self.antialias)


@dataclass(frozen=True)
class Resize(_Resample):
    """Resize: the shorter side to ``size`` (int), exactly to (height, width), or the longer
    side to ``max_size`` (``size=None``); ``max_size`` also caps the longer side of an int resize.

    Input/Output: (..., C, H, W), same dtype. Stage: sample, fused into the decoder (DCT scaling).
    Args:
        size: int (shorter side), (height, width), or None (then ``max_size`` sets the longer side).
        max_size: cap on the longer side, in pixels.
        interpolation: "bilinear", "bicubic", "nearest" or "nearest-exact"; antialias: when
            downscaling (torchvision's default).
        mask_keys: input fields resized with "nearest" (segmentation masks), never fused into their decoder.
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
        _check_mask_keys(self)

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

    def _resample(self, x: torch.Tensor, params: Params, interpolation: str, antialias: bool) -> torch.Tensor:
        return F.resize_image(x, tuple(params["size"]), interpolation, antialias)

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint | None:
        if self.interpolation.startswith("nearest"):
            return None
        return DecodeHint(size=tuple(params["size"]), interpolation=self.interpolation, antialias=self.antialias)


@dataclass(frozen=True)
class CenterCrop(Op):
    """Crop the central (height, width) region; an image smaller than that is padded with zeros.

    Input/Output: (..., C, H, W) -> (..., C, *size), same dtype. Stage: sample, fused into the
    decoder (region). Args: size: (height, width) or an int for a square, in pixels.
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

    Input  ``key``: (B, C, H, W) or clips (B, T, C, H, W), any dtype; a clip flips as a whole.
    Output: same shape and dtype. Stage: batch (only the selected samples are flipped).
    Args:
        p: probability of a flip per sample; 0 never flips, 1 always does.
    """

    p: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self, self.p)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"flip": rng.bernoulli(self.p)}

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        xb, pb, single = as_batch(x, params)
        out = F.hflip(xb, pb["flip"])
        return out[0] if single else out


@dataclass(frozen=True)
class VerticalFlip(HorizontalFlip):
    """Mirror top-bottom with probability ``p``, drawn per sample.

    Input  ``key``: (B, C, H, W) or clips (B, T, C, H, W), any dtype. Output: same shape and dtype.
    Args: p: probability of a flip per sample; 0 never, 1 always. Stage: batch.
    """

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        xb, pb, single = as_batch(x, params)
        out = F.vflip(xb, pb["flip"])
        return out[0] if single else out


Fill = float | tuple[float, ...]


def _padding4(padding: int | tuple[int, ...], name: str) -> tuple[int, int, int, int]:
    """torchvision's padding forms to (left, top, right, bottom)."""
    pad = (padding,) if isinstance(padding, int) else tuple(padding)
    if len(pad) not in (1, 2, 4) or any(not isinstance(p, int) or p < 0 for p in pad):
        raise ValueError(f"{name}={padding!r}: expected a non-negative int or a sequence of 1, 2 or 4 of them")
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
    if not values or not all(isinstance(v, (int, float)) for v in values) or (scalar_only and len(values) != 1):
        expected = "a number" if scalar_only else "a number or one number per channel"
        raise ValueError(f"{type(op).__name__}(fill={fill!r}): expected {expected}")


PADDING_MODES = ("constant", "edge", "reflect", "symmetric")


@dataclass(frozen=True)
class Pad(Op):
    """Pad the borders (torchvision's ``Pad``).

    Input  ``key``: (..., C, H, W), any dtype. Output: (..., C, H + top + bottom, W + left + right).
    Args:
        padding: pixels; an int for all sides, (left/right, top/bottom) or (left, top, right, bottom).
            0 is the identity.
        fill: value of the new pixels for ``padding_mode="constant"`` (a number, in the input's units).
        padding_mode: "constant", "edge", "reflect" or "symmetric".
    Stage: sample (changes the shape).
    """

    padding: int | tuple[int, ...] = 0
    fill: float = 0
    padding_mode: str = "constant"
    stage: ClassVar[Stage] = Stage.SAMPLE

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "padding", _padding4(self.padding, "Pad(padding)"))
        _check_fill(self, self.fill, scalar_only=True)
        _check_padding_mode(self, self.padding_mode)

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        left, top, right, bottom = self.padding
        return F.pad_image(x, left, top, right, bottom, self.fill, self.padding_mode)


@dataclass(frozen=True)
class RandomCrop(Op):
    """Crop a (height, width) region at a random position, after optional padding (torchvision's
    ``RandomCrop``).

    Input  ``key``: (C, H, W) or a clip (T, C, H, W) with one crop for all frames; any dtype.
    Output: (..., C, *size). Stage: sample; fused into the decoder (region) when no padding is needed.
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
    stage: ClassVar[Stage] = Stage.SAMPLE

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "size", _pair(self.size, "RandomCrop(size)"))
        if self.padding is not None:
            object.__setattr__(self, "padding", _padding4(self.padding, "RandomCrop(padding)"))
        _check_fill(self, self.fill, scalar_only=True)
        _check_padding_mode(self, self.padding_mode)

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

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        if any(params["padding"]):
            x = F.pad_image(x, *params["padding"], fill=self.fill, mode=self.padding_mode)
        return F.crop_image(x, params["top"], params["left"], *self.size)

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint | None:
        if any(params["padding"]):
            return None
        return DecodeHint(roi=(params["top"], params["left"], *self.size))

    def apply_decoded(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return x


def _degrees(value: float | tuple[float, float], name: str) -> tuple[float, float]:
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{name}={value}: a single number must be non-negative (the range is (-v, v))")
        return (-float(value), float(value))
    pair = tuple(float(v) for v in value)
    if len(pair) != 2 or pair[0] > pair[1]:
        raise ValueError(f"{name}={value!r}: expected a number or (low, high) with low <= high")
    return pair


def _center_offset(center: tuple[float, float] | None, x: torch.Tensor) -> tuple[float, float]:
    """torchvision's centre: (x, y) pixels from the top-left corner, re-expressed from the image centre."""
    if center is None:
        return (0.0, 0.0)
    height, width = x.shape[-2:]
    return (center[0] - width * 0.5, center[1] - height * 0.5)


def _check_center(op: Op, center: tuple[float, float] | None) -> None:
    if center is not None and len(center) != 2:
        raise ValueError(f"{type(op).__name__}(center={center!r}): expected (x, y) in pixels")


@dataclass(frozen=True)
class _Warp(Op):
    """Shared by the affine warps: ``mask_keys`` fields are warped with nearest and fill 0."""

    mask_keys: tuple[str, ...] = field(default=(), kw_only=True)

    def _check_warp_args(self) -> None:
        name = type(self).__name__
        if self.interpolation not in ("nearest", "bilinear"):
            raise ValueError(f"{name}(interpolation={self.interpolation!r}): expected 'nearest' or 'bilinear'")
        _check_center(self, self.center)
        _check_fill(self, self.fill)
        _check_mask_keys(self)

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        return self._warp(x, params, self.interpolation, self.fill)

    def apply_fields(self, data: dict, params: Params) -> None:
        for src, dst in zip(self.inputs, self.outputs):
            if src in self.mask_keys:
                data[dst] = self._warp(data[src], params, "nearest", 0)
            else:
                data[dst] = self._warp(data[src], params, self.interpolation, self.fill)

    def _warp(self, x: torch.Tensor, params: Params, interpolation: str, fill: Fill | None) -> torch.Tensor:
        raise NotImplementedError


@dataclass(frozen=True)
class RandomRotation(_Warp):
    """Rotate each sample by its own random angle, counter-clockwise (torchvision's ``RandomRotation``).

    Input  ``key``: (B, C, H, W) or clips (B, T, C, H, W); uint8 or float. A clip turns as a whole.
    Output: same shape and dtype (uint8 is warped in float32 and rounded); with ``expand`` the
    output grows to hold the whole rotated image.
    Args:
        degrees: (low, high) in degrees, or a number d for (-d, d); 0 is the identity.
        interpolation: "nearest" (default, use it for masks) or "bilinear".
        expand: grow the output to hold the rotated image. The shape then differs per sample,
            so the op runs in the sample stage and a later crop or resize must equalise sizes.
        center: (x, y) in pixels from the top-left corner; None for the image centre.
        fill: value of pixels from outside the image: a number or one per channel; None lets
            bilinear samples at the border blend with zeros (torchvision's ``fill=None``).
        mask_keys: input fields (segmentation masks) warped with "nearest" and fill 0 whatever
            ``interpolation`` and ``fill`` say, with the same angle as the other fields.
    Stage: batch (one batched ``grid_sample`` with per-sample matrices); sample when ``expand``.
    """

    degrees: float | tuple[float, float] = 0.0
    interpolation: str = "nearest"
    expand: bool = False
    center: tuple[float, float] | None = None
    fill: Fill | None = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "degrees", _degrees(self.degrees, "RandomRotation(degrees)"))
        self._check_warp_args()

    @property
    def stage(self) -> Stage:  # type: ignore[override]
        return Stage.SAMPLE if self.expand else Stage.BATCH

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"angle": rng.uniform(*self.degrees)}

    def _warp(self, x: torch.Tensor, params: Params, interpolation: str, fill: Fill | None) -> torch.Tensor:
        xb, pb, single = as_batch(x, params)
        angle = pb["angle"].reshape(-1)
        b = angle.shape[0]
        f64 = dict(dtype=torch.float64, device=angle.device)
        zeros = torch.zeros(b, 2, **f64)
        center = torch.tensor(_center_offset(self.center, x), **f64).expand(b, 2)
        # torchvision's rotate passes -angle to the affine matrix (its two conventions differ)
        matrix = F.affine_matrix(-angle, zeros, torch.ones(b, **f64), zeros, center)
        size = None
        if self.expand:
            if b != 1:
                raise ValueError("RandomRotation(expand=True) runs per sample (the output size depends on the angle)")
            size = F.rotate_output_size(matrix[0], *xb.shape[-2:])
        out = F.warp_affine(xb, matrix, interpolation, fill, size)
        return out[0] if single else out


@dataclass(frozen=True)
class RandomAffine(_Warp):
    """Random rotation, translation, scale and shear per sample, about the centre (torchvision's
    ``RandomAffine``, its ``_get_inverse_affine_matrix`` convention: positive angles turn clockwise).

    Input  ``key``: (B, C, H, W) or clips (B, T, C, H, W); uint8 or float. Output: same shape and dtype.
    Args:
        degrees: rotation range in degrees, (low, high) or d for (-d, d); 0 is the identity.
        translate: (a, b) maximum shift as a fraction of the width and height; None for none.
            Shifts are drawn in (-a W, a W) and rounded to whole pixels, as torchvision does.
        scale: (low, high) zoom factor; None keeps 1.
        shear: degrees: d for an x shear in (-d, d), (low, high) for x, or (xlo, xhi, ylo, yhi).
        interpolation: "nearest" (default, use it for masks) or "bilinear".
        fill: value of pixels from outside the image: a number or one per channel; None as in
            `RandomRotation`.
        mask_keys: input fields warped with "nearest" and fill 0, as in `RandomRotation`.
        center: (x, y) in pixels from the top-left corner; None for the image centre.
    Stage: batch (one batched ``grid_sample`` with per-sample matrices).
    """

    degrees: float | tuple[float, float] = 0.0
    translate: tuple[float, float] | None = None
    scale: tuple[float, float] | None = None
    shear: float | tuple[float, ...] | None = None
    interpolation: str = "nearest"
    fill: Fill | None = 0
    center: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "degrees", _degrees(self.degrees, "RandomAffine(degrees)"))
        if self.translate is not None:
            if len(self.translate) != 2 or not all(0.0 <= t <= 1.0 for t in self.translate):
                raise ValueError(f"RandomAffine(translate={self.translate!r}): expected (a, b) with 0 <= a, b <= 1")
        if self.scale is not None:
            if len(self.scale) != 2 or not 0 < self.scale[0] <= self.scale[1]:
                raise ValueError(f"RandomAffine(scale={self.scale!r}): expected (low, high) with 0 < low <= high")
        if self.shear is not None:
            shear = self.shear
            if isinstance(shear, (int, float)):
                shear = _degrees(shear, "RandomAffine(shear)")
            elif len(shear) == 4:
                shear = _degrees(shear[:2], "RandomAffine(shear)") + _degrees(shear[2:], "RandomAffine(shear)")
            elif len(shear) == 2:
                shear = _degrees(shear, "RandomAffine(shear)")
            else:
                raise ValueError(f"RandomAffine(shear={self.shear!r}): expected a number, 2 or 4 values in degrees")
            object.__setattr__(self, "shear", tuple(shear))
        self._check_warp_args()

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        angle = rng.uniform(*self.degrees)
        tx = ty = 0
        if self.translate is not None:
            max_dx, max_dy = self.translate[0] * width, self.translate[1] * height
            tx, ty = int(round(rng.uniform(-max_dx, max_dx))), int(round(rng.uniform(-max_dy, max_dy)))
        scale = rng.uniform(*self.scale) if self.scale is not None else 1.0
        shear_x = shear_y = 0.0
        if self.shear is not None:
            shear_x = rng.uniform(*self.shear[:2])
            if len(self.shear) == 4:
                shear_y = rng.uniform(*self.shear[2:])
        return {"angle": angle, "translate_x": tx, "translate_y": ty, "scale": scale,
                "shear_x": shear_x, "shear_y": shear_y}

    def _warp(self, x: torch.Tensor, params: Params, interpolation: str, fill: Fill | None) -> torch.Tensor:
        xb, pb, single = as_batch(x, params)
        b = xb.shape[0]
        center = torch.tensor(_center_offset(self.center, x), dtype=torch.float64, device=pb["angle"].device)
        matrix = F.affine_matrix(
            pb["angle"], torch.stack((pb["translate_x"], pb["translate_y"]), -1), pb["scale"],
            torch.stack((pb["shear_x"], pb["shear_y"]), -1), center.expand(b, 2),
        )
        out = F.warp_affine(xb, matrix, interpolation, fill)
        return out[0] if single else out
