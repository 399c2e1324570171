"""Colour and dtype kernels, batched over the leading dimension with per-sample factors."""

from __future__ import annotations

import torch

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
           "uint8": torch.uint8}


def dtype_of(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name not in _DTYPES:
        raise ValueError(f"dtype {name!r}: expected one of {sorted(_DTYPES)}")
    return _DTYPES[name]


def normalize(
    x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, *, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """(x / scale - mean) / std over the channel dim (-3) in one multiply-add pass.

    uint8 input is read as x / 255; float input as it is. ``mean`` and ``std`` have
    one value per channel.
    """
    scale = 255.0 if x.dtype == torch.uint8 else 1.0
    c = x.shape[-3]
    std64 = std.to(torch.float64).reshape(c, 1, 1)
    mul = (1.0 / (scale * std64)).to(x.device, dtype)
    add = (-mean.to(torch.float64).reshape(c, 1, 1) / std64).to(x.device, dtype)
    return torch.addcmul(add, x.to(dtype), mul)


def to_dtype(x: torch.Tensor, dtype: torch.dtype, scale: bool = True) -> torch.Tensor:
    """Convert dtype; with ``scale`` uint8 [0, 255] maps to float [0, 1] and back (as torchvision)."""
    if x.dtype == dtype:
        return x
    if not scale:
        return x.to(dtype)
    if x.dtype == torch.uint8 and dtype.is_floating_point:
        return x.to(dtype).mul_(1.0 / 255.0)
    if x.dtype.is_floating_point and dtype == torch.uint8:
        return x.mul(255.0).round_().clamp_(0, 255).to(dtype)
    return x.to(dtype)
