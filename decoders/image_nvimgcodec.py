"""nvImageCodec backend: nvJPEG on an NVIDIA GPU, libjpeg-turbo with ROI decoding on the CPU.

nvImageCodec (installed with the ``dali`` extra) decodes only the rows and columns of
the hinted region: rows below it are never entropy-decoded, and the IDCT and colour
conversion run for the region alone (DALI's ROI decode). On the CPU ("auto" picks it
wherever it is installed) it runs per sample in our workers, for the crops of
baseline JPEGs at full scale, and for progressive JPEGs' crops that cover at most
`PROGRESSIVE_REGION_SHARE` of the image (every scan is entropy-decoded whole, region or not:
only the inverse DCT and colour conversion of the rest are saved, which pays for a small
region only). A progressive JPEG whose scans stop short (its own, or without its final
refinement scans, `ImageDecoder.scans`) is decoded with libjpeg's block smoothing, which reads two
blocks around each block: its region is decoded with `smoothing_margin` more on every side
and cut, so that it equals the whole decode's. Larger progressive crops, whole images and crops
that `plan_decode` lets decode at a reduced DCT scale go to the turbo backend. On an NVIDIA
device it runs as a device decoder: the workers read the bytes and draw the crop, and the
training process decodes the whole batch with one call into GPU memory (nvJPEG, the
hardware JPEG decoder where the GPU has one), every JPEG's region at full scale, which the
fused op then resizes as one batch on the GPU. Non-JPEG formats, EXIF-rotated images and
progressive JPEGs whose scans stop short go to the turbo/Pillow path on the CPU, counted in
``loader.stats.fallbacks``; so does a file cut short, which a region decode could stop above,
for the turbo path to report.

Its CPU-only backend runs the same batched path without a GPU (``device_decode=True`` on a
CPU device): the tests run the device stage with it.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import torch

from mediapipe.cuda_access import nvidia_gpu
from mediapipe.decoders.base import _NO_RNG, Decoded, DecodeHint
from mediapipe.decoders.image import (
    ImageDecoder,
    ImageOptions,
    JpegFrame,
    check_hint,
    crop_chw,
    hwc_to_chw,
    jpeg_frame,
    jpeg_is_complete,
    jpeg_is_progressive,
)
from mediapipe.decoders.image_turbo import TurboImageDecoder
from mediapipe.decoders.jpeg_scans import every_coefficient_refined
from mediapipe.decoders.registry import register
from mediapipe.errors import DecodeError
from mediapipe.options import Where
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta

_JPEG_MAGIC = b"\xff\xd8\xff"
# a progressive JPEG's region goes to the region decode when it covers at most this share of
# the image's area; above it the turbo backend's whole decode costs less (its libjpeg-turbo build is
# the faster of the two on a whole image, and the region saves too little of the inverse DCT)
PROGRESSIVE_REGION_SHARE = 0.5


def smoothing_margin(roi: tuple[int, int, int, int], frame: JpegFrame) -> tuple[tuple[int, int, int, int],
                                                                              tuple[int, int, int, int]]:
    """The region to decode for ``roi`` where libjpeg smooths blocks (it reads two blocks of each
    component on every side, 16 pixels times the largest sampling factor), clipped to the image,
    and where ``roi`` lies in it."""
    top, left, h, w = roi
    dy, dx = 16 * frame.v_max, 16 * frame.h_max
    y0, x0 = max(0, top - dy), max(0, left - dx)
    y1, x1 = min(frame.height, top + h + dy), min(frame.width, left + w + dx)
    return (y0, x0, y1 - y0, x1 - x0), (top - y0, left - x0, h, w)


def decode_window(roi: tuple[int, int, int, int], frame: JpegFrame, smoothed: bool) -> tuple[
        tuple[int, int, int, int], tuple[int, int, int, int]]:
    """The region to decode for ``roi`` and where ``roi`` lies in it: with `smoothing_margin`
    where libjpeg smooths blocks, and at least two pixels wide (libjpeg-turbo's region decode
    upsamples the chroma of a one-pixel-wide 4:2:0 region at the left edge unlike its whole
    decode; a two-pixel one agrees), clipped to the image."""
    if smoothed:
        return smoothing_margin(roi, frame)
    top, left, h, w = roi
    if w > 1 or frame.width < 2:
        return roi, (0, 0, h, w)
    x0 = left if left + 2 <= frame.width else left - 1
    return (top, x0, h, 2), (0, left - x0, h, w)


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
        # the turbo backend decodes what nvImageCodec hands it (PNG, cut-short files, headers)
        return _nvimgcodec() is not None and TurboImageDecoder.available(device)

    @classmethod
    def preferred(cls, device: torch.device | None) -> bool:
        # everywhere it is installed: on the CPU the region decode costs less per fused crop than
        # turbo's full-width decode (`mediapipe bench`), and it hands turbo what it cannot help;
        # off NVIDIA GPUs (the CPU, ROCm) it decodes in the workers, on its CPU backend (`placement`)
        return True

    @classmethod
    def placement(cls, device: torch.device | None, options: ImageOptions) -> Where:
        forced = options.device_decode
        if forced is not None:
            return "device" if forced else "worker"
        return "device" if nvidia_gpu(device) else "worker"

    @property
    def on_gpu(self) -> bool:
        return nvidia_gpu(self.device)

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
            self._params = nc.DecodeParams(apply_exif_orientation=self.options.exif_transpose,
                                           color_spec=nc.ColorSpec.GRAY if self.options.mode == "L" else nc.ColorSpec.SRGB)
        return local.decoder

    def probe(self, blob: Blob, data: bytes | None = None) -> SampleMeta:
        return self._fallback.probe(blob, data)

    def _why_not(self, data: bytes, hint: DecodeHint, name: str, meta: SampleMeta, batched: bool) -> str | None:
        """None where nvImageCodec decodes the sample, else why the turbo/Pillow path does (see the
        module's docstring). ``batched``: the device path, where every JPEG's region is decoded
        at full scale and the fused op resizes the batch."""
        if not data.startswith(_JPEG_MAGIC):
            return "not a JPEG"
        if self.turns(data):
            return "EXIF orientation applied"
        header = meta.get("jpeg_header") or self._fallback._header(data, name)  # the probe's, if it ran
        if header is None:
            return "JPEG header not read"
        height, width, _ = header
        self.check_pixels(width, height, name)
        if not jpeg_is_complete(data):  # a region decode stops above the cut: the turbo path reports it
            return "cut-short JPEG"
        progressive = jpeg_is_progressive(data)
        if batched:
            if progressive and not every_coefficient_refined(data):
                return "progressive JPEG whose scans stop short (block smoothing)"
            return None
        if self.plan(hint, (height, width)).denominator != 1:
            return "reduced DCT scale"
        if hint.roi is None:
            return "whole image"
        if progressive and hint.roi[2] * hint.roi[3] > PROGRESSIVE_REGION_SHARE * height * width:
            return "large region of a progressive JPEG"
        return None

    def _stream(self, data: bytes, roi: tuple[int, int, int, int] | None):
        nc = _nvimgcodec()
        stream = nc.CodeStream(data)
        if roi is not None:
            top, left, h, w = roi
            stream = stream.get_sub_code_stream(region=nc.Region(top, left, top + h, left + w))
        return stream

    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> torch.Tensor:
        check_hint(hint)
        data = blob.read()
        if hint.roi is None or self._why_not(data, hint, blob.name, meta, batched=False) is not None:
            return self._fallback.decode(blob, hint, rng, meta)
        decoder = self._lazy_decoder()
        thin = self.scans(data, hint)
        frame = jpeg_frame(thin)
        roi, cut = hint.roi, None
        if frame is not None:  # block smoothing reads around the region: decode more, then cut
            smoothed = frame.progressive and (thin is not data or not every_coefficient_refined(data))
            roi, cut = decode_window(hint.roi, frame, smoothed)
        try:
            image = decoder.decode(self._stream(thin, roi), params=self._params)
        except RuntimeError as err:
            raise DecodeError(blob.name, self.name, str(err)) from err
        if image is None:
            raise DecodeError(blob.name, self.name, "corrupt or truncated JPEG data")
        return crop_chw(self._to_tensor(image), cut)

    def _to_tensor(self, image) -> torch.Tensor:
        """(C, H, W) on the decoder's device: nvJPEG's output in place, the CPU backend's moved
        (to a device that stands in for a GPU in the tests)."""
        if self.on_gpu:
            return torch.from_dlpack(image).permute(2, 0, 1)
        x = hwc_to_chw(np.asarray(image))
        return x if self.device is None else x.to(self.device)

    def decode_batch(self, blobs: list[Blob], hints: list[DecodeHint], metas: list[SampleMeta]) -> list:
        """One call for the JPEGs of a batch, each its region at full scale (the fused op resizes
        them as one batch); the rest through the CPU path, as `Decoded` results naming why."""
        decoder = self._lazy_decoder()
        out: list = [None] * len(blobs)
        batch, where, cuts = [], [], []
        for i, (blob, hint) in enumerate(zip(blobs, hints)):
            try:
                data = blob.read()
                why = self._why_not(data, hint, blob.name, metas[i], batched=True)
                if why is None:
                    frame = jpeg_frame(data)
                    roi, cut = (hint.roi, None) if frame is None or hint.roi is None else decode_window(
                        hint.roi, frame, smoothed=False)
                    batch.append(self._stream(data, roi))
                    where.append(i)
                    cuts.append(cut)
                else:
                    x = self._fallback.decode(blob, hint, _NO_RNG, metas[i])
                    out[i] = Decoded(x if self.device is None else x.to(self.device), {}, fallback=why)
            except RuntimeError as err:
                out[i] = DecodeError(blob.name, self.name, str(err))
            except DecodeError as err:
                out[i] = err
        if batch:
            # decoded in order with torch's work on its current stream (the loader's side stream)
            stream = torch.cuda.current_stream(self.device).cuda_stream if self.on_gpu else 0
            images = decoder.decode(batch, params=self._params, cuda_stream=stream)
            for i, image, cut in zip(where, images, cuts):
                if image is None:
                    out[i] = DecodeError(blobs[i].name, self.name, "corrupt or truncated JPEG data")
                else:
                    out[i] = crop_chw(self._to_tensor(image), cut)
        return out

