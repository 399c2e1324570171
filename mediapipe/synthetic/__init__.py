"""Photographic-looking synthetic media for tests and the built-in benchmark dataset.

Images mix smooth gradients, soft blobs, hard-edged shapes and textures at several
scales (value noise over octaves), so JPEG sizes and decode costs resemble photos,
not uniform noise (the worst case for JPEG). Everything is a pure function of a seed.
"""

from __future__ import annotations

import io

import numpy as np


def _value_noise(rng: np.random.Generator, height: int, width: int, cells: int) -> np.ndarray:
    """Smooth noise: a coarse random grid, bilinearly upsampled to (height, width)."""
    gh, gw = max(2, cells), max(2, int(cells * width / height))
    grid = rng.random((gh + 1, gw + 1), dtype=np.float32)
    ys = np.linspace(0, gh, height, dtype=np.float32)
    xs = np.linspace(0, gw, width, dtype=np.float32)
    y0, x0 = np.minimum(ys.astype(int), gh - 1), np.minimum(xs.astype(int), gw - 1)
    fy, fx = (ys - y0)[:, None], (xs - x0)[None, :]
    fy, fx = fy * fy * (3 - 2 * fy), fx * fx * (3 - 2 * fx)  # smoothstep
    a, b = grid[y0][:, x0], grid[y0][:, x0 + 1]
    c, d = grid[y0 + 1][:, x0], grid[y0 + 1][:, x0 + 1]
    return (a * (1 - fx) + b * fx) * (1 - fy) + (c * (1 - fx) + d * fx) * fy


def photo_like(height: int, width: int, seed: int, detail: float = 1.0) -> np.ndarray:
    """A uint8 (height, width, 3) image that compresses like a photograph. ``detail`` scales the
    fine texture and the grain: below 1 a smoother picture (fewer JPEG bytes per pixel), above 1
    a busier one."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    yy /= height
    xx /= width
    base = rng.random(3, dtype=np.float32)[:, None, None] * 0.6 + 0.2
    angle = rng.uniform(0, 2 * np.pi)
    gradient = np.cos(angle) * xx + np.sin(angle) * yy
    img = base + 0.35 * (gradient - 0.5)[None] * rng.uniform(0.5, 1.0, (3, 1, 1)).astype(np.float32)
    for cells, amp in ((3, 0.25), (12, 0.14)):  # coarse structure, relative to the frame
        noise = _value_noise(rng, height, width, cells) - 0.5
        img = img + amp * noise[None] * rng.uniform(0.6, 1.0, (3, 1, 1)).astype(np.float32)
    for _ in range(int(rng.integers(6, 16))):  # hard-edged objects: discs and boxes with their own shade
        colour = rng.random(3, dtype=np.float32)[:, None, None]
        cy, cx = rng.random(2)
        r = rng.uniform(0.03, 0.2)
        if rng.random() < 0.5:
            mask = ((yy - cy) ** 2 + ((xx - cx) * width / height) ** 2) < r * r
        else:
            mask = (np.abs(yy - cy) < r) & (np.abs(xx - cx) < r * rng.uniform(0.3, 1.5))
        shade = 0.8 + 0.4 * (_value_noise(rng, height, width, int(rng.integers(4, 40))) - 0.5)
        img = np.where(mask[None], colour * shade[None], img)
    # fine texture over everything, at fixed periods in pixels, so a small image is as detailed
    # per pixel as a large one (about 0.4 JPEG bytes per pixel at quality 90; ImageNet: ~0.5)
    for period, amp in ((24, 0.12), (8, 0.18), (3, 0.22), (1.5, 0.16)):
        noise = _value_noise(rng, height, width, max(2, round(height / period))) - 0.5
        img = img + (amp * detail) * noise[None] * rng.uniform(0.6, 1.0, (3, 1, 1)).astype(np.float32)
    stripes = 0.04 * np.sin(2 * np.pi * (xx * rng.uniform(20, 80) + yy * rng.uniform(5, 40)))
    img = img + stripes[None] * (rng.random() < 0.5)
    img = img + rng.normal(0, 0.035 * detail, img.shape).astype(np.float32)  # sensor grain
    return (np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8).transpose(1, 2, 0).copy()


def jpeg_bytes(array: np.ndarray, quality: int = 90, subsampling: int = 2, **save_kwargs) -> bytes:
    """Encode an (H, W, 3) or (H, W) uint8 array as JPEG with Pillow (4:2:0 by default)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", quality=quality, subsampling=subsampling, **save_kwargs)
    return buf.getvalue()


def imagenet_like_sizes(rng: np.random.Generator, count: int) -> list[tuple[int, int]]:
    """(height, width) pairs with the shorter side in [300, 500] and ImageNet-like aspect ratios."""
    sizes = []
    for _ in range(count):
        short = int(rng.integers(300, 501))
        aspect = float(rng.choice([1.0, 4 / 3, 3 / 2, 16 / 9, 3 / 4, 2 / 3]))
        long = int(short * max(aspect, 1 / aspect))
        sizes.append((short, long) if aspect >= 1 else (long, short))
    return sizes
