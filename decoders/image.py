"""The image decoder spec and what every image backend shares: limits, modes, hints."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch

from mediapipe.decoders.base import DecodeHint, Decoder, DecoderSpec, Limits
from mediapipe.errors import LimitError

MODES = ("RGB", "L")  # 3-channel colour (default) or 1-channel grayscale


def image(
    backend: str = "auto", *, mode: str = "RGB", exif_transpose: bool = False, device_decode: bool | None = None
) -> DecoderSpec:
    """An image decoder: JPEG fast path, and PNG, WebP, BMP, GIF, TIFF through Pillow.

    Output: uint8 (C, H, W) with C = 3 for ``mode="RGB"`` (grayscale, CMYK and palette
    images are converted) or 1 for ``mode="L"``. 16-bit PNG and TIFF (Pillow modes
    ``I;16``, ``I;16B``, ``I``) keep each value's high byte (v >> 8, as torchvision's
    ``to_dtype(..., scale=True)``), so a 0-65535 ramp spans 0-255. ``exif_transpose=True`` applies the
    EXIF orientation. ``backend``: "auto" (the fastest installed for the device),
    "turbo" (libjpeg-turbo through simplejpeg), "pillow", or "nvimgcodec" (nvJPEG on an
    NVIDIA GPU; libjpeg-turbo with region-of-interest decoding on the CPU).
    ``device_decode``: for backends that can decode a whole batch on the pipeline's device
    (nvimgcodec): None decodes there when the device is CUDA, True always (on the CPU too,
    in the training process), False never (per sample in the workers).
    """
    if mode not in MODES:
        raise ValueError(f"image(mode={mode!r}): expected one of {MODES}")
    options = {"mode": mode, "exif_transpose": exif_transpose}
    if device_decode is not None:
        options["device_decode"] = device_decode
    return DecoderSpec("image", backend, options)


class ImageDecoder(Decoder):
    """Base of the image backends: options, the pixel limit, and hint arithmetic."""

    kind: ClassVar[str] = "image"

    def __init__(
        self,
        *,
        device: torch.device | None = None,
        limits: Limits = Limits(),
        mode: str = "RGB",
        exif_transpose: bool = False,
        device_decode: bool | None = None,
    ) -> None:
        super().__init__(device=device, limits=limits)
        self.mode, self.exif_transpose, self.device_decode = mode, exif_transpose, device_decode

    @property
    def channels(self) -> int:
        return 1 if self.mode == "L" else 3

    def check_pixels(self, width: int, height: int, path: str) -> None:
        limit = self.limits.max_pixels
        if limit is not None and width * height > limit:
            raise LimitError(
                path, self.name, f"image is {width}x{height} = {width * height} pixels, above max_pixels={limit}"
            )


def reduced_scale(hint: DecodeHint, full: tuple[int, int]) -> tuple[int, int] | None:
    """The smallest (height, width) of the whole image that keeps the hinted region at
    least as large as the hinted output size, or None when no reduction is asked."""
    if hint.size is None:
        return None
    height, width = full
    top, left, rh, rw = hint.roi if hint.roi is not None else (0, 0, height, width)
    return (math.ceil(height * hint.size[0] / rh), math.ceil(width * hint.size[1] / rw))


def scaled_roi(
    roi: tuple[int, int, int, int] | None, full: tuple[int, int], decoded: tuple[int, int]
) -> tuple[int, int, int, int] | None:
    """Map a region of the full-size image onto an image decoded at a reduced scale."""
    if roi is None or decoded == full:
        return roi
    sy, sx = decoded[0] / full[0], decoded[1] / full[1]
    top, left = math.floor(roi[0] * sy), math.floor(roi[1] * sx)
    bottom = min(decoded[0], max(top + 1, round((roi[0] + roi[2]) * sy)))
    right = min(decoded[1], max(left + 1, round((roi[1] + roi[3]) * sx)))
    return top, left, bottom - top, right - left


def hwc_to_chw(array: np.ndarray) -> torch.Tensor:
    """A (C, H, W) view over an (H, W, C) or (H, W) array: no copy; channels-last strides."""
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(array).permute(2, 0, 1)


def crop_hwc(array: np.ndarray, roi: tuple[int, int, int, int] | None) -> np.ndarray:
    if roi is None:
        return array
    top, left, height, width = roi
    return array[top : top + height, left : left + width]


def check_hint(hint: DecodeHint) -> None:
    if hint.roi is not None and (hint.roi[2] <= 0 or hint.roi[3] <= 0):
        raise ValueError(f"empty region of interest {hint.roi}")
