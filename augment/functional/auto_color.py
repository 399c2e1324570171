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
from mediapipe.augment.functional.selected import on_host, where_selected
from mediapipe.stages import memory, scratch


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


CHUNK_ELEMENTS = 1 << 19  # values per piece of a group on the CPU: its passes stay in the cache


def rows_per_chunk(x: torch.Tensor) -> int:
    """Samples per piece of a group on the CPU (a few large images, many small ones); a device takes
    a group in one call."""
    if x.device.type != "cpu" or x.shape[0] == 0:
        return max(1, x.shape[0])
    return max(1, CHUNK_ELEMENTS // max(1, x[0].numel()))


def apply_rows(x: torch.Tensor, rows: torch.Tensor, kernel: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               owned: bool = False) -> tuple[torch.Tensor, bool]:
    """x with the samples at ``rows`` (host indices, int64) replaced by ``kernel(picks, group)``, where
    ``group`` is those samples (or a piece of them) and ``picks`` their positions in ``rows`` (to pick
    their per-sample values). Returns (the result, whether it is a tensor of ours to write in place:
    ``owned`` says whether x already is; so is a batch the batch stage owns, `scratch`). On the CPU a large group runs in pieces that stay in cache."""
    n = rows.numel()
    if n == 0:
        return x, owned
    step = rows_per_chunk(x)
    if n == x.shape[0] and step >= n:
        done = kernel(torch.arange(n), x)
        return done, owned or done is not x
    owned = owned or scratch.writable(x)
    out = x if owned else memory.empty(x.shape, x.dtype, x.device).copy_(x)  # shared memory in a worker
    if x.device.type != "cpu":
        index = rows.to(x.device)
        return out.index_copy_(0, index, kernel(torch.arange(n), out.index_select(0, index)).to(out.dtype)), True
    for start in range(0, n, step):
        picks = torch.arange(start, min(n, start + step))
        done = kernel(picks, out.index_select(0, rows[start : start + step]))
        for k, row in enumerate(rows[start : start + step].tolist()):  # a sample's copy is one memcpy on the CPU
            out[row].copy_(done[k])
    return out, True


def apply_where(x: torch.Tensor, selected: torch.Tensor, kernel: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
                ) -> torch.Tensor:
    """``kernel(picks, group)`` on the samples whose flag in ``selected`` (B,) is true, the others
    unchanged: on the CPU only those are computed (`apply_rows`, in cache-sized pieces); on a
    device the whole batch and one ``torch.where`` (`where_selected`)."""
    selected = selected.reshape(-1).bool()
    if not on_host(x, selected):
        return where_selected(x, selected, lambda group, index: kernel(torch.arange(group.shape[0], device=x.device),
                                                                       group))
    return apply_rows(x, selected.nonzero().reshape(-1), kernel)[0]


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
    threshold is compared in float32, as torch compares a uint8 image with a Python number; for
    uint8 as the integer compare it equals (a pixel is at or above t exactly when it is at or above
    ceil(t)), which needs no float copy of the image."""
    t = torch.as_tensor(threshold, dtype=torch.float64).reshape(-1).to(torch.float32)
    if x.is_floating_point():
        return torch.where(x >= per_sample(t, x, x.dtype if x.dtype != torch.float16 else torch.float32), invert(x), x)
    max_value(x)
    levels = t.double().ceil().clamp_(0, 256).to(torch.int16)  # 256: no pixel is inverted
    return torch.where(x >= per_sample(levels, x, torch.int16), invert(x), x)


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


def _smooth(x: torch.Tensor, channels: int) -> torch.Tensor:
    """torchvision's 3x3 smoothing of float (N, C, H, W): the valid (H - 2, W - 2) part."""
    a, b = _SHARPEN
    kernel = torch.tensor([[a, a, a], [a, b, a], [a, a, a]], dtype=x.dtype, device=x.device)
    return F.conv2d(x, kernel.expand(channels, 1, 3, 3), groups=channels)


def _smooth_uint8(x: torch.Tensor) -> torch.Tensor:
    """The smoothing of uint8 (N, C, H, W), rounded, as float32: round((box 3x3 + 4 centre) / 13) in
    integers. torchvision convolves in float32 and rounds; the exact value k / 13 is never a tie
    (2k = 13 (2n + 1) has no integer solution) and float32's error is far below 1/26, so both round
    to the same integer."""
    v = x.to(torch.int16)
    rows = v[..., :-2, :] + v[..., 1:-1, :] + v[..., 2:, :]
    k = rows[..., :-2] + rows[..., 1:-1] + rows[..., 2:] + 4 * v[..., 1:-1, 1:-1]
    return k.mul_(2).add_(13).div_(26, rounding_mode="floor").to(torch.float32)


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
    out = x.reshape(-1, channels, height, width).to(dtype=dtype, copy=True)
    smooth = _smooth(out, channels) if fp else _smooth_uint8(x.reshape(out.shape))
    view = out[..., 1:-1, 1:-1]
    view.addcmul_(smooth.sub_(view), alpha.to(x.device, dtype).reshape(-1, 1, 1, 1))
    out = out.clamp_(0, bound).reshape(x.shape)
    return out if fp else out.to(x.dtype)
