"""NVDEC video backend: FFmpeg's native AV1 (and H.264/HEVC/VP9) decoders with CUDA hardware
acceleration through PyAV, for machines whose NVIDIA GPU decodes AV1 (Ampere and later).

``backend="auto"`` picks it only when the cheap checks pass (PyAV lists a "cuda" device type,
torch sees an NVIDIA GPU, not an AMD one) and, where CUDA is already in use, the GPU's compute
capability says its NVDEC decodes AV1 (A100, H100 and H200 have none: "auto" then decodes with
libdav1d, each sample counted in ``loader.stats.fallbacks`` and the reason logged once; naming
``backend="nvdec"`` there is an error when the pipeline is built). It runs where CUDA may be used (see
`mediapipe.cuda_access`): the training process, or loader workers started by forkserver or
spawn (the loader's default when a decoder uses CUDA), each on its rank's GPU (``LOCAL_RANK``).
In a forked worker it never touches CUDA. The real capability probe, decoding a tiny AV1
clip on the GPU, runs once per process at the first decode. A process where CUDA may not be
used, a failed probe, or a file the hardware rejects falls back to the CPU path (PyAV with
libdav1d), counted per sample in ``loader.stats.fallbacks`` with the reason and named in the
log once. Frames come back to host memory as NV12.
"""

from __future__ import annotations

import copy
import io
import logging
import os
import threading
from collections import Counter
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import torch

from mediapipe import cuda_access
from mediapipe.decoders.base import Decoded, DecodeHint
from mediapipe.decoders.registry import register
from mediapipe.decoders.video_pyav import PyAVVideoDecoder, av
from mediapipe.encoder_logs import quiet_svt
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


# NVDEC decodes AV1 on the GA10x Ampere chips (compute capability 8.6: RTX 30, A10, A40; 8.7: Orin),
# Ada (8.9: RTX 40, L4, L40) and Blackwell (10.0 on); the data-centre chips between have an NVDEC
# without AV1: V100 (7.0), T4 (7.5), A100 and A30 (8.0), H100, H200 and H20 (9.0).
AV1_NVDEC_CAPABILITIES = ((8, 6), (8, 7), (8, 9))
FIRST_AV1_NVDEC_GENERATION = (10, 0)
_AV1_REFUSALS: dict[int | None, str | None] = {}  # GPU index -> why it cannot decode AV1 (per process)


def gpu_identity(index: int | None) -> tuple[str, tuple[int, int]] | None:
    """The name and compute capability of CUDA device ``index`` (None: the current one), or None
    where this process may not use CUDA (`cuda_access.refusal`) or the query fails."""
    if cuda_access.refusal() is not None:
        return None
    try:
        i = torch.cuda.current_device() if index is None else index
        return torch.cuda.get_device_name(i), tuple(torch.cuda.get_device_capability(i))
    except Exception:
        return None


def av1_refusal(index: int | None) -> str | None:
    """Why GPU ``index`` cannot decode AV1 on NVDEC (known from its compute capability), or None
    where it can or where this process cannot ask."""
    if index not in _AV1_REFUSALS:
        identity = gpu_identity(index)
        if identity is None:
            return None  # not cached: a process that may use CUDA later can still ask
        name, capability = identity
        decodes = capability in AV1_NVDEC_CAPABILITIES or capability >= FIRST_AV1_NVDEC_GENERATION
        _AV1_REFUSALS[index] = None if decodes else (
            f"the GPU ({name}, compute capability {capability[0]}.{capability[1]}) has no AV1 NVDEC")
    return _AV1_REFUSALS[index]


def _hwaccel(device: str | None) -> Any:
    from av.codec.hwaccel import HWAccel

    return HWAccel(device_type="cuda", device=device, allow_software_fallback=False)


def _tiny_av1() -> bytes:
    """Four 64x64 AV1 frames in IVF, encoded here (libsvtav1): the probe's input."""
    buf = io.BytesIO()
    with quiet_svt(), av.open(buf, "w", format="ivf") as out:
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
    uses_cuda = True
    fallbacks: ClassVar[Counter] = Counter()  # reason -> files decoded on the CPU instead (per process)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        index = cuda_access.worker_gpu(self.device)
        self.cuda_device = None if index is None else str(index)
        self._use_hw: bool | None = None  # decided at the first decode: may this process use CUDA, and NVDEC?
        self._refused: str | None = None  # why not, when not
        self._local = threading.local()  # per thread: whether the file being decoded uses NVDEC

    @classmethod
    def available(cls, device: torch.device | None) -> bool:
        """Cheap checks only: PyAV with a CUDA device type, FFmpeg's native AV1 decoder, and a
        CUDA GPU visible to torch (``device`` None or a CUDA device). The decode probe runs later."""
        if av is None or os.environ.get("MEDIAPIPE_NO_NVDEC") or cuda_access.is_rocm():
            return False
        if device is not None and device.type != "cuda":
            return False
        try:
            av.codec.Codec("av1", "r")
        except Exception:
            return False
        return _cuda_listed() and torch.cuda.is_available()

    @classmethod
    def refusal(cls, device: torch.device | None) -> str | None:
        """The GPU's lack of AV1 NVDEC, asked only where CUDA is in use already (a CUDA ``device``,
        or CUDA initialised): choosing a backend never starts CUDA on its own."""
        index = cuda_access.worker_gpu(device)
        if index in _AV1_REFUSALS:  # asked already, here or in the parent a worker was forked from
            return _AV1_REFUSALS[index]
        if not (cuda_access.nvidia_gpu(device) or torch.cuda.is_initialized()):
            return None
        return av1_refusal(index)

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

    def decide(self) -> str | None:
        """Whether this process decodes on NVDEC, decided once, at the first decode: None if so,
        else why not. CUDA is touched (by the probe) only where `cuda_access.refusal` allows it."""
        if self._use_hw is None:
            self._refused = cuda_access.refusal()
            if self._refused is None:
                self._refused = av1_refusal(None if self.cuda_device is None else int(self.cuda_device))
            if self._refused is None and not probe_av1(self.cuda_device):
                self._refused = "NVDEC cannot decode AV1 here (the probe failed)"
            self._use_hw = self._refused is None
        return self._refused

    def _on_cpu(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta, reason: str) -> Decoded:
        self.fallbacks[reason] += 1
        return replace(super().decode(blob, hint, rng, meta), fallback=reason)

    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> Decoded:
        refused = self.decide()
        if refused is not None:
            return self._on_cpu(blob, hint, rng, meta, refused)
        index = self.index(blob, meta)
        if index.codec not in HW_CODECS:
            return self._on_cpu(blob, hint, rng, meta, f"NVDEC does not decode {index.codec}")
        self._local.hw = True
        fresh = copy.copy(rng)  # the fallback must draw the same clip as the failed attempt
        try:
            return super().decode(blob, hint, rng, meta)
        except LimitError:
            raise
        except Exception as err:  # the hardware refused this file (profile, size, 4:4:4...): CPU path
            log.info("NVDEC failed on %s (%s); decoding it on the CPU", blob.name, err)
            reason = f"NVDEC refused the file ({type(err).__name__})"
        finally:
            self._local.hw = False
        return self._on_cpu(blob, hint, fresh, meta, reason)
