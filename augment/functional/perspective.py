"""Perspective warps, batched: one homography per sample, torchvision's coefficients and grid.

A sample's eight ``coefficients`` (a, b, c, d, e, f, g, h) take an output pixel (x, y), in
pixels from the image's top-left corner (a pixel's centre at +0.5), to the input point
((a x + b y + c) / (g x + h y + 1), (d x + e y + f) / (g x + h y + 1)), as torchvision's
``perspective`` reads them. Images and videos are resampled through one ``grid_sample`` for the
whole batch (`grid_transform`, torchvision's ``_apply_grid_transform`` with one grid per
sample: the same arithmetic, sample by sample); masks with nearest and fill 0; boxes and
keypoints move through the inverse homography (boxes: the box holding the four moved
corners, clamped to the canvas), as torchvision moves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from mediapipe.augment.functional.dispatch import Functional, register_kernel
from mediapipe.augment.functional.objects import _in_xyxy
from mediapipe.augment.functional.spatial import _as_mask, _exact, _with_channel, check_fill, sampling
from mediapipe.fields import BOXES, IMAGE, KEYPOINTS, MASK, VIDEO

Fill = float | Sequence[float] | None

perspective = Functional("perspective")

WARP_INTERPOLATIONS = ("nearest", "bilinear")  # what torch's grid_sample does as torchvision asks it


def perspective_coefficients(startpoints: Sequence[Sequence[int]], endpoints: Sequence[Sequence[int]]
                             ) -> list[float]:
    """The eight coefficients taking ``endpoints`` (four corners of the output) to ``startpoints``
    (those of the input), torchvision's ``_get_perspective_coeffs``: least squares in float64,
    rounded to float32."""
    a = torch.zeros(8, 8, dtype=torch.float64)
    for i, (p1, p2) in enumerate(zip(endpoints, startpoints)):
        a[2 * i, :] = torch.tensor([p1[0], p1[1], 1, 0, 0, 0, -p2[0] * p1[0], -p2[0] * p1[1]])
        a[2 * i + 1, :] = torch.tensor([0, 0, 0, p1[0], p1[1], 1, -p2[1] * p1[0], -p2[1] * p1[1]])
    b = torch.tensor(startpoints, dtype=torch.float64).view(8)
    return torch.linalg.lstsq(a, b, driver="gels").solution.to(torch.float32).tolist()


def grid_dtype(x: torch.Tensor) -> torch.dtype:
    """What a grid warp computes in: the image's float dtype (float16 in float32), else float32."""
    return x.dtype if x.is_floating_point() and x.dtype != torch.float16 else torch.float32


def grid_transform(x: torch.Tensor, grid: torch.Tensor, interpolation: str, fill: Fill) -> torch.Tensor:
    """Sample i of ``x`` (B, ..., C, H, W) read at ``grid[i]`` (B, oh, ow, 2; normalised, align_corners
    False): torchvision's ``_apply_grid_transform`` with one grid per sample, every frame of a clip
    on its sample's grid. Outside the image: ``fill`` (one value or one per channel) blended by the
    interpolated inside-mask, as torchvision blends it; None reads zeros. uint8 is sampled in the
    grid's float dtype and rounded back; float16 is sampled in float32 and cast back."""
    b = x.shape[0]
    c, h, w = x.shape[-3:]
    oh, ow = grid.shape[1:3]
    out_shape = (*x.shape[:-2], oh, ow)
    if x.numel() == 0:  # no planes (a sample without objects, one mask each)
        return x.new_zeros(out_shape)
    fp = x.dtype == grid.dtype
    planes = x.reshape(b, -1, h, w)
    planes = planes if fp else planes.to(grid.dtype)
    if fill is not None:
        planes = torch.cat((planes, torch.ones(b, 1, h, w, dtype=planes.dtype, device=planes.device)), dim=1)
    out = F.grid_sample(planes, grid, mode=interpolation, padding_mode="zeros", align_corners=False)
    if fill is not None:
        out, mask = out[:, :-1], out[:, -1:]
        mask = mask.expand_as(out)
        values = torch.tensor(list(fill) if isinstance(fill, (tuple, list)) else [float(fill)], dtype=out.dtype,
                              device=out.device)
        fill_img = values.repeat(out.shape[1] // c) if values.numel() == c else values
        fill_img = fill_img.view(1, -1, 1, 1)
        if interpolation == "nearest":
            out = torch.where(mask < 0.5, fill_img.expand_as(out), out)
        else:  # torchvision's blend: (image - fill) * mask + fill
            out = out.sub_(fill_img).mul_(mask).add_(fill_img)
    if not x.is_floating_point():
        out = out.round_()
    return out.to(x.dtype).reshape(out_shape)


def perspective_grid(coefficients: torch.Tensor, height: int, width: int, dtype: torch.dtype,
                     device: torch.device) -> torch.Tensor:
    """(B, H, W, 2) normalised sampling grids of per-sample ``coefficients`` (B, 8): torchvision's
    ``_perspective_grid`` (Pillow's geometry), one homography per sample."""
    c = coefficients.to(device=device, dtype=dtype).reshape(-1, 8)
    b = c.shape[0]
    theta1 = c[:, :6].reshape(b, 2, 3)
    theta2 = torch.cat((c[:, 6:8], torch.ones(b, 1, dtype=dtype, device=device)), dim=1)[:, None].expand(b, 2, 3)
    base = torch.empty(1, height, width, 3, dtype=dtype, device=device)
    base[..., 0].copy_(torch.linspace(0.5, width - 0.5, steps=width, device=device, dtype=dtype))
    base[..., 1].copy_(torch.linspace(0.5, height - 0.5, steps=height, device=device, dtype=dtype).unsqueeze_(-1))
    base[..., 2].fill_(1)
    rescaled = theta1.transpose(1, 2).div(torch.tensor([0.5 * width, 0.5 * height], dtype=dtype, device=device))
    flat = base.view(1, height * width, 3).expand(b, -1, -1)
    numerators = flat.bmm(rescaled)
    denominators = flat.bmm(theta2.transpose(1, 2))
    return numerators.div_(denominators).sub_(1.0).view(b, height, width, 2)


def inverse_coefficients(coefficients: torch.Tensor) -> torch.Tensor:
    """(M, 8) coefficients of the inverse homographies (input point to output point), float64, as
    torchvision's ``_compute_perspective_thetas`` derives them for boxes and keypoints."""
    c0, c1, c2, c3, c4, c5, c6, c7 = coefficients.to(torch.float64).reshape(-1, 8).unbind(-1)
    denom = c0 * c4 - c1 * c3
    return torch.stack((c4 - c5 * c7, -c1 + c2 * c7, c1 * c5 - c2 * c4, -c3 + c5 * c6, c0 - c2 * c6,
                        -c0 * c5 + c2 * c3, -c4 * c6 + c3 * c7, -c0 * c7 + c1 * c6), dim=-1) / denom[:, None]


def _moved_points(points: torch.Tensor, coefficients: torch.Tensor) -> torch.Tensor:
    """(M, P, 2) points, row r through the inverse of homography ``coefficients[r]`` (M or 1, 8)."""
    inv = inverse_coefficients(coefficients.to(points.device))[:, None, :]
    xy = points.to(torch.float64)
    x, y = xy[..., 0], xy[..., 1]
    denominator = inv[..., 6] * x + inv[..., 7] * y + 1.0
    return torch.stack(((inv[..., 0] * x + inv[..., 1] * y + inv[..., 2]) / denominator,
                        (inv[..., 3] * x + inv[..., 4] * y + inv[..., 5]) / denominator), dim=-1)


# -- kernels by kind --------------------------------------------------------------------------------
@register_kernel(perspective, IMAGE)
def perspective_image(x: torch.Tensor, coefficients: torch.Tensor, interpolation: str = "bilinear",
                      fill: Fill = 0, **_: Any) -> torch.Tensor:
    """Sample i of ``x`` (B, ..., C, H, W) warped by ``coefficients[i]``, the output as large as the input."""
    if interpolation not in WARP_INTERPOLATIONS:
        raise ValueError(f"interpolation={interpolation!r}: expected one of {WARP_INTERPOLATIONS}")
    check_fill(fill, x)
    dtype = grid_dtype(x)
    grid = perspective_grid(coefficients, x.shape[-2], x.shape[-1], dtype, x.device)
    return grid_transform(x, grid, interpolation, fill)


register_kernel(perspective, VIDEO)(perspective_image)


@register_kernel(perspective, MASK)
def perspective_mask(x: torch.Tensor, coefficients: torch.Tensor, **_: Any) -> torch.Tensor:
    """Nearest, fill 0 (background), whatever the op's interpolation and fill for images."""
    x4, squeeze = _with_channel(x, 3)
    xf, dtype = _exact(x4)
    interpolation, _, fill = sampling(MASK, "nearest")
    out = _as_mask(perspective_image(xf, coefficients, interpolation, fill), dtype)
    return out.squeeze(-3) if squeeze else out


@register_kernel(perspective, BOXES)
def perspective_boxes(boxes: torch.Tensor, coefficients: torch.Tensor, *, canvas_size: tuple[int, int],
                      format: str, **_: Any) -> torch.Tensor:
    """Row r's box: the box holding its four corners moved by homography r, clamped to the canvas."""
    if boxes.numel() == 0:
        return boxes

    def warp(xyxy: torch.Tensor) -> torch.Tensor:
        corners = xyxy[:, [[0, 1], [2, 1], [2, 3], [0, 3]]]  # (M, 4, 2)
        lo, hi = _moved_points(corners, coefficients).aminmax(dim=1)
        return torch.cat((lo, hi), dim=1).to(xyxy.dtype)

    return _in_xyxy(boxes, format, warp, canvas_size)


@register_kernel(perspective, KEYPOINTS)
def perspective_keypoints(points: torch.Tensor, coefficients: torch.Tensor, **_: Any) -> torch.Tensor:
    """Row r's keypoints moved by homography r (never clamped: a point may leave the canvas)."""
    if points.numel() == 0:
        return points
    flat = points.reshape(points.shape[0], -1, 2)
    return _moved_points(flat, coefficients).reshape(points.shape).to(points.dtype)
