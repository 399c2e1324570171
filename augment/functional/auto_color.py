"""Batched kernels of the pixel-value ops the auto-augment policies use: torchvision v2's posterize,
solarize, autocontrast, equalize, adjust_sharpness and invert, on (B, ..., C, H, W) uint8 or float
images with one value per sample where the op takes one.

uint8 follows torchvision bit for bit: the same float32 arithmetic, the same roundings and
truncations. `apply_where` runs a kernel on the samples a per-sample flag selects: on the CPU only
those are computed (their indices are known on the host); on a device one ``torch.where`` over the
batch, which needs no count of the selected samples (reading one would make the host wait).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from mediapipe.augment.functional.color import to_dtype


def max_value(x: torch.Tensor) -> float:
    """The largest value of the images' range: 255 for uint8, 1 for float."""
    if x.is_floating_point():
        return 1.0
    if x.dtype != torch.uint8:
        raise TypeError(f"images of dtype {x.dtype}: the auto-augment ops take uint8 or float images")
    return 255.0


def per_sample(values: torch.Tensor, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """(B,) values as (B, 1, ..., 1) on ``x``'s device, to broadcast against x (B, ...)."""
    v = torch.as_tensor(values).to(x.device, dtype or torch.float32)
    return v.reshape(-1, *(1,) * (x.ndim - 1))


def apply_where(x: torch.Tensor, selected: torch.Tensor, kernel: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
                ) -> torch.Tensor:
    """``kernel(rows, sub)`` on the samples whose flag in ``selected`` (B,) is true, the others
    unchanged; ``rows`` are the selected samples' positions (to pick their per-sample values)."""
    selected = selected.reshape(-1)
    if x.device.type != "cpu" or selected.device.type != "cpu":
        everything = torch.arange(x.shape[0], device=x.device)
        flags = selected.to(x.device).bool().reshape(-1, *(1,) * (x.ndim - 1))
        return torch.where(flags, kernel(everything, x), x)
    rows = selected.bool().nonzero().reshape(-1)
    if rows.numel() == 0:
        return x
    if rows.numel() == x.shape[0]:
        return kernel(rows, x)
    return x.clone().index_copy_(0, rows, kernel(rows, x.index_select(0, rows)).contiguous())


# -- pixel-value maps --------------------------------------------------------------------------------
def invert(x: torch.Tensor) -> torch.Tensor:
    """255 - x (uint8), 1 - x (float)."""
    max_value(x)
    return 1.0 - x if x.is_floating_point() else x.bitwise_not()


def posterize(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Keep the ``bits[i]`` (0 to 8) high bits of each channel of sample i; float images are cut into
    2 ** bits levels (torchvision's ``posterize``)."""
    bits = torch.as_tensor(bits).reshape(-1).to(torch.int64)
    if x.is_floating_point():
        levels = per_sample(torch.pow(2.0, bits.to(torch.float64)), x, x.dtype)
        return x.mul(levels).floor_().clamp_(torch.zeros_like(levels), levels - 1).mul_(1.0 / levels)
    max_value(x)
    masks = ((1 << bits.clamp(0, 8)) - 1) << (8 - bits.clamp(0, 8))  # 8 bits: 255, the identity
    return x & per_sample(masks, x, torch.uint8)


def solarize(x: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Invert the pixels of sample i at or above ``threshold[i]`` (in the images' units). The
    threshold is compared in float32, as torch compares a uint8 image with a Python number."""
    t = per_sample(torch.as_tensor(threshold, dtype=torch.float64).to(torch.float32), x)
    return torch.where(x >= t, invert(x), x)


def autocontrast(x: torch.Tensor) -> torch.Tensor:
    """Stretch each channel of each image (frame) to the full range: its minimum to 0, its maximum
    to the top (a flat channel is left as it is), as torchvision's ``autocontrast``."""
    if x.numel() == 0:
        return x
    bound = max_value(x)
    fp = x.is_floating_point()
    xf = x if fp else x.to(torch.float32)
    minimum = xf.amin(dim=(-2, -1), keepdim=True)
    maximum = xf.amax(dim=(-2, -1), keepdim=True)
    flat = maximum == minimum
    inv_scale = maximum.sub_(minimum).mul_(1.0 / bound)
    minimum[flat] = 0.0
    inv_scale[flat] = 1.0
    diff = xf.sub(minimum) if fp else xf.sub_(minimum)
    return diff.div_(inv_scale).clamp_(0, bound).to(x.dtype)


def equalize(x: torch.Tensor) -> torch.Tensor:
    """Histogram equalisation of each channel of each image (frame), Pillow's lookup table as
    torchvision's ``equalize`` computes it; float images are equalised as uint8 and scaled back."""
    if x.numel() == 0:
        return x
    max_value(x)
    out_dtype = x.dtype
    image = to_dtype(x, torch.uint8)
    batch_shape = image.shape[:-2]
    flat = image.flatten(start_dim=-2).to(torch.long)
    hist = flat.new_zeros(batch_shape + (256,), dtype=torch.int32)
    hist.scatter_add_(dim=-1, index=flat, src=hist.new_ones(1).expand_as(flat))
    cum_hist = hist.cumsum(dim=-1)
    index = cum_hist.argmax(dim=-1)
    num_non_max = flat.shape[-1] - hist.gather(dim=-1, index=index.unsqueeze_(-1))
    step = num_non_max.div_(255, rounding_mode="floor")
    valid = step.ne(0).unsqueeze_(-1)
    cum_hist = cum_hist[..., :-1]
    cum_hist.add_(step // 2).div_(step.clamp_(min=1), rounding_mode="floor").clamp_(0, 255)
    lut = torch.cat([cum_hist.new_zeros(batch_shape + (1,)), cum_hist], dim=-1).to(torch.uint8)
    equalized = lut.gather(dim=-1, index=flat).view_as(image)
    out = torch.where(valid, equalized, image)
    return out if out_dtype == torch.uint8 else to_dtype(out, out_dtype)


_SHARPEN = (1.0 / 13.0, 5.0 / 13.0)  # torchvision's smoothing kernel: 1 around a 5, normalised


def adjust_sharpness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend sample i with its smoothed self by ``factor[i]`` (0 smooth, 1 the identity, 2 twice as
    sharp), the one-pixel border kept, as torchvision's ``adjust_sharpness``: a 3x3 kernel of ones
    around a 5, rounded for uint8, then ``x + (1 - factor) * (smooth - x)`` with the weight computed
    in float64 and used in the images' float dtype."""
    channels, height, width = x.shape[-3:]
    if x.numel() == 0 or height <= 2 or width <= 2:
        return x
    bound = max_value(x)
    fp = x.is_floating_point()
    dtype = x.dtype if fp else torch.float32
    per_image = x[0].numel() // (channels * height * width)  # frames of a clip share their sample's factor
    alpha = (1.0 - torch.as_tensor(factor, dtype=torch.float64).reshape(-1)).repeat_interleave(per_image)
    a, b = _SHARPEN
    kernel = torch.tensor([[a, a, a], [a, b, a], [a, a, a]], dtype=dtype, device=x.device).expand(channels, 1, 3, 3)
    out = x.reshape(-1, channels, height, width).to(dtype=dtype, copy=True)
    smooth = F.conv2d(out, kernel, groups=channels)
    if not fp:
        smooth = smooth.round_()
    view = out[..., 1:-1, 1:-1]
    view.addcmul_(smooth.sub_(view), alpha.to(x.device, dtype).reshape(-1, 1, 1, 1))
    out = out.clamp_(0, bound).reshape(x.shape)
    return out if fp else out.to(x.dtype)
