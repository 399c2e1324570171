"""The SSD recipe's photometric kernels (torchvision's ``RandomPhotometricDistort``), channel
permutations, and JPEG compression as an augmentation; batched over the leading dimension with
per-sample parameters (JPEG: one image or clip at a time, through Pillow's libjpeg)."""

from __future__ import annotations

import io

import numpy as np
import torch

from mediapipe.augment.functional import color as C
from mediapipe.augment.functional.selected import take, where_selected


def permute_channels(x: torch.Tensor, permutation: torch.Tensor) -> torch.Tensor:
    """Sample i of ``x`` (B, ..., C, H, W) with its channels in the order ``permutation[i]`` (B, C):
    output channel k is input channel ``permutation[i, k]`` (torchvision's ``permute_channels``)."""
    b, c = x.shape[0], x.shape[-3]
    permutation = permutation.to(x.device, torch.int64).reshape(b, -1)
    if permutation.shape[1] != c:
        raise ValueError(f"permute_channels: a permutation of {permutation.shape[1]} channels for images of {c}")
    index = permutation.reshape(b, *(1,) * (x.ndim - 4), c, 1, 1)
    return torch.take_along_dim(x, index, dim=-3)


def _adjusted(name: str, factor: torch.Tensor):
    adjust = getattr(C, f"adjust_{name}")
    return lambda t, index: adjust(t, take(factor, index))


def photometric_distort(
    x: torch.Tensor, *, brightness_on: torch.Tensor, brightness: torch.Tensor, contrast_on: torch.Tensor,
    contrast: torch.Tensor, contrast_before: torch.Tensor, saturation_on: torch.Tensor, saturation: torch.Tensor,
    hue_on: torch.Tensor, hue: torch.Tensor, permute: torch.Tensor, permutation: torch.Tensor,
) -> torch.Tensor:
    """torchvision's ``RandomPhotometricDistort.transform`` with per-sample switches: brightness,
    contrast (here when ``contrast_before``), saturation, hue, contrast (here otherwise), then the
    channel permutation, each on the samples whose switch is on (`where_selected`: six steps for
    the batch, none per sample). uint8 truncates after each step, as torchvision does."""
    before = contrast_before.to(contrast_on.device)
    steps = [
        (brightness_on, _adjusted("brightness", brightness)),
        (contrast_on & before, _adjusted("contrast", contrast)),
        (saturation_on, _adjusted("saturation", saturation)),
        (hue_on, _adjusted("hue", hue)),
        (contrast_on & ~before, _adjusted("contrast", contrast)),
        (permute, lambda t, index: permute_channels(t, take(permutation, index))),
    ]
    out = x
    for flags, step in steps:
        out = where_selected(out, flags, step)
    return out


# -- JPEG as an augmentation --------------------------------------------------------------------
def _jpeg_frame(frame: np.ndarray, quality: int) -> np.ndarray:
    """One (H, W, C) uint8 frame through a JPEG encode at ``quality`` (4:2:0) and its decode."""
    from PIL import Image

    grey = frame.shape[-1] == 1
    buf = io.BytesIO()
    Image.fromarray(frame[..., 0] if grey else frame).save(buf, format="JPEG", quality=int(quality), subsampling=2)
    buf.seek(0)
    with Image.open(buf) as decoded:
        out = np.asarray(decoded)
    return out[..., None] if grey else out


def jpeg(x: torch.Tensor, quality: int) -> torch.Tensor:
    """``x`` (..., C, H, W) uint8, C 1 or 3, each image or frame encoded as JPEG at ``quality``
    (1 to 100; libjpeg's tables, 4:2:0 chroma) and decoded back: torchvision's ``jpeg``, whose
    libjpeg encode and decode Pillow's give bit for bit. A tensor on a device makes the trip
    through the host."""
    if x.dtype != torch.uint8:
        raise ValueError(f"JPEG: images of dtype {x.dtype}; JPEG compresses uint8 images (convert with "
                         "ToDtype('uint8') first)")
    if x.ndim < 3 or x.shape[-3] not in (1, 3):
        raise ValueError(f"JPEG: images of shape {tuple(x.shape)}; expected (..., 1 or 3, H, W)")
    if x.numel() == 0:
        return x.clone()
    frames = x.reshape(-1, *x.shape[-3:]).permute(0, 2, 3, 1).cpu().numpy()
    out = np.stack([_jpeg_frame(np.ascontiguousarray(f), quality) for f in frames])
    return torch.from_numpy(out).permute(0, 3, 1, 2).reshape(x.shape).to(x.device)
