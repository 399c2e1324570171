"""nvImageCodec backend: libjpeg-turbo with region-of-interest decoding on the CPU.

nvImageCodec (installed with the ``dali`` extra) decodes only the rows and columns of
the hinted region: rows below it are never entropy-decoded, and the IDCT and colour
conversion run for the region alone. That is DALI's ROI decode, here per sample in
our workers. Non-JPEG formats and anything it cannot read go to the turbo/Pillow path.
"""

from __future__ import annotations

import numpy as np
import torch

from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.image import ImageDecoder, check_hint, hwc_to_chw, reduced_scale
from mediapipe.decoders.image_turbo import TurboImageDecoder
from mediapipe.decoders.registry import register
from mediapipe.errors import DecodeError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta

_JPEG_MAGIC = b"\xff\xd8\xff"


def _nvimgcodec():
    try:
        from nvidia import nvimgcodec
    except Exception:  # not installed, or its native libraries fail to load
        return None
    return nvimgcodec


@register("image", "nvimgcodec")
class NvImageCodecImageDecoder(ImageDecoder):
    """nvImageCodec on the CPU (libjpeg-turbo, region-of-interest decode) for JPEG."""

    priority = 40

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._fallback = TurboImageDecoder(**kwargs)
        self._decoder = None
        self._params = None

    @classmethod
    def available(cls, device: torch.device | None) -> bool:
        return _nvimgcodec() is not None

    def _lazy_decoder(self):
        if self._decoder is None:  # created in the worker that uses it, never before a fork
            nc = _nvimgcodec()
            self._decoder = nc.Decoder(device_id=nc.NVIMGCODEC_DEVICE_CPU_ONLY,
                                       backends=[nc.Backend(nc.BackendKind.CPU_ONLY)], max_num_cpu_threads=1)
            self._params = nc.DecodeParams(apply_exif_orientation=self.exif_transpose,
                                           color_spec=nc.ColorSpec.GRAY if self.mode == "L" else nc.ColorSpec.SRGB)
        return self._decoder

    def probe(self, blob: Blob, data: bytes | None = None) -> SampleMeta:
        return self._fallback.probe(blob, data)

    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> torch.Tensor:
        check_hint(hint)
        data = blob.read()
        if not data.startswith(_JPEG_MAGIC) or self.exif_transpose or hint.roi is None:
            return self._fallback.decode(blob, hint, rng, meta)
        header = self._fallback._header(data, blob.name)
        if header is None:
            return self._fallback.decode(blob, hint, rng, meta)
        height, width, _ = header
        self.check_pixels(width, height, blob.name)
        target = reduced_scale(hint, (height, width))
        if target is not None and min(height / target[0], width / target[1]) >= 2.0:
            return self._fallback.decode(blob, hint, rng, meta)  # DCT scaling beats a full-scale region
        nc = _nvimgcodec()
        decoder = self._lazy_decoder()
        top, left, h, w = hint.roi
        try:
            stream = nc.CodeStream(data).get_sub_code_stream(region=nc.Region(top, left, top + h, left + w))
            image = decoder.decode(stream, params=self._params)
        except RuntimeError as err:
            raise DecodeError(blob.name, self.name, str(err)) from err
        if image is None:
            raise DecodeError(blob.name, self.name, "corrupt or truncated JPEG data")
        return hwc_to_chw(np.asarray(image))
