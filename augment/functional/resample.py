"""Regions of different sizes resized to one size as a batch: per-sample filter weights as
matrices and one batched matrix product per axis, on any device.

Each output pixel gets the weights torch's antialiased kernels (Pillow's filters) give it, so
a sample equals `resize_image` of its region up to float rounding. This is how a GPU finishes
a batch of crops decoded at their own sizes (nvJPEG's region decode) in a few batched calls
instead of one resize kernel per sample.
"""

from __future__ import annotations

import torch

BATCHED = ("bilinear", "bicubic")  # what `resize_regions` computes; nearest goes sample by sample
CHUNK_BYTES = 1 << 28  # the padded float32 regions of one chunk of the batch stay under this


def _triangle(t: torch.Tensor) -> torch.Tensor:
    return (1.0 - t.abs()).clamp_(min=0.0)


def _cubic(t: torch.Tensor, a: float = -0.5) -> torch.Tensor:
    """Keys' cubic with a = -0.5, the filter of torch's (and Pillow's) antialiased bicubic."""
    t = t.abs()
    near = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
    far = (((t - 5.0) * t + 8.0) * t - 4.0) * a
    return torch.where(t < 1.0, near, torch.where(t < 2.0, far, torch.zeros_like(t)))


def axis_weights(lengths: torch.Tensor, size: int, extent: int, interpolation: str = "bilinear") -> torch.Tensor:
    """(B, size, extent) weights that resample the first ``lengths[b]`` pixels of an axis to
    ``size`` samples, as torch's antialiased upsample kernels place and normalise them (support
    widened by the scale when shrinking, clipped at the region's edge)."""
    half = {"bilinear": 1.0, "bicubic": 2.0}[interpolation]
    kernel = _triangle if interpolation == "bilinear" else _cubic
    f64 = dict(dtype=torch.float64, device=lengths.device)
    scale = (lengths.to(**f64) / size)[:, None, None]  # (B, 1, 1): input pixels per output pixel
    shrinking = scale >= 1.0
    support = torch.where(shrinking, half * scale, torch.full_like(scale, half))
    invscale = torch.where(shrinking, 1.0 / scale, torch.ones_like(scale))
    center = scale * (torch.arange(size, **f64)[None, :, None] + 0.5)
    first = (center - support + 0.5).trunc().clamp(min=0.0)
    stop = torch.minimum((center + support + 0.5).trunc(), lengths.to(**f64)[:, None, None])
    j = torch.arange(extent, **f64)[None, None, :]
    weights = kernel((j - center + 0.5) * invscale) * ((j >= first) & (j < stop))
    total = weights.sum(-1, keepdim=True)
    return (weights / torch.where(total == 0, torch.ones_like(total), total)).to(torch.float32)


def _padded(images: list[torch.Tensor], height: int, width: int) -> torch.Tensor:
    """(B, C, height, width) float32 holding each image at the top left, zeros elsewhere (the
    weights never reach them). The decoders hand over separate buffers: one copy each."""
    first = images[0]
    out = torch.zeros((len(images), first.shape[-3], height, width), dtype=torch.float32, device=first.device)
    for row, x in zip(out, images):
        row[:, : x.shape[-2], : x.shape[-1]].copy_(x)
    return out


def resize_regions(images: list[torch.Tensor], size: tuple[int, int], interpolation: str = "bilinear") -> torch.Tensor:
    """Images (C, H_i, W_i) of any sizes, on one device, to (B, C, *size) with antialiasing
    (torchvision's ``resize(..., antialias=True)`` of each); uint8 is rounded and saturated back."""
    if interpolation not in BATCHED:
        raise ValueError(f"interpolation={interpolation!r}: batched resizing takes {BATCHED}")
    if not images:
        raise ValueError("resize_regions: no images")
    dtype, device = images[0].dtype, images[0].device
    heights = torch.tensor([x.shape[-2] for x in images])
    widths = torch.tensor([x.shape[-1] for x in images])
    out_h, out_w = size
    per_sample = 4 * images[0].shape[-3] * int(heights.max()) * int(widths.max())
    step = max(1, CHUNK_BYTES // max(per_sample, 1))
    parts = []
    for start in range(0, len(images), step):
        chunk = images[start : start + step]
        h, w = heights[start : start + step], widths[start : start + step]
        height, width = int(h.max()), int(w.max())
        rows = axis_weights(h.to(device), out_h, height, interpolation)[:, None]  # (b, 1, out_h, height)
        cols = axis_weights(w.to(device), out_w, width, interpolation)[:, None].transpose(-1, -2)  # (b, 1, width, out_w)
        x = _padded(chunk, height, width)
        # the axis that shrinks most goes first: the second product then works on less
        if out_h * width * (height + out_w) <= out_w * height * (width + out_h):
            parts.append(rows @ x @ cols)
        else:
            parts.append(rows @ (x @ cols))
    out = parts[0] if len(parts) == 1 else torch.cat(parts)
    if dtype.is_floating_point:
        return out.to(dtype)
    return out.clamp_(0, 255).round_().to(dtype)
