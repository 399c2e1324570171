"""nvImageCodec backend: nvJPEG on an NVIDIA GPU, libjpeg-turbo with ROI decoding on the CPU.

nvImageCodec (installed with the ``dali`` extra) decodes only the rows and columns of
the hinted region: rows below it are never entropy-decoded, and the IDCT and colour
conversion run for the region alone (DALI's ROI decode). On the CPU ("auto" picks it
wherever it is installed) it runs per sample in our workers, for the crops of
baseline JPEGs at full scale; progressive JPEGs (whose every scan is entropy-decoded
whole, region or not), whole images and crops that `plan_decode` lets decode at a
reduced DCT scale go to the turbo backend. On a CUDA
device it runs as a device decoder: the workers read the bytes and draw the crop, and the
training process decodes the whole batch with one call into GPU memory (nvJPEG, the
hardware JPEG decoder where the GPU has one). Non-JPEG formats and anything it cannot
read go to the turbo/Pillow path.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import torch

from mediapipe.decoders.base import _NO_RNG, DecodeHint
from mediapipe.decoders.image import (
    ImageDecoder,
    check_hint,
    hwc_to_chw,
    jpeg_is_complete,
    jpeg_is_progressive,
    plan_decode,
)
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
    """nvImageCodec for JPEG: nvJPEG on a GPU, libjpeg-turbo region-of-interest decode on the CPU."""

    priority = 40

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._fallback = TurboImageDecoder(**kwargs)
        self._local = threading.local()  # a decoder per thread and process (thread workers, forks)
        self._params = None

    @classmethod
    def available(cls, device: torch.device | None) -> bool:
        return _nvimgcodec() is not None

    @classmethod
    def preferred(cls, device: torch.device | None) -> bool:
        # everywhere it is installed: on the CPU the region decode costs less per fused crop than
        # turbo's full-width decode (`mediapipe bench`), and it hands turbo what it cannot help
        return True

    @classmethod
    def placement(cls, device: torch.device | None, options: dict) -> str:
        forced = options.get("device_decode")
        if forced is not None:
            return "device" if forced else "worker"
        return "device" if device is not None and device.type == "cuda" else "worker"

    @property
    def on_gpu(self) -> bool:
        return self.device is not None and self.device.type == "cuda"

    def _lazy_decoder(self):
        """This thread's decoder, created in the process that uses it (never one a fork inherited)."""
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            nc = _nvimgcodec()
            if self.on_gpu:
                index = self.device.index if self.device.index is not None else torch.cuda.current_device()
                local.decoder = nc.Decoder(device_id=index)  # GPU backends first, CPU for what they refuse
            else:
                threads = 1 if self.device is None else max(1, torch.get_num_threads())
                local.decoder = nc.Decoder(device_id=nc.NVIMGCODEC_DEVICE_CPU_ONLY,
                                           backends=[nc.Backend(nc.BackendKind.CPU_ONLY)],
                                           max_num_cpu_threads=threads)
            local.pid = os.getpid()
            self._params = nc.DecodeParams(apply_exif_orientation=self.exif_transpose,
                                           color_spec=nc.ColorSpec.GRAY if self.mode == "L" else nc.ColorSpec.SRGB)
        return local.decoder

    def probe(self, blob: Blob, data: bytes | None = None) -> SampleMeta:
        return self._fallback.probe(blob, data)

    def _roi_decodes(self, data: bytes, hint: DecodeHint, name: str, meta: SampleMeta) -> bool:
        """Whether nvImageCodec decodes the sample; else the turbo/Pillow path (see the module's
        docstring for which samples that is)."""
        if not data.startswith(_JPEG_MAGIC) or self.exif_transpose:
            return False
        header = meta.get("jpeg_header") or self._fallback._header(data, name)  # the probe's, if it ran
        if header is None:
            return False
        height, width, _ = header
        self.check_pixels(width, height, name)
        if plan_decode(hint, (height, width)).denominator != 1:
            return False
        if not jpeg_is_complete(data):  # a region decode stops below the region: the turbo path reports it
            return False
        return self.on_gpu or (hint.roi is not None and not jpeg_is_progressive(data))

    def _stream(self, data: bytes, hint: DecodeHint):
        nc = _nvimgcodec()
        stream = nc.CodeStream(data)
        if hint.roi is not None:
            top, left, h, w = hint.roi
            stream = stream.get_sub_code_stream(region=nc.Region(top, left, top + h, left + w))
        return stream

    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> torch.Tensor:
        check_hint(hint)
        data = blob.read()
        if hint.roi is None or not self._roi_decodes(data, hint, blob.name, meta):
            return self._fallback.decode(blob, hint, rng, meta)
        decoder = self._lazy_decoder()
        try:
            image = decoder.decode(self._stream(data, hint), params=self._params)
        except RuntimeError as err:
            raise DecodeError(blob.name, self.name, str(err)) from err
        if image is None:
            raise DecodeError(blob.name, self.name, "corrupt or truncated JPEG data")
        return self._to_tensor(image)

    def _to_tensor(self, image) -> torch.Tensor:
        if self.on_gpu:
            return torch.from_dlpack(image).permute(2, 0, 1)
        return hwc_to_chw(np.asarray(image))

    def decode_batch(self, blobs: list[Blob], hints: list[DecodeHint], metas: list[SampleMeta]) -> list:
        """One call for the JPEGs of a batch (regions applied); the rest go through the CPU path.

        The choice per sample is the same as `decode`'s, so a batch decoded here equals the
        same batch decoded per sample in the workers (on the CPU)."""
        decoder = self._lazy_decoder()
        out: list = [None] * len(blobs)
        batch, where = [], []
        for i, (blob, hint) in enumerate(zip(blobs, hints)):
            try:
                data = blob.read()
                if self._roi_decodes(data, hint, blob.name, metas[i]):
                    batch.append(self._stream(data, hint))
                    where.append(i)
                else:
                    out[i] = self._fallback.decode(blob, hint, _NO_RNG, metas[i]).to(self.device or "cpu")
            except RuntimeError as err:
                out[i] = DecodeError(blob.name, self.name, str(err))
            except DecodeError as err:
                out[i] = err
        if batch:
            for i, image in zip(where, decoder.decode(batch, params=self._params)):
                if image is None:
                    out[i] = DecodeError(blobs[i].name, self.name, "corrupt or truncated JPEG data")
                else:
                    out[i] = self._to_tensor(image)
        return out
