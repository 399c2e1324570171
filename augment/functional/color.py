"""Colour and dtype kernels, batched over the leading dimension with per-sample factors."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mediapipe.augment.functional.selected import on_host, take, where_selected
from mediapipe.stages import memory

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
           "uint8": torch.uint8}
DTYPES = tuple(_DTYPES)
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")


def dtype_of(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name not in _DTYPES:
        raise ValueError(f"dtype {name!r}: expected one of {sorted(_DTYPES)}")
    return _DTYPES[name]


def normalize(
    x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, *, dtype: torch.dtype = torch.float32,
    mirror: torch.Tensor | None = None, mirror_dim: int = -1,
) -> torch.Tensor:
    """(x / scale - mean) / std over the channel dim (-3): one cast, then an in-place
    multiply and add on the new tensor (the input is never written).

    uint8 input is read as x / 255; float input as it is. ``mean`` and ``std`` have
    one value per channel. ``x.to(f32).mul_(a).add_(b)`` rather than
    ``torch.addcmul(b, x.to(f32), a)``, whose broadcast of ``b`` to the output is slow.
    ``mirror`` (bool (B,)) flips those samples along ``mirror_dim`` on the way (a fused flip,
    bit-identical to flipping first), sample by sample so each sample's three passes stay in
    cache; the graph fuses a flip so on the CPU only, where it beats a batch flip then a batch
    normalise.
    """
    scale = 255.0 if x.dtype == torch.uint8 else 1.0
    c = x.shape[-3]
    std64 = std.to(torch.float64).reshape(c, 1, 1)
    mul = (1.0 / (scale * std64)).to(x.device, dtype)
    add = (-mean.to(torch.float64).reshape(c, 1, 1) / std64).to(x.device, dtype)
    out = memory.empty(x.shape, dtype, x.device)  # shared memory in a worker: sent without a copy
    if mirror is None or not bool(mirror.any()):
        return out.copy_(x).mul_(mul).add_(add)
    for i, flip in enumerate(mirror.tolist()):
        out[i].copy_(x[i].flip(mirror_dim) if flip else x[i]).mul_(mul).add_(add)
    return out


def to_dtype(x: torch.Tensor, dtype: torch.dtype, scale: bool = True) -> torch.Tensor:
    """Convert dtype; with ``scale`` uint8 [0, 255] maps to float [0, 1] and back, as torchvision's
    ``to_dtype``: float to uint8 truncates ``x * 255.999`` (each level takes an equal share of
    [0, 1], and a uint8 image comes back unchanged); values outside [0, 1] saturate, where
    torchvision's cast would wrap around."""
    if x.dtype == dtype:
        return x
    if not scale:
        return x.to(dtype)
    if x.dtype == torch.uint8 and dtype.is_floating_point:
        return memory.empty(x.shape, dtype, x.device).copy_(x).mul_(1.0 / 255.0)
    if x.dtype.is_floating_point and dtype == torch.uint8:
        return x.mul(255.999).clamp_(0, 255).to(dtype)
    return x.to(dtype)


# -- colour adjustments, torchvision's definitions, one factor per sample ----------------------------
# uint8 follows torchvision bit for bit: each adjustment computes in float32 and converts
# back with ``.to(uint8)`` (truncation after clamping), hue through ``x * 255.999``.


def _per_sample(factor: torch.Tensor | float, x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A (B,) factor as (B, 1, ..., 1) to broadcast against x (B, ...)."""
    f = torch.as_tensor(factor, dtype=dtype, device=x.device)
    return f.reshape(-1, *(1,) * (x.ndim - 1))


def _bound(x: torch.Tensor) -> float:
    return 1.0 if x.is_floating_point() else 255.0


def _float(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_floating_point() else x.to(torch.float32)


def _back(out: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``out`` in the input's dtype (float16 images computed with float32 factors come back float16)."""
    return out if out.dtype == like.dtype else out.to(like.dtype)


def grayscale(x: torch.Tensor, *, floor: bool = False) -> torch.Tensor:
    """Luma (..., 1, H, W) in float: 0.2989 R + 0.587 G + 0.114 B (ITU-R 601-2, as torchvision)."""
    if x.ndim < 3 or x.shape[-3] != 3:
        channels = x.shape[-3] if x.ndim >= 3 else None
        raise ValueError(f"images of {channels} channels (shape {tuple(x.shape)}): the colour ops take 1 (grey) "
                         "or 3 (RGB) channels, as torchvision's do")
    r, g, b = _float(x).unbind(dim=-3)
    gray = r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(-3)
    return gray.floor_() if floor and not x.is_floating_point() else gray


def _blend(x: torch.Tensor, other: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    # x * f + other * (1 - f) rounded as torchvision's ``x.mul(f).add_(other, alpha=1 - f)``
    # (a fused multiply-add): addcmul rounds the same way, bit for bit on uint8
    out = torch.addcmul(_float(x) * f, other, 1.0 - f)
    return _back(out.clamp_(0, _bound(x)), x)


def adjust_brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Multiply sample i by ``factor[i]`` (1 = identity), clamped to the dtype's range."""
    return _back((_float(x) * _per_sample(factor, x)).clamp_(0, _bound(x)), x)


def adjust_contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend sample i with the mean of its grayscale (per image or frame): 1 = identity, 0 = flat grey."""
    if x.shape[-3] == 3:
        gray = grayscale(x, floor=True)
    else:
        gray = _float(x)
    mean = gray.mean(dim=(-3, -2, -1), keepdim=True)
    return _blend(x, mean, _per_sample(factor, x))


def adjust_saturation(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend sample i with its grayscale: 1 = identity, 0 = grey, 2 = doubly saturated."""
    if x.shape[-3] == 1:
        return x
    return _blend(x, grayscale(x, floor=True), _per_sample(factor, x))


def _rgb_to_hsv(image: torch.Tensor) -> torch.Tensor:
    r, g, _ = image.unbind(dim=-3)
    minc, maxc = torch.aminmax(image, dim=-3)
    eqc = maxc == minc
    channels_range = maxc - minc
    ones = torch.ones_like(maxc)
    s = channels_range / torch.where(eqc, ones, maxc)
    divisor = torch.where(eqc, ones, channels_range).unsqueeze_(dim=-3)
    rc, gc, bc = ((maxc.unsqueeze(dim=-3) - image) / divisor).unbind(dim=-3)
    maxc_neq_r = maxc != r
    maxc_eq_g = maxc == g
    hg = rc.add(2.0).sub_(bc).mul_(maxc_eq_g & maxc_neq_r)
    hr = bc.sub_(gc).mul_(~maxc_neq_r)
    hb = gc.add_(4.0).sub_(rc).mul_(maxc_neq_r.logical_and_(maxc_eq_g.logical_not_()))
    h = hr.add_(hg).add_(hb).mul_(1.0 / 6.0).add_(1.0).fmod_(1.0)
    return torch.stack((h, s, maxc), dim=-3)


def _hsv_to_rgb(img: torch.Tensor) -> torch.Tensor:
    h, s, v = img.unbind(dim=-3)
    h6 = h.mul(6)
    i = torch.floor(h6)
    f = h6.sub_(i)
    i = i.to(dtype=torch.int64).remainder_(6)
    sxf = s * f
    one_minus_s = 1.0 - s
    q = (1.0 - sxf).mul_(v).clamp_(0.0, 1.0)
    t = sxf.add_(one_minus_s).mul_(v).clamp_(0.0, 1.0)
    p = one_minus_s.mul_(v).clamp_(0.0, 1.0)
    vpqt = torch.stack((v, p, q, t), dim=-3)
    select = torch.tensor([[0, 2, 1, 1, 3, 0], [3, 0, 0, 2, 1, 1], [1, 1, 3, 0, 0, 2]], device=img.device)
    return vpqt.gather(-3, select[:, i].movedim(0, -3))


def adjust_hue(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Rotate the hue of sample i by ``factor[i]`` turns, in [-0.5, 0.5] (0 = identity), through HSV.

    In float32 whatever the input's dtype, as torchvision's ``adjust_hue`` (uint8 read as x / 255,
    other floats cast), then back to the input's dtype (uint8 through ``x * 255.999``)."""
    if x.shape[-3] == 1 or x.numel() == 0:
        return x
    xf = x.to(torch.float32).mul_(1.0 / 255.0) if not x.is_floating_point() else x.to(torch.float32)
    hsv = _rgb_to_hsv(xf)
    h, s, v = hsv.unbind(dim=-3)
    h = (h + _per_sample(factor, h, h.dtype)).remainder_(1.0)
    rgb = _hsv_to_rgb(torch.stack((h, s, v), dim=-3))
    if x.is_floating_point():
        return rgb.to(x.dtype)
    return rgb.mul_(255.0 + 1.0 - 1e-3).to(x.dtype)  # torchvision's float -> uint8 conversion


def rgb_to_grayscale(x: torch.Tensor) -> torch.Tensor:
    """Grayscale with the channel count kept (3 equal channels), dtype kept (uint8 truncates)."""
    if x.shape[-3] == 1:
        return x
    return _back(grayscale(x), x).expand(x.shape)


def random_grayscale(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Grayscale the samples whose ``mask`` is true; only those samples are computed."""
    if x.device.type == "meta":  # shapes only: nothing to select
        return torch.empty_like(x)
    idx = mask.to(x.device).reshape(-1).nonzero().reshape(-1)
    if idx.numel() == 0 or x.shape[-3] == 1:
        return x
    return x.clone().index_copy_(0, idx, rgb_to_grayscale(x.index_select(0, idx)).contiguous())


JITTER_ORDER = ("brightness", "contrast", "saturation", "hue")
_ADJUST = {"brightness": adjust_brightness, "contrast": adjust_contrast, "saturation": adjust_saturation,
           "hue": adjust_hue}


def color_jitter(
    x: torch.Tensor,
    order: torch.Tensor,
    brightness: torch.Tensor | None = None,
    contrast: torch.Tensor | None = None,
    saturation: torch.Tensor | None = None,
    hue: torch.Tensor | None = None,
) -> torch.Tensor:
    """torchvision's ColorJitter with a per-sample order: ``order[i]`` (B, 4) is a permutation of
    0..3 (indices into `JITTER_ORDER`); a None factor skips that adjustment for every sample.

    Loops over the 4 positions and the 4 adjustments (16 steps, not B): at each step the
    samples whose order names that adjustment there are gathered, adjusted and scattered
    back, so each sample is adjusted once per adjustment. uint8 stays uint8 between steps,
    as in torchvision.
    """
    factors = dict(zip(JITTER_ORDER, (brightness, contrast, saturation, hue)))
    order = order.reshape(x.shape[0], len(JITTER_ORDER))
    if not on_host(x, order):  # on a device: no count read back, each step on the batch, kept where drawn
        return _color_jitter_where(x, order.to(x.device), factors)
    out, owned = x, False  # owned: ``out`` is a tensor of ours, safe to write in place
    for position in range(len(JITTER_ORDER)):
        for op_id, name in enumerate(JITTER_ORDER):
            f = factors[name]
            if f is None:
                continue
            idx = (order[:, position] == op_id).nonzero().reshape(-1)
            if idx.numel() == 0:
                continue
            f = torch.as_tensor(f, device=x.device).reshape(-1)
            if idx.numel() == x.shape[0]:
                new = _ADJUST[name](out, f)  # a new tensor, or ``out`` itself (hue of 1 channel)
                out, owned = new, owned or new is not out
                continue
            if not owned:
                out, owned = out.clone(), True
            out.index_copy_(0, idx, _ADJUST[name](out.index_select(0, idx), f.index_select(0, idx)))
    return out


def _color_jitter_where(x: torch.Tensor, order: torch.Tensor, factors: dict[str, torch.Tensor | None]) -> torch.Tensor:
    """`color_jitter` on a device: each of the 16 steps adjusts the whole batch and `torch.where`
    keeps it for the samples whose order names it there (the same values: every adjustment is per sample)."""
    out = x
    for position in range(len(JITTER_ORDER)):
        for op_id, name in enumerate(JITTER_ORDER):
            f = factors[name]
            if f is None:
                continue
            f = torch.as_tensor(f, device=x.device).reshape(-1)
            out = where_selected(out, order[:, position] == op_id,
                                 lambda s, index, f=f, name=name: _ADJUST[name](s, take(f, index)))
    return out


# -- blur ---------------------------------------------------------------------------------------------
def gaussian_kernel1d(kernel_size: int, sigma: torch.Tensor) -> torch.Tensor:
    """(B, kernel_size) normalised Gaussian weights, torchvision's sampling (softmax over the taps)."""
    lim = (kernel_size - 1) / (2.0 * math.sqrt(2.0))
    sigma = sigma.reshape(-1, 1)
    taps = torch.linspace(-lim, lim, steps=kernel_size, dtype=sigma.dtype, device=sigma.device)
    return torch.softmax((taps / sigma).pow(2).neg(), dim=-1)


def gaussian_blur(x: torch.Tensor, kernel_size: tuple[int, int], sigma: torch.Tensor) -> torch.Tensor:
    """Blur sample i of ``x`` (B, ..., C, H, W) with a Gaussian of std ``sigma[i]`` (B,) or (B, 2)
    for (x, y) in pixels; ``kernel_size`` = (kx, ky), odd. Reflect padding, as torchvision.

    Separable: two grouped convolutions (one group per sample plane) with per-sample kernels.
    uint8 is blurred in float32 and rounded back.
    """
    kx, ky = kernel_size
    b = x.shape[0]
    h, w = x.shape[-2:]
    dtype = x.dtype if x.is_floating_point() else torch.float32
    sigma = torch.as_tensor(sigma, device=x.device, dtype=dtype).reshape(b, -1).expand(b, 2)
    planes = x.reshape(1, -1, h, w).to(dtype)  # every plane of sample i uses kernel i
    per_sample = planes.shape[1] // b
    wx = gaussian_kernel1d(kx, sigma[:, 0]).repeat_interleave(per_sample, dim=0)
    wy = gaussian_kernel1d(ky, sigma[:, 1]).repeat_interleave(per_sample, dim=0)
    planes = F.pad(planes, (kx // 2, kx // 2, ky // 2, ky // 2), mode="reflect")
    groups = planes.shape[1]
    planes = F.conv2d(planes, wx.reshape(groups, 1, 1, kx), groups=groups)
    planes = F.conv2d(planes, wy.reshape(groups, 1, ky, 1), groups=groups)
    out = planes.reshape(x.shape)
    return out if x.is_floating_point() else out.round_().clamp_(0, 255).to(x.dtype)
