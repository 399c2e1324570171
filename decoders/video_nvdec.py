"""NVDEC video backend: FFmpeg's native AV1 (and H.264/HEVC/VP9) decoders with CUDA hardware
acceleration through PyAV, for machines whose NVIDIA GPU decodes AV1 (Ampere and later).

``backend="auto"`` picks it only when the cheap checks pass (PyAV lists a "cuda" device type,
torch sees a CUDA GPU). The real capability probe, decoding a tiny AV1 clip on the GPU, runs
once per process at the first decode, in the worker (so no CUDA context is made before a
fork). A failed probe, or a file the hardware rejects, falls back to the CPU path (PyAV with
libdav1d) for that file, counted in ``fallbacks``. Frames come back to host memory as NV12.
"""

from __future__ import annotations

import copy
import io
import logging
import os
import threading
from collections import Counter
from typing import Any, ClassVar

import numpy as np
import torch

from mediapipe.decoders.base import Decoded, DecodeHint
from mediapipe.decoders.registry import register
from mediapipe.decoders.video_pyav import PyAVVideoDecoder, av
from mediapipe.errors import LimitError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta

log = logging.getLogger(__name__)

# Codecs NVDEC decodes through FFmpeg's hwaccel-capable native decoders.
HW_CODECS = {"av1": "av1", "libdav1d": "av1", "libaom-av1": "av1", "h264": "h264", "hevc": "hevc", "vp9": "vp9",
             "libvpx-vp9": "vp9"}
_PROBE: dict[str, bool] = {}  # device -> whether a real AV1 decode on it worked (per process)


def _cuda_listed() -> bool:
    try:
        from av.codec.hwaccel import hwdevices_available
    except ImportError:
        return False
    try:
        return "cuda" in hwdevices_available()
    except Exception:
        return False


def _hwaccel(device: str | None) -> Any:
    from av.codec.hwaccel import HWAccel

    return HWAccel(device_type="cuda", device=device, allow_software_fallback=False)


def _tiny_av1() -> bytes:
    """Four 64x64 AV1 frames in IVF, encoded here (libsvtav1): the probe's input."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="ivf") as out:
        stream = out.add_stream("libsvtav1", rate=25)
        stream.width = stream.height = 64
        stream.pix_fmt = "yuv420p"
        for i in range(4):
            frame = av.VideoFrame.from_ndarray(np.full((64, 64, 3), 40 * i, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def probe_av1(device: str | None = None) -> bool:
    """Whether this process can decode AV1 on the CUDA device (cached; decodes four frames)."""
    key = device or "default"
    if key not in _PROBE:
        try:
            data = _tiny_av1()
            with av.open(io.BytesIO(data)) as container:
                stream = container.streams.video[0]
                ctx = av.CodecContext.create("av1", "r", hwaccel=_hwaccel(device))
                if stream.codec_context.extradata:
                    ctx.extradata = stream.codec_context.extradata
                count = sum(len(ctx.decode(p if p.size else None)) for p in container.demux(stream))
            _PROBE[key] = count == 4
        except Exception as err:  # no driver, no NVDEC, an NVDEC without AV1, a CPU-only FFmpeg...
            log.info("NVDEC AV1 probe failed on %s: %s", key, err)
            _PROBE[key] = False
    return _PROBE[key]


@register("video", "nvdec")
class NvdecVideoDecoder(PyAVVideoDecoder):
    """NVDEC through PyAV's CUDA hwaccel; the PyAV/libdav1d CPU path for what it cannot do."""

    priority = 10
    fallbacks: ClassVar[Counter] = Counter()  # reason -> files decoded on the CPU instead (per process)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        index = self.device.index if self.device is not None and self.device.type == "cuda" else None
        self.cuda_device = None if index is None else str(index)
        self._use_hw: bool | None = None  # decided by the probe at the first decode
        self._local = threading.local()  # per thread: whether the file being decoded uses NVDEC

    @classmethod
    def available(cls, device: torch.device | None) -> bool:
        """Cheap checks only: PyAV with a CUDA device type, FFmpeg's native AV1 decoder, and a
        CUDA GPU visible to torch (``device`` None or a CUDA device). The decode probe runs later."""
        if av is None or os.environ.get("MEDIAPIPE_NO_NVDEC"):
            return False
        if device is not None and device.type != "cuda":
            return False
        try:
            av.codec.Codec("av1", "r")
        except Exception:
            return False
        return _cuda_listed() and torch.cuda.is_available()

    def reuses_index_pass(self) -> bool:
        return not getattr(self._local, "hw", False)  # the index pass's decoder is libdav1d on the CPU

    def codec(self, stream: Any) -> Any:
        if not getattr(self._local, "hw", False):
            return super().codec(stream)
        name = HW_CODECS[stream.codec_context.codec.name]
        ctx = av.CodecContext.create(name, "r", hwaccel=_hwaccel(self.cuda_device))
        if stream.codec_context.extradata:
            ctx.extradata = stream.codec_context.extradata
        return ctx

    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> Decoded:
        if self._use_hw is None:
            self._use_hw = probe_av1(self.cuda_device)
            if not self._use_hw:
                log.warning("NVDEC cannot decode AV1 here; decoding video on the CPU (libdav1d)")
        index = self.index(blob, meta)
        if not self._use_hw or index.codec not in HW_CODECS:
            if self._use_hw:
                self.fallbacks[f"codec {index.codec}"] += 1
            return super().decode(blob, hint, rng, meta)
        self._local.hw = True
        fresh = copy.copy(rng)  # the fallback must draw the same clip as the failed attempt
        try:
            return super().decode(blob, hint, rng, meta)
        except LimitError:
            raise
        except Exception as err:  # the hardware refused this file (profile, size, 4:4:4...): CPU path
            self.fallbacks[type(err).__name__] += 1
            log.info("NVDEC failed on %s (%s); decoding it on the CPU", blob.name, err)
        finally:
            self._local.hw = False
        return super().decode(blob, hint, fresh, meta)
