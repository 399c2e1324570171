"""Video ops: YUV to RGB on the device, and the clip layout (B, T, C, H, W) -> (B, C, T, H, W)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mediapipe.augment.base import Op, Params
from mediapipe.augment.functional import color as C
from mediapipe.augment.functional import video as F
from mediapipe.augment.temporal import FrameDrop, TemporalJitter, TemporalReverse, UniformTemporalSubsample
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

LAYOUTS = ("TCHW", "CTHW")

__all__ = ["ClipLayout", "FrameDrop", "TemporalJitter", "TemporalReverse", "UniformTemporalSubsample", "YUVToRGB"]


@dataclass(frozen=True)
class YUVToRGB(Op):
    """Convert Y, U, V planes (``mp.decoders.video(output="yuv")``) to RGB, batched on the device.

    Input  ``key``: uint8 (..., 3, H, W) with channels Y, U, V in 8-bit code values, e.g. a
    clip batch (B, T, 3, H, W).
    Output ``out`` (default ``key``): uint8 RGB, rounded and saturated (``dtype="uint8"``), or
    float in [0, 1] (``dtype="float32"``, ``"float16"``, ``"bfloat16"``); same shape. Stage: batch.
    Args:
        matrix: "bt709" (HD) or "bt601" (SD, and FFmpeg's choice for unsignalled streams):
            the stream's colour matrix. Use the value the decoder's index reports
            (``VideoIndex.matrix``) when a dataset mixes both; see the module notes.
        range: "limited" (Y in [16, 235], the video norm) or "full" (JPEG range, "yuvj" formats).
        dtype: output dtype.
    """

    matrix: str = "bt709"
    range: str = "limited"
    dtype: str = "uint8"
    key: str = field(default="video", kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        F.colour_code(self.matrix, self.range)  # validates both
        C.dtype_of(self.dtype)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"code": F.colour_code(self.matrix, self.range)}

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        code = params["code"]
        if isinstance(code, torch.Tensor) and code.ndim == 1 and bool((code == code[0]).all()):
            code = int(code[0])  # one matrix for the batch: a single broadcast product
        return F.yuv_to_rgb(x, code, dtype=C.dtype_of(self.dtype))


@dataclass(frozen=True)
class ClipLayout(Op):
    """Reorder a clip's dims for the model: "CTHW" gives (B, C, T, H, W) (3D CNNs: I3D, X3D,
    SlowFast), "TCHW" keeps (B, T, C, H, W) (transformers, 2D CNNs over frames).

    Input  ``key``: (..., T, C, H, W), any dtype. Output: (..., C, T, H, W) as a contiguous
    tensor (one copy on the device). Stage: batch; place it last, after the image ops.
    """

    layout: str = "CTHW"
    key: str = field(default="video", kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.layout not in LAYOUTS:
            raise ValueError(f"ClipLayout(layout={self.layout!r}): expected one of {LAYOUTS}")

    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        if self.layout == "TCHW":
            return x
        if x.ndim < 4:
            raise ValueError(f"ClipLayout: expected (..., T, C, H, W), got shape {tuple(x.shape)}")
        return x.transpose(-4, -3).contiguous()
