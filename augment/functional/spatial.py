"""The geometric functionals: one table {kind: kernel} each, for images, videos, masks, boxes
and keypoints, so one draw moves every spatial field of a sample together.

Images and videos share a kernel (a clip is frames with leading dims). A mask goes through the
image kernel with nearest sampling, no antialiasing and fill 0, whatever the op's options say
for images: its values are class ids, never blended. Boxes and keypoints kernels are in
`mediapipe.augment.functional.objects`. Flip, affine and clamp kernels are batched (one value
per sample); crop, pad and resize kernels take one sample's plain numbers.
"""

from __future__ import annotations

from typing import Any

import torch

from mediapipe.augment.functional import geometry as G
from mediapipe.augment.functional import objects as O
from mediapipe.augment.functional.dispatch import Functional, register_kernel
from mediapipe.fields import BOXES, IMAGE, KEYPOINTS, KIND_SPECS, MASK, VIDEO

hflip = Functional("hflip")
vflip = Functional("vflip")
resize = Functional("resize")
crop = Functional("crop")
resized_crop = Functional("resized_crop")
pad = Functional("pad")
affine = Functional("affine")
iou_crop = Functional("iou_crop")  # a crop that marks the boxes whose centre it leaves out (RandomIoUCrop)
clamp = Functional("clamp")  # boxes clipped to their canvas (ClampBoundingBoxes)


def sampling(kind: str, interpolation: str, antialias: bool = False, fill: Any = 0) -> tuple[str, bool, Any]:
    """(interpolation, antialias, fill) a field of ``kind`` is resampled with, for an op set to
    these for images: a kind with its own `KindSpec.resampling` (a mask: nearest, or
    "nearest-exact" when asked for) takes it, no antialiasing and fill 0, whatever the op says.
    The torch kernels and the DALI lowering both ask here."""
    own = KIND_SPECS[kind].resampling
    if own is None:
        return interpolation, antialias, fill
    return ("nearest-exact" if own == "nearest" and interpolation == "nearest-exact" else own), False, 0


def check_fill(fill: Any, x: torch.Tensor) -> None:
    """Refuse a fill the images cannot hold: one value or one per channel, each within an integer
    dtype's range (torch refuses 300 for uint8 in a pad and wraps it to 44 in a warp)."""
    if fill is None:
        return
    values = tuple(fill) if isinstance(fill, (tuple, list)) else (fill,)
    channels = int(x.shape[-3]) if x.ndim >= 3 else 1
    if len(values) not in (1, channels):
        raise ValueError(f"fill={fill!r} has {len(values)} values for images of {channels} channels: give one "
                         "number, or one per channel")
    if not x.is_floating_point() and x.dtype != torch.bool:
        info = torch.iinfo(x.dtype)
        if not all(info.min <= v <= info.max for v in values):
            raise ValueError(f"fill={fill!r} does not fit {x.dtype} images ({info.min}..{info.max}): give it in the "
                             "images' units (convert the images with ToDtype first to fill in another range)")


def _exact(x: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """A mask in a dtype torch's samplers take without changing a value (class ids as float64)."""
    if x.dtype == torch.uint8 or x.is_floating_point():
        return x, x.dtype
    return x.to(torch.float64), x.dtype


def _as_mask(out: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return out if out.dtype == dtype else out.round().to(dtype)


def _with_channel(x: torch.Tensor, dims: int) -> tuple[torch.Tensor, bool]:
    """A mask without a channel dim ((H, W), or (B, H, W) batched: ``dims`` = 2 or 3) gets one."""
    return (x.unsqueeze(-3), True) if x.ndim == dims else (x, False)


# -- flips (batched: one flag per sample) ------------------------------------------------------------
register_kernel(hflip, IMAGE)(G.hflip_image)
register_kernel(hflip, VIDEO)(G.hflip_image)
register_kernel(hflip, BOXES)(O.hflip_boxes)
register_kernel(hflip, KEYPOINTS)(O.hflip_keypoints)
register_kernel(vflip, IMAGE)(G.vflip_image)
register_kernel(vflip, VIDEO)(G.vflip_image)
register_kernel(vflip, BOXES)(O.vflip_boxes)
register_kernel(vflip, KEYPOINTS)(O.vflip_keypoints)


@register_kernel(hflip, MASK)
def hflip_mask(x: torch.Tensor, flip: torch.Tensor, **_: Any) -> torch.Tensor:
    return G.hflip_image(x, flip)  # dim -1 is the width for (B, H, W) masks too


@register_kernel(vflip, MASK)
def vflip_mask(x: torch.Tensor, flip: torch.Tensor, **_: Any) -> torch.Tensor:
    return G.vflip_image(x, flip)


# -- resize, crop, resized crop, pad (one sample) -----------------------------------------------------
@register_kernel(resize, IMAGE)
def resize_image(x: torch.Tensor, size: tuple[int, int], interpolation: str = "bilinear", antialias: bool = True,
                 **_: Any) -> torch.Tensor:
    return G.resize_image(x, size, interpolation, antialias)


register_kernel(resize, VIDEO)(resize_image)


@register_kernel(resize, MASK)
def resize_mask(x: torch.Tensor, size: tuple[int, int], interpolation: str = "nearest", **_: Any) -> torch.Tensor:
    """Nearest ("nearest-exact" when asked for), never antialiased, as torchvision's ``resize_mask``."""
    mode, antialias, _ = sampling(MASK, interpolation)
    x3, squeeze = _with_channel(x, 2)
    xf, dtype = _exact(x3)
    out = _as_mask(G.resize_image(xf, size, mode, antialias), dtype)
    return out.squeeze(-3) if squeeze else out


register_kernel(resize, BOXES)(O.resize_boxes)
register_kernel(resize, KEYPOINTS)(O.resize_keypoints)


@register_kernel(crop, IMAGE)
def crop_image(x: torch.Tensor, top: int, left: int, height: int, width: int, **_: Any) -> torch.Tensor:
    """The region; parts outside the image are 0 (as torchvision's ``crop``)."""
    return G.crop_image(x, top, left, height, width)


register_kernel(crop, VIDEO)(crop_image)
register_kernel(crop, BOXES)(O.crop_boxes)
register_kernel(crop, KEYPOINTS)(O.crop_keypoints)


@register_kernel(crop, MASK)
def crop_mask(x: torch.Tensor, top: int, left: int, height: int, width: int, **_: Any) -> torch.Tensor:
    """The region, exact; outside the mask is 0 (background)."""
    return G.crop_image(x, top, left, height, width)


@register_kernel(resized_crop, IMAGE)
def resized_crop_image(x: torch.Tensor, top: int, left: int, height: int, width: int, size: tuple[int, int],
                       interpolation: str = "bilinear", antialias: bool = True, **_: Any) -> torch.Tensor:
    return G.resized_crop_image(x, top, left, height, width, size, interpolation, antialias)


register_kernel(resized_crop, VIDEO)(resized_crop_image)


@register_kernel(resized_crop, MASK)
def resized_crop_mask(x: torch.Tensor, top: int, left: int, height: int, width: int, size: tuple[int, int],
                      interpolation: str = "nearest", **_: Any) -> torch.Tensor:
    return resize_mask(G.crop_image(x, top, left, height, width), size, interpolation)


register_kernel(resized_crop, BOXES)(O.resized_crop_boxes)
register_kernel(resized_crop, KEYPOINTS)(O.resized_crop_keypoints)


@register_kernel(pad, IMAGE)
def pad_image(x: torch.Tensor, left: int, top: int, right: int, bottom: int, fill: float = 0,
              padding_mode: str = "constant", **_: Any) -> torch.Tensor:
    if padding_mode == "constant":
        check_fill(fill, x)
    return G.pad_image(x, left, top, right, bottom, fill, padding_mode)


register_kernel(pad, VIDEO)(pad_image)


@register_kernel(pad, MASK)
def pad_mask(x: torch.Tensor, left: int, top: int, right: int, bottom: int, padding_mode: str = "constant",
             **_: Any) -> torch.Tensor:
    """Padded with 0 (background), or edge/reflect/symmetric copies of the mask."""
    x3, squeeze = _with_channel(x, 2)
    xf, dtype = _exact(x3)
    fill = sampling(MASK, "nearest")[2]
    out = _as_mask(G.pad_image(xf, left, top, right, bottom, fill, padding_mode), dtype)
    return out.squeeze(-3) if squeeze else out


register_kernel(pad, BOXES)(O.pad_boxes)
register_kernel(pad, KEYPOINTS)(O.pad_keypoints)


# -- affine warps (batched: one inverse matrix per sample) -------------------------------------------
@register_kernel(affine, IMAGE)
def affine_image(x: torch.Tensor, inverse: torch.Tensor, interpolation: str = "nearest",
                 fill: float | tuple[float, ...] | None = 0.0, output_size: tuple[int, int] | None = None,
                 **_: Any) -> torch.Tensor:
    check_fill(fill, x)
    return G.warp_affine(x, inverse, interpolation, fill, output_size)


register_kernel(affine, VIDEO)(affine_image)


@register_kernel(affine, MASK)
def affine_mask(x: torch.Tensor, inverse: torch.Tensor, output_size: tuple[int, int] | None = None,
                **_: Any) -> torch.Tensor:
    """Nearest, fill 0 (background), whatever the op's interpolation and fill for images."""
    x4, squeeze = _with_channel(x, 3)
    xf, dtype = _exact(x4)
    interpolation, _, fill = sampling(MASK, "nearest")
    out = G.warp_affine(xf, inverse, interpolation, fill, output_size)
    out = _as_mask(out, dtype)
    return out.squeeze(-3) if squeeze else out


register_kernel(affine, BOXES)(O.affine_boxes)
register_kernel(affine, KEYPOINTS)(O.affine_keypoints)


# -- detection: the IoU crop (one sample), clamping boxes (batched: a canvas per row) ----------------------
register_kernel(iou_crop, IMAGE)(crop_image)
register_kernel(iou_crop, VIDEO)(crop_image)
register_kernel(iou_crop, MASK)(crop_mask)
register_kernel(iou_crop, KEYPOINTS)(O.crop_keypoints)
register_kernel(iou_crop, BOXES)(O.iou_crop_boxes)


@register_kernel(clamp, BOXES)
def clamp_boxes(boxes: torch.Tensor, *, canvas_size: tuple[int, int], format: str, **_: Any) -> torch.Tensor:
    return O.clamp_boxes(boxes, canvas_size, format)
