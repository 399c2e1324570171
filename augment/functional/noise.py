"""Additive Gaussian noise, batched: each sample's own standard-normal draw, torchvision's arithmetic."""

from __future__ import annotations

import torch


def gaussian_noise(x: torch.Tensor, noise: torch.Tensor, mean: float, sigma: float, clip: bool = True
                   ) -> torch.Tensor:
    """``x + mean + noise * sigma`` in [0, 1] units, with ``noise`` (x's shape) standing for
    torchvision's ``torch.randn_like(x)``: float images add ``mean + noise * sigma`` (clamped to
    [0, 1] with ``clip``); uint8 images add ``(mean * 255 + noise * (sigma * 255))`` truncated to
    int16, clamped to [0, 255], as torchvision's ``gaussian_noise`` does. uint8 without ``clip``
    would wrap around past 255 (torchvision's overflow): refused."""
    if noise.shape != x.shape:
        raise ValueError(f"gaussian_noise: noise of shape {tuple(noise.shape)} for images of {tuple(x.shape)}")
    noise = noise.to(x.device)
    if x.is_floating_point():
        out = x + (mean + noise.to(x.dtype) * sigma)
        return out.clamp(0, 1) if clip else out
    if x.dtype != torch.uint8:
        raise ValueError(f"gaussian_noise: images of dtype {x.dtype}; expected uint8 or float")
    if not clip:
        raise ValueError("GaussianNoise(clip=False) on uint8 images would wrap values past 255 around to 0 (as "
                         "torchvision's does): keep clip=True, or convert the images to float first (ToDtype)")
    steps = ((mean * 255) + noise.to(torch.float32) * (sigma * 255)).to(torch.int16)
    return (x + steps).clamp(0, 255).to(torch.uint8)
