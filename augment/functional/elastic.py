"""Elastic warps, batched: each sample's displacement field (torchvision's ``ElasticTransform``)
made from its uniform draw, and the images, masks, boxes and keypoints it moves.

A sample draws two planes of uniform noise in [0, 1) (``noise``, (2, H, W)); `displacement` turns
them into torchvision's field exactly as its ``make_params`` does: ``u * 2 - 1``, blurred by a
Gaussian of ``int(8 sigma + 1)`` taps (odd; torchvision's 2-D kernel and reflected borders,
one convolution for the whole batch), times ``alpha / width`` (x) and ``alpha / height`` (y).
The field, (B, H, W, 2) in normalised units, is added to the identity grid and the images are
resampled through `grid_transform` (masks with nearest and fill 0). Boxes and keypoints move by
torchvision's approximation: the point minus the displacement at its pixel (boxes: their
corners rounded up, clamped to the canvas).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from mediapipe.augment.functional.color import gaussian_kernel1d
from mediapipe.augment.functional.dispatch import Functional, register_kernel
from mediapipe.augment.functional.objects import _in_xyxy
from mediapipe.augment.functional.perspective import WARP_INTERPOLATIONS, Fill, grid_dtype, grid_transform
from mediapipe.augment.functional.spatial import _as_mask, _exact, _with_channel, check_fill, sampling
from mediapipe.fields import BOXES, IMAGE, KEYPOINTS, MASK, VIDEO

elastic = Functional("elastic")


def blur_taps(sigma: float) -> int:
    """torchvision's kernel size for a displacement blur of ``sigma`` pixels: int(8 sigma + 1), made odd."""
    taps = int(8 * sigma + 1)
    return taps + 1 if taps % 2 == 0 else taps


def _blur(planes: torch.Tensor, taps: int, sigma: tuple[float, float]) -> torch.Tensor:
    """(N, 1, H, W) planes blurred as torchvision's ``gaussian_blur(planes, [taps, taps], sigma)``:
    its 2-D kernel (the outer product of the y and x kernels) over reflected borders."""
    dtype, device = planes.dtype, planes.device
    kx = gaussian_kernel1d(taps, torch.tensor([sigma[0]], dtype=dtype, device=device))[0]
    ky = gaussian_kernel1d(taps, torch.tensor([sigma[1]], dtype=dtype, device=device))[0]
    kernel = (ky.unsqueeze(-1) * kx)[None, None]
    pad = taps // 2
    return F.conv2d(F.pad(planes, [pad, pad, pad, pad], mode="reflect"), kernel)


def displacement(noise: torch.Tensor, alpha: tuple[float, float], sigma: tuple[float, float]) -> torch.Tensor:
    """(B, H, W, 2) displacement fields (normalised units, x then y) from uniform ``noise`` (B, 2, H, W)."""
    noise = noise.to(torch.float32)
    b, _, height, width = noise.shape
    planes = noise.mul(2).sub(1)
    dx, dy = planes[:, :1], planes[:, 1:]
    if sigma[0] > 0 and sigma[1] > 0 and blur_taps(sigma[0]) == blur_taps(sigma[1]):  # one kernel for both
        dx, dy = _blur(torch.cat((dx, dy)), blur_taps(sigma[0]), sigma).split(b)
    else:
        dx = _blur(dx, blur_taps(sigma[0]), sigma) if sigma[0] > 0 else dx
        dy = _blur(dy, blur_taps(sigma[1]), sigma) if sigma[1] > 0 else dy
    dx = dx * alpha[0] / width
    dy = dy * alpha[1] / height
    return torch.cat((dx, dy), 1).permute(0, 2, 3, 1)


def identity_grid(height: int, width: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(1, H, W, 2) normalised pixel centres, torchvision's ``_create_identity_grid``."""
    grid = torch.empty(1, height, width, 2, dtype=dtype, device=device)
    grid[..., 0].copy_(torch.linspace((-width + 1) / width, (width - 1) / width, width, device=device, dtype=dtype))
    grid[..., 1].copy_(torch.linspace((-height + 1) / height, (height - 1) / height, height, device=device,
                                      dtype=dtype).unsqueeze_(-1))
    return grid


def _check_field(x: torch.Tensor, field: torch.Tensor) -> None:
    if tuple(field.shape[1:3]) != tuple(x.shape[-2:]):
        raise ValueError(f"elastic: a displacement field of {tuple(field.shape[1:3])} for images of "
                         f"{tuple(x.shape[-2:])}: the field is drawn on the image the op sees")


# -- kernels by kind --------------------------------------------------------------------------------
@register_kernel(elastic, IMAGE)
def elastic_image(x: torch.Tensor, field: torch.Tensor, interpolation: str = "bilinear", fill: Fill = 0,
                  **_: Any) -> torch.Tensor:
    """Sample i of ``x`` (B, ..., C, H, W) read at the identity grid plus ``field[i]`` (B, H, W, 2)."""
    if interpolation not in WARP_INTERPOLATIONS:
        raise ValueError(f"interpolation={interpolation!r}: expected one of {WARP_INTERPOLATIONS}")
    _check_field(x, field)
    check_fill(fill, x)
    dtype = grid_dtype(x)
    grid = identity_grid(x.shape[-2], x.shape[-1], dtype, x.device) + field.to(x.device, dtype)
    return grid_transform(x, grid, interpolation, fill)


register_kernel(elastic, VIDEO)(elastic_image)


@register_kernel(elastic, MASK)
def elastic_mask(x: torch.Tensor, field: torch.Tensor, **_: Any) -> torch.Tensor:
    """Nearest, fill 0 (background), whatever the op's interpolation and fill for images."""
    x4, squeeze = _with_channel(x, 3)
    xf, dtype = _exact(x4)
    interpolation, _, fill = sampling(MASK, "nearest")
    out = _as_mask(elastic_image(xf, field, interpolation, fill), dtype)
    return out.squeeze(-3) if squeeze else out


def _moved(points: torch.Tensor, field: torch.Tensor, sample: torch.Tensor, canvas_size: tuple[int, int]
           ) -> torch.Tensor:
    """(N, 2) integer pixel positions (x, y) of the samples ``sample`` (N,) moved by minus their
    sample's displacement there, in pixels: torchvision's inverse-grid approximation."""
    height, width = canvas_size
    field = field.to(points.device, torch.float32)
    x = points[:, 0].to(torch.long).clamp_(0, width - 1)
    y = points[:, 1].to(torch.long).clamp_(0, height - 1)
    identity = identity_grid(height, width, torch.float32, points.device)[0]
    inverse = identity[y, x] - field[sample.to(points.device), y, x]
    size = torch.tensor((width, height), dtype=torch.float32, device=points.device)
    return inverse.add_(1).mul_(0.5 * size).sub_(0.5)


@register_kernel(elastic, BOXES)
def elastic_boxes(boxes: torch.Tensor, field: torch.Tensor, sample: torch.Tensor, *, canvas_size: tuple[int, int],
                  format: str, **_: Any) -> torch.Tensor:
    """Row r's box (of sample ``sample[r]``): the box holding its four corners, each rounded up to a
    pixel and moved back by the displacement there, clamped to the canvas (torchvision's)."""
    if boxes.numel() == 0:
        return boxes

    def warp(xyxy: torch.Tensor) -> torch.Tensor:
        corners = xyxy[:, [[0, 1], [2, 1], [2, 3], [0, 3]]].reshape(-1, 2).ceil()
        moved = _moved(corners, field, sample.reshape(-1).repeat_interleave(4), canvas_size).reshape(-1, 4, 2)
        lo, hi = moved.aminmax(dim=1)
        return torch.cat((lo, hi), dim=1).to(xyxy.dtype)

    return _in_xyxy(boxes, format, warp, canvas_size)


@register_kernel(elastic, KEYPOINTS)
def elastic_keypoints(points: torch.Tensor, field: torch.Tensor, sample: torch.Tensor, *,
                      canvas_size: tuple[int, int], **_: Any) -> torch.Tensor:
    """Row r's keypoints (of sample ``sample[r]``), each truncated to its pixel and moved back by the
    displacement there (torchvision's; never clamped)."""
    if points.numel() == 0:
        return points
    per_row = points[0].numel() // 2
    flat = points.reshape(-1, 2)
    moved = _moved(flat, field, sample.reshape(-1).repeat_interleave(per_row), canvas_size)
    return moved.to(points.dtype).reshape(points.shape)
