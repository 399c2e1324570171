"""libjpeg-turbo backend through simplejpeg: JPEG straight into an RGB array.

Faster than Pillow on JPEG (no 4-byte intermediate, no copy out), with DCT-domain
downscaling (1/2, 1/4, 1/8) when the hinted region is large against the output size (see
`plan_decode`). Every other format, CMYK JPEGs, JPEGs whose header `jpeg_frame` cannot walk
and JPEGs that EXIF orientation turns (with ``exif_transpose``) go to the Pillow backend.
"""

from __future__ import annotations

import numpy as np
import torch

from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.image import (
    FULL_SCALE,
    ImageDecoder,
    ScaledDecode,
    check_hint,
    finish_decode,
    jpeg_frame,
)
from mediapipe.decoders.image_pillow import PillowImageDecoder
from mediapipe.decoders.registry import register
from mediapipe.errors import DecodeError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta

try:
    import simplejpeg
except ImportError:  # pragma: no cover - simplejpeg is a dependency, but a broken wheel must not break Pillow
    simplejpeg = None

_JPEG_MAGIC = b"\xff\xd8\xff"


@register("image", "turbo")
class TurboImageDecoder(ImageDecoder):
    """libjpeg-turbo (simplejpeg) for JPEG on the CPU; Pillow for the rest."""

    priority = 50

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._fallback = PillowImageDecoder(**kwargs)

    @classmethod
    def available(cls, device: torch.device | None) -> bool:
        return simplejpeg is not None

    def _header(self, data: bytes, path: str) -> tuple[int, int, str] | None:
        """(height, width, colorspace) of a JPEG that this backend decodes, else None."""
        if not data.startswith(_JPEG_MAGIC) or jpeg_frame(data) is None:
            return None  # a header the marker walk does not vouch for (junk, TEM, RSTn): Pillow's verdict
        self.check_jpeg(data, path)
        try:
            height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        except KeyError:  # sampling factors simplejpeg has no name for (luma 1x4, 4x4...): Pillow decodes them
            return None
        except ValueError as err:
            if "subsampling" in str(err):  # ... or TurboJPEG none (luma 3x2, 1x3, 2x4): "Could not determine subsampling level"
                return None
            raise DecodeError(path, self.name, f"bad JPEG header ({err})") from err
        if colorspace in ("CMYK", "YCCK"):
            return None
        return height, width, colorspace

    def probe(self, blob: Blob, data: bytes | None = None) -> SampleMeta:
        data = blob.read() if data is None else data
        header = self._header(data, blob.name)
        if header is None or self.turns(data):
            return self._fallback.probe(blob, data)
        self.check_pixels(header[1], header[0], blob.name)
        return {"height": header[0], "width": header[1], "jpeg_header": header}  # decode reuses it

    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> torch.Tensor:
        check_hint(hint)
        data = blob.read()
        header = meta.get("jpeg_header") or self._header(data, blob.name)
        if header is None or self.turns(data):
            return self._fallback.decode(blob, hint, rng, meta)
        height, width, _ = header
        self.check_pixels(width, height, blob.name)
        plan = self.plan(hint, (height, width), data)
        data = self.scans(data, hint)
        array = self.decode_array(data, blob.name, plan, (height, width))
        if array.shape[:2] != plan.reduced_size((height, width)):  # a tiny image: libjpeg chose another scale
            plan = FULL_SCALE
            array = self.decode_array(data, blob.name, plan, (height, width))
        return finish_decode(array, hint, plan)

    def decode_array(self, data: bytes, path: str, plan: ScaledDecode, full: tuple[int, int]) -> np.ndarray:
        """The whole JPEG as an (H, W[, C]) array, at the plan's scale."""
        # simplejpeg picks the smallest scale M/8 whose image is at least min_height x
        # min_width: the reduced size itself asks for exactly 1/denominator
        min_height, min_width = plan.reduced_size(full) if plan.denominator > 1 else (0, 0)
        try:
            return simplejpeg.decode_jpeg(data, colorspace="GRAY" if self.options.mode == "L" else "RGB",
                                          min_height=min_height, min_width=min_width, strict=True)
        except ValueError as err:
            raise DecodeError(path, self.name, str(err)) from err
