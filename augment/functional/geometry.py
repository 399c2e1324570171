"""Geometry kernels: crop, pad, resize, flips. uint8 stays uint8 where torch's kernel does."""

from __future__ import annotations

import torch
import torch.nn.functional as F

INTERPOLATIONS = ("nearest", "bilinear", "bicubic")


def _as_4d(x: torch.Tensor) -> tuple[torch.Tensor, torch.Size]:
    lead = x.shape[:-3]
    return x.reshape(-1, *x.shape[-3:]), lead


def resize_image(
    x: torch.Tensor, size: tuple[int, int], interpolation: str = "bilinear", antialias: bool = True
) -> torch.Tensor:
    """Resize the last two dims to ``size`` = (height, width).

    uint8 input stays uint8 for bilinear (torch has a vectorised uint8 antialiased kernel,
    ported from Pillow-SIMD) and is rounded and saturated for bicubic, as torchvision does.
    """
    if tuple(x.shape[-2:]) == tuple(size):
        return x
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation={interpolation!r}: expected one of {INTERPOLATIONS}")
    x4, lead = _as_4d(x)
    if interpolation == "nearest":
        out = F.interpolate(x4, size=size, mode="nearest-exact")
    elif x4.dtype == torch.uint8 and interpolation == "bilinear":
        out = F.interpolate(x4, size=size, mode="bilinear", antialias=antialias, align_corners=False)
    else:
        dtype = x4.dtype
        xf = x4 if x4.is_floating_point() else x4.float()
        out = F.interpolate(xf, size=size, mode=interpolation, antialias=antialias, align_corners=False)
        if not dtype.is_floating_point:
            out = out.round_().clamp_(0, 255).to(dtype)
    return out.reshape(*lead, *out.shape[-3:])


def crop_image(x: torch.Tensor, top: int, left: int, height: int, width: int, fill: float = 0) -> torch.Tensor:
    """The region (top, left, height, width); parts outside the image are ``fill`` (as torchvision)."""
    h, w = x.shape[-2:]
    if top >= 0 and left >= 0 and top + height <= h and left + width <= w:
        return x[..., top : top + height, left : left + width]
    out = x.new_full((*x.shape[:-2], height, width), fill)
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + height, h), min(left + width, w)
    if y1 > y0 and x1 > x0:
        out[..., y0 - top : y1 - top, x0 - left : x1 - left] = x[..., y0:y1, x0:x1]
    return out


def resized_crop_image(
    x: torch.Tensor,
    top: int,
    left: int,
    height: int,
    width: int,
    size: tuple[int, int],
    interpolation: str = "bilinear",
    antialias: bool = True,
) -> torch.Tensor:
    return resize_image(crop_image(x, top, left, height, width), size, interpolation, antialias)


def pad_image(
    x: torch.Tensor, left: int, top: int, right: int, bottom: int, fill: float = 0, mode: str = "constant"
) -> torch.Tensor:
    """Pad the last two dims; ``mode`` is constant, edge, reflect or symmetric (as torchvision)."""
    if mode == "constant":
        out = x.new_full((*x.shape[:-2], x.shape[-2] + top + bottom, x.shape[-1] + left + right), fill)
        out[..., top : top + x.shape[-2], left : left + x.shape[-1]] = x
        return out
    x4, lead = _as_4d(x)
    torch_mode = {"edge": "replicate", "reflect": "reflect"}.get(mode)
    if mode == "symmetric":
        out = _pad_symmetric(x4, left, top, right, bottom)
    elif torch_mode is None:
        raise ValueError(f"padding_mode={mode!r}: expected constant, edge, reflect or symmetric")
    else:
        dtype = x4.dtype
        xf = x4 if dtype.is_floating_point else x4.float()
        out = F.pad(xf, (left, right, top, bottom), mode=torch_mode).to(dtype)
    return out.reshape(*lead, *out.shape[-3:])


def _pad_symmetric(x: torch.Tensor, left: int, top: int, right: int, bottom: int) -> torch.Tensor:
    h, w = x.shape[-2:]
    rows = torch.arange(-top, h + bottom)
    cols = torch.arange(-left, w + right)
    rows = torch.where(rows < 0, -rows - 1, torch.where(rows >= h, 2 * h - rows - 1, rows)).clamp(0, h - 1)
    cols = torch.where(cols < 0, -cols - 1, torch.where(cols >= w, 2 * w - cols - 1, cols)).clamp(0, w - 1)
    return x[..., rows[:, None], cols[None, :]]


def _sample_mask(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return mask.to(x.device, torch.bool).reshape(-1, *(1,) * (x.ndim - 1))


def hflip(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mirror left-right the samples whose ``mask`` is true; the others pass unchanged."""
    if not bool(mask.any()):
        return x
    return torch.where(_sample_mask(mask, x), x.flip(-1), x)


def vflip(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mirror top-bottom the samples whose ``mask`` is true."""
    if not bool(mask.any()):
        return x
    return torch.where(_sample_mask(mask, x), x.flip(-2), x)
