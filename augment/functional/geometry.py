"""Geometry kernels: crop, pad, resize, flips. uint8 stays uint8 where torch's kernel does."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

INTERPOLATIONS = ("nearest", "nearest-exact", "bilinear", "bicubic")


def _as_4d(x: torch.Tensor) -> tuple[torch.Tensor, torch.Size]:
    lead = x.shape[:-3]
    return x.reshape(-1, *x.shape[-3:]), lead


def resize_image(
    x: torch.Tensor, size: tuple[int, int], interpolation: str = "bilinear", antialias: bool = True
) -> torch.Tensor:
    """Resize the last two dims to ``size`` = (height, width), as torchvision's ``resize`` on tensors.

    "nearest" is torch's (and torchvision's) legacy nearest; "nearest-exact" samples pixel
    centres (Pillow's). On the CPU uint8 stays uint8 for bilinear and bicubic (torch's
    vectorised uint8 kernels, ported from Pillow-SIMD, which torchvision uses too); elsewhere
    uint8 is resized in float32, then rounded and saturated, as torchvision does.
    """
    if tuple(x.shape[-2:]) == tuple(size):
        return x
    if x.numel() == 0:  # no planes (a sample without objects, one mask each)
        return x.new_zeros((*x.shape[:-2], *size))
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation={interpolation!r}: expected one of {INTERPOLATIONS}")
    x4, lead = _as_4d(x)
    if interpolation.startswith("nearest"):
        out = F.interpolate(x4, size=size, mode=interpolation)
    elif x4.dtype == torch.uint8 and x4.device.type == "cpu":
        out = F.interpolate(x4, size=size, mode=interpolation, antialias=antialias, align_corners=False)
    else:
        dtype = x4.dtype
        xf = x4 if x4.is_floating_point() else x4.float()
        out = F.interpolate(xf, size=size, mode=interpolation, antialias=antialias, align_corners=False)
        if not dtype.is_floating_point:
            out = out.clamp_(0, 255).round_().to(dtype)
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


# -- a fractional box, resampled as the crop of an exact box would be ----------------------------
# torch's resampling kernels place output sample i of a resize at input coordinate
# first + (i + 0.5) * scale, where ``first`` is the first row (column) they are given: an
# integer. A box that starts between pixels (a box drawn on the full image, seen on a decode at
# a reduced DCT scale) is reached by giving the kernel ``skip`` more output samples in front and
# starting the input ``skip * scale`` earlier: first + skip * scale lands on the box's start.
BOX_TOLERANCE = 1 / 32  # largest offset of the resampling grid from the box, in output pixels
MAX_SKIP = 64  # leading output samples the kernel may compute and drop to reach the box


@dataclass(frozen=True)
class AxisWindow:
    """How one axis of a fractional box is resampled: input[first:stop] to ``skip + size``
    samples at ``scale`` input pixels apart, the first ``skip`` dropped. ``error``: how far the
    sampling grid is from the box's start, in output pixels."""

    first: int
    stop: int
    skip: int
    size: int
    scale: float
    error: float


def axis_window(start: float, length: float, size: int, extent: int) -> AxisWindow:
    """The window that resamples [start, start + length) of an axis of ``extent`` pixels to
    ``size`` samples: the fewest leading samples whose grid lands within `BOX_TOLERANCE` of the
    box's start (before the image, where the box starts near its edge: the edge pixel is
    repeated), else the closest grid found. The input stops at the box's end (rounded), where
    a crop would cut the filter off."""
    scale = length / size
    stop = min(extent, max(1, round(start + length)))
    best: AxisWindow | None = None
    for skip in range(MAX_SKIP + 1):
        first = min(math.floor(start - skip * scale + 0.5), stop - 1)
        error = abs(first + skip * scale - start) / scale
        if best is None or error < best.error:
            best = AxisWindow(first, stop, skip, size, scale, error)
        if best.error <= BOX_TOLERANCE:
            break
    return best


def _window(x: torch.Tensor, window: AxisWindow, dim: int) -> torch.Tensor:
    """x[first:stop] along ``dim``; rows before the image repeat its first row."""
    if window.first >= 0:
        return x.narrow(dim, window.first, window.stop - window.first)
    index = torch.arange(window.first, window.stop, device=x.device).clamp_(min=0)
    return x.index_select(dim, index)


def resample_windows(x: torch.Tensor, rows: AxisWindow, cols: AxisWindow, interpolation: str = "bilinear",
                     antialias: bool = True) -> torch.Tensor:
    """Resample x (..., C, H, W) through one window per axis (see `axis_window`); the output is
    (..., C, rows.size, cols.size) and equals ``resize_image`` of the crop for an exact box."""
    if interpolation not in ("bilinear", "bicubic"):
        raise ValueError(f"interpolation={interpolation!r}: a fractional box takes 'bilinear' or 'bicubic'")
    x4, lead = _as_4d(_window(_window(x, rows, -2), cols, -1))
    if x.dim() >= 3 and x.stride(-3) == 1:  # channels last (a decoder's HWC array): the fast layout
        x4 = x4.contiguous(memory_format=torch.channels_last)
    size = [rows.skip + rows.size, cols.skip + cols.size]
    scales = (1.0 / rows.scale, 1.0 / cols.scale)  # torch's scale factors: output over input
    if antialias and interpolation == "bilinear":
        kernel = torch.ops.aten._upsample_bilinear2d_aa
    elif antialias:
        kernel = torch.ops.aten._upsample_bicubic2d_aa
    else:
        kernel = torch.ops.aten.upsample_bilinear2d if interpolation == "bilinear" else torch.ops.aten.upsample_bicubic2d
    if x4.dtype == torch.uint8 and x4.device.type == "cpu":
        out = kernel(x4, size, False, *scales)
    else:
        dtype = x4.dtype
        out = kernel(x4 if x4.is_floating_point() else x4.float(), size, False, *scales)
        if not dtype.is_floating_point:
            out = out.clamp_(0, 255).round_().to(dtype)
    out = out[..., rows.skip :, cols.skip :]
    return out.reshape(*lead, *out.shape[-3:])


def resize_box(x: torch.Tensor, box: tuple[float, float, float, float], size: tuple[int, int],
               interpolation: str = "bilinear", antialias: bool = True) -> torch.Tensor:
    """The region ``box`` = (top, left, height, width) of x (..., C, H, W), in pixels that may be
    fractional, resampled to ``size``: `resized_crop_image` for an integer box, and otherwise the
    same filter placed on the box to within `BOX_TOLERANCE` of an output pixel."""
    top, left, height, width = box
    if all(float(v).is_integer() for v in box):
        return resized_crop_image(x, int(top), int(left), int(height), int(width), size, interpolation, antialias)
    rows = axis_window(top, height, size[0], x.shape[-2])
    cols = axis_window(left, width, size[1], x.shape[-1])
    return resample_windows(x, rows, cols, interpolation, antialias)


def pad_image(
    x: torch.Tensor, left: int, top: int, right: int, bottom: int, fill: float | tuple[float, ...] = 0,
    mode: str = "constant"
) -> torch.Tensor:
    """Pad the last two dims; ``mode`` is constant, edge, reflect or symmetric (as torchvision).
    ``fill``: the new pixels' value for "constant", one number or one per channel (dim -3)."""
    if mode == "constant":
        shape = (*x.shape[:-2], x.shape[-2] + top + bottom, x.shape[-1] + left + right)
        if isinstance(fill, (tuple, list)) and len(fill) > 1:
            out = x.new_empty(shape)
            out.copy_(torch.tensor(fill, dtype=torch.float64).to(x.dtype).reshape(-1, 1, 1).expand(shape))
        else:
            out = x.new_full(shape, fill[0] if isinstance(fill, (tuple, list)) else fill)
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


def _selected(mask: torch.Tensor) -> torch.Tensor:
    """Indices of the true entries of a per-sample mask (B,), on the mask's device."""
    return mask.reshape(-1).nonzero().reshape(-1)


def hflip_image(x: torch.Tensor, mask: torch.Tensor, **_: object) -> torch.Tensor:
    """Mirror left-right the samples whose ``mask`` is true; the others pass unchanged.

    On the CPU only the selected samples are flipped, one at a time, each cache-resident; on a
    device one ``torch.where`` over the batch, which needs no count of the selected samples
    (reading one would make the host wait for the device).
    """
    return _flip_selected(x, mask, -1)


def vflip_image(x: torch.Tensor, mask: torch.Tensor, **_: object) -> torch.Tensor:
    """Mirror top-bottom the samples whose ``mask`` is true."""
    return _flip_selected(x, mask, -2)


def _flip_selected(x: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    if x.device.type != "cpu":
        return torch.where(mask.to(x.device).reshape(-1, *([1] * (x.ndim - 1))), x.flip(dim), x)
    idx = _selected(mask.to(x.device))
    if idx.numel() == 0:
        return x
    if idx.numel() == x.shape[0]:
        return x.flip(dim)
    out = x.clone()  # ours to write: the input stays untouched
    for i in idx.tolist():
        out[i] = x[i].flip(dim)  # dim counts from the end, so it holds for one sample too
    return out


# -- EXIF orientation: the turns and mirrors of `PIL.ImageOps.exif_transpose` ----------------------------
def orient_image(x: torch.Tensor, orientation: int) -> torch.Tensor:
    """x (..., H, W) as EXIF ``orientation`` (1 to 8) shows it: mirrored, turned or transposed in its
    last two dims, as Pillow's ``exif_transpose`` turns the pixels (a new contiguous tensor, or x for 1)."""
    if orientation == 1:
        return x
    turns = {2: lambda t: t.flip(-1), 3: lambda t: t.flip(-2, -1), 4: lambda t: t.flip(-2),
             5: lambda t: t.transpose(-2, -1), 6: lambda t: torch.rot90(t, -1, dims=(-2, -1)),
             7: lambda t: t.transpose(-2, -1).flip(-2, -1), 8: lambda t: torch.rot90(t, 1, dims=(-2, -1))}
    if orientation not in turns:
        raise ValueError(f"EXIF orientation {orientation!r}: expected 1 to 8")
    return turns[orientation](x).contiguous()


# -- affine warps (batched: one matrix per sample) ------------------------------------------------
def affine_matrix(
    angle: torch.Tensor,
    translate: torch.Tensor,
    scale: torch.Tensor,
    shear: torch.Tensor,
    center: torch.Tensor,
) -> torch.Tensor:
    """Per-sample *inverse* affine matrices (B, 2, 3), torchvision's ``_get_inverse_affine_matrix``.

    angle (B,) degrees, clockwise positive as in ``affine``; translate (B, 2) pixels (x, y);
    scale (B,); shear (B, 2) degrees (x, y); center (B, 2) pixels relative to the image centre.
    Computed in float64, as torchvision does in Python floats.
    """
    f64 = dict(dtype=torch.float64)
    rot = torch.deg2rad(angle.to(**f64))
    sx, sy = torch.deg2rad(shear.to(**f64)).unbind(-1)
    cx, cy = center.to(**f64).unbind(-1)
    tx, ty = translate.to(**f64).unbind(-1)
    scale = scale.to(**f64)
    a = torch.cos(rot - sy) / torch.cos(sy)
    b = -(a * torch.tan(sx) + torch.sin(rot))
    c = torch.sin(rot - sy) / torch.cos(sy)
    d = torch.cos(rot) - c * torch.tan(sx)
    m0, m1, m3, m4 = d / scale, -b / scale, -c / scale, a / scale
    m2 = cx - m0 * (cx + tx) - m1 * (cy + ty)
    m5 = cy - m3 * (cx + tx) - m4 * (cy + ty)
    return torch.stack((m0, m1, m2, m3, m4, m5), dim=-1).reshape(-1, 2, 3)


def rotate_output_size(matrix: torch.Tensor, height: int, width: int) -> tuple[int, int]:
    """(height, width) holding the whole rotated image (``expand=True``), as torchvision computes it."""
    half_w, half_h = 0.5 * width, 0.5 * height
    pts = torch.tensor([[-half_w, -half_h, 1.0], [-half_w, half_h, 1.0], [half_w, half_h, 1.0],
                        [half_w, -half_h, 1.0]])
    new_pts = pts @ matrix.reshape(2, 3).to("cpu", torch.float32).T
    lo, hi = new_pts.aminmax(dim=0)
    halfs = torch.tensor((half_w, half_h))
    tol = 1e-4  # torchvision truncates to 1e-4 so that 1e-15 does not ceil to 1
    hi = ((hi + halfs) / tol).trunc() * tol
    lo = ((lo + halfs) / tol).trunc() * tol
    size = hi.ceil() - lo.floor()
    return int(size[1]), int(size[0])


def warp_affine(
    x: torch.Tensor,
    matrix: torch.Tensor,
    interpolation: str = "nearest",
    fill: float | tuple[float, ...] | None = 0.0,
    output_size: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Warp sample i of ``x`` (B, ..., C, H, W) by the inverse matrix ``matrix[i]`` (B, 2, 3).

    One ``affine_grid``-style grid per sample and a single ``grid_sample`` for the whole batch;
    every frame of a clip shares its sample's matrix. Pixels from outside the image get
    ``fill`` (per channel or one value). uint8 is warped in float32 and rounded back.
    Same coordinates as torchvision's ``affine`` / ``rotate`` on tensors.
    """
    if interpolation not in ("nearest", "bilinear"):
        raise ValueError(f"interpolation={interpolation!r}: expected 'nearest' or 'bilinear'")
    b = x.shape[0]
    c, h, w = x.shape[-3:]
    oh, ow = output_size if output_size is not None else (h, w)
    if x.numel() == 0:  # no planes (a sample without objects, one mask each)
        return x.new_zeros((*x.shape[:-2], oh, ow))
    fp = x.is_floating_point()
    dtype = x.dtype if fp and x.dtype != torch.float16 else torch.float32
    theta = matrix.to(x.device, dtype).reshape(b, 2, 3)
    # torchvision's _affine_grid: pixel-centred base grid, theta rescaled by the *input* size
    xs = torch.linspace((1.0 - ow) * 0.5, (ow - 1.0) * 0.5, steps=ow, device=x.device, dtype=dtype)
    ys = torch.linspace((1.0 - oh) * 0.5, (oh - 1.0) * 0.5, steps=oh, device=x.device, dtype=dtype)
    rescaled = theta.transpose(1, 2) / torch.tensor([0.5 * w, 0.5 * h], device=x.device, dtype=dtype)
    # base (x, y, 1) @ rescaled through bmm, as torchvision does: written out as x * row0 + y * row1 + row2
    # it rounds differently wherever the BLAS kernel fuses the products (FMA), and pixels move by one level
    base = torch.empty(1, oh, ow, 3, device=x.device, dtype=dtype)
    base[..., 0].copy_(xs)
    base[..., 1].copy_(ys.unsqueeze(-1))
    base[..., 2].fill_(1)
    grid = base.view(1, oh * ow, 3).expand(b, -1, -1).bmm(rescaled).view(b, oh, ow, 2)

    lead = x.shape[1:-3]
    planes = x.reshape(b, -1, h, w).to(dtype)  # (B, T*C, H, W): one grid for all frames
    if fill is not None:
        planes = torch.cat((planes, torch.ones(b, 1, h, w, device=x.device, dtype=dtype)), dim=1)
    out = F.grid_sample(planes, grid, mode=interpolation, padding_mode="zeros", align_corners=False)
    if fill is not None:
        out, mask = out[:, :-1], out[:, -1:]
        fills = torch.as_tensor(fill, device=x.device, dtype=dtype).reshape(-1)
        fill_img = fills.repeat(out.shape[1] // c).reshape(1, -1, 1, 1) if fills.numel() == c else fills.reshape(1, 1, 1, 1)
        if interpolation == "nearest":
            out = torch.where(mask < 0.5, fill_img.expand_as(out), out)
        else:
            out = out.sub_(fill_img).mul_(mask).add_(fill_img)
    out = out.reshape(b, *lead, c, oh, ow)
    if not fp:
        return out.round_().to(x.dtype)
    return out.to(x.dtype)
