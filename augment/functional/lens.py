"""rpp's lens warps as pure batched kernels, one per kind (images, clips, masks): the fish-eye map and
the lens-correction remap (OpenCV's undistortion model). Source coordinates are computed in
float64 from the canvas and each sample's coefficients; the bilinear taps run in float32, as rpp's
remap does. Boxes and keypoints have no kernel: the ops refuse them
(`mediapipe.augment.effects.FishEye`, `LensCorrection`)."""

from __future__ import annotations

import torch

from mediapipe.augment.functional.dispatch import Functional, register_kernel
from mediapipe.augment.functional.effects import as_float32, finish, flat_canvas

fisheye = Functional("fisheye")
lens_correction = Functional("lens_correction")


def fisheye_source(height: int, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """rpp's fish-eye map: (H, W) flat source index and validity. Output pixel (i, j) at n =
    (2 j / W - 1, 2 i / H - 1), d = |n| <= 1, reads the pixel at trunc((r n + 1) (W, H) / 2),
    r = d' / d with d' = (d + 1 - sqrt(1 - d^2)) / 2 (float64); outside the disc it is 0."""
    f64 = dict(device=device, dtype=torch.float64)
    ny = (2.0 * torch.arange(height, **f64) / height - 1.0)[:, None]
    nx = (2.0 * torch.arange(width, **f64) / width - 1.0)[None, :]
    d = torch.sqrt(nx * nx + ny * ny)
    inside = d <= 1.0
    dc = torch.where(inside, d, torch.zeros_like(d))
    bent = (dc + (1.0 - torch.sqrt(1.0 - dc * dc))) / 2.0
    r = torch.where(dc > 0, bent / torch.where(dc > 0, dc, torch.ones_like(dc)), torch.zeros_like(dc))
    sx = torch.trunc((r * nx + 1.0) * width / 2.0).to(torch.int64)
    sy = torch.trunc((r * ny + 1.0) * height / 2.0).to(torch.int64)
    valid = inside & (sx >= 0) & (sx < width) & (sy >= 0) & (sy < height)
    return torch.where(valid, sy * width + sx, 0), valid


def _take(x: torch.Tensor, index: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """out[b, ..., p] = x[b, ..., index[b, p]] where valid, else 0; index, valid (B or 1, H*W)."""
    height, width, flat = flat_canvas(x)
    index = index.reshape(index.shape[0], 1, -1).expand(flat.shape[0], flat.shape[1], -1)
    out = torch.gather(flat, 2, index) * valid.reshape(valid.shape[0], 1, -1).to(x.dtype)
    return out.reshape(x.shape)


@register_kernel(fisheye, "image")
def fisheye_image(x: torch.Tensor) -> torch.Tensor:
    index, valid = fisheye_source(*x.shape[-2:], x.device)
    return _take(x, index.reshape(1, -1), valid.reshape(1, -1))


register_kernel(fisheye, "video")(fisheye_image)
register_kernel(fisheye, "mask")(fisheye_image)  # the map already takes whole pixels: a mask's nearest


def lens_source(k1: torch.Tensor, k2: torch.Tensor, k3: torch.Tensor, p1: torch.Tensor, p2: torch.Tensor,
                focal: float, height: int, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """rpp's lens-correction remap (OpenCV's undistortion model), (B, H, W) source row and column
    (float64): the camera has fx = fy = focal * max(H, W) and its centre at ((W - 1) / 2, (H - 1) / 2);
    output pixel (i, j) has x = (j - cx) / fx, y = (i - cy) / fy, r2 = x^2 + y^2,
    kr = 1 + k1 r2 + k2 r2^2 + k3 r2^3 and reads column fx (x kr + 2 p1 x y + p2 (r2 + 2 x^2)) + cx,
    row fy (y kr + p1 (r2 + 2 y^2) + 2 p2 x y) + cy, computed as j + fx (x (kr - 1) + ...) and
    i + fy (y (kr - 1) + ...), which is exact where the coefficients are 0."""
    f64 = dict(device=device, dtype=torch.float64)
    f = focal * max(height, width)
    cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
    x = ((torch.arange(width, **f64) - cx) / f)[None, None, :]
    y = ((torch.arange(height, **f64) - cy) / f)[None, :, None]
    k1, k2, k3, p1, p2 = (v.to(**f64).reshape(-1, 1, 1) for v in (k1, k2, k3, p1, p2))
    r2 = x * x + y * y
    radial = r2 * (k1 + r2 * (k2 + r2 * k3))  # kr - 1: written as the pixel plus its shift, so all 0 is exact
    col = torch.arange(width, **f64)[None, None, :] + f * (x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x))
    row = torch.arange(height, **f64)[None, :, None] + f * (y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y)
    return row, col


def _remap_taps(coord: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """rpp's remap taps along one axis: inside where 0 <= floor(c) <= size - 1; the low tap
    floor(c), the high one min(low + 1, size - 1), the high weight c - low (float32)."""
    low = torch.floor(coord)
    inside = (low >= 0) & (low <= size - 1)
    low = low.clamp(0, size - 1)
    weight = (coord - low).to(torch.float32)
    low = low.to(torch.int64)
    return low, torch.clamp(low + 1, max=size - 1), weight, inside


@register_kernel(lens_correction, "image")
def lens_correction_image(x: torch.Tensor, k1: torch.Tensor, k2: torch.Tensor, k3: torch.Tensor, p1: torch.Tensor,
                          p2: torch.Tensor, *, focal: float) -> torch.Tensor:
    """Bilinear at `lens_source`, rpp's remap: the four taps' weights (1 - wy)(1 - wx), (1 - wy) wx,
    wy (1 - wx), wy wx summed in that order in float32 and rounded to even; 0 outside."""
    height, width, flat = flat_canvas(x)
    row, col = lens_source(k1, k2, k3, p1, p2, focal, height, width, x.device)
    y0, y1, wy, in_y = _remap_taps(row, height)
    x0, x1, wx, in_x = _remap_taps(col, width)
    b, m = flat.shape[:2]
    xf = as_float32(flat)

    def tap(ys: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
        return torch.gather(xf, 2, (ys * width + xs).reshape(b, 1, -1).expand(b, m, -1))

    def w(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(b, 1, -1)

    inside = (in_y & in_x).to(torch.float32)  # folded into the weights: 0 outside, as rpp's fill
    out = (tap(y0, x0) * w((1 - wy) * (1 - wx) * inside) + tap(y0, x1) * w((1 - wy) * wx * inside)
           + tap(y1, x0) * w(wy * (1 - wx) * inside) + tap(y1, x1) * w(wy * wx * inside))
    return finish(out.reshape(x.shape), x)


register_kernel(lens_correction, "video")(lens_correction_image)


@register_kernel(lens_correction, "mask")
def lens_correction_mask(x: torch.Tensor, k1: torch.Tensor, k2: torch.Tensor, k3: torch.Tensor, p1: torch.Tensor,
                         p2: torch.Tensor, *, focal: float) -> torch.Tensor:
    """A mask's nearest: the pixel at min(floor(c + 0.5), size - 1) on each axis, 0 where the
    image's taps fall outside (the same rule as `lens_correction_image`)."""
    height, width = x.shape[-2:]
    row, col = lens_source(k1, k2, k3, p1, p2, focal, height, width, x.device)
    inside = (torch.floor(row) >= 0) & (torch.floor(row) <= height - 1)
    inside &= (torch.floor(col) >= 0) & (torch.floor(col) <= width - 1)
    ys = torch.floor(row + 0.5).clamp(0, height - 1).to(torch.int64)
    xs = torch.floor(col + 0.5).clamp(0, width - 1).to(torch.int64)
    b = row.shape[0]
    return _take(x, (ys * width + xs).reshape(b, -1), inside.reshape(b, -1))
