"""Video ops: YUV to RGB on the device, and the clip layout (B, T, C, H, W) -> (B, C, T, H, W)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from mediapipe.augment.base import Op, Params, check_choice
from mediapipe.augment.functional import color as C
from mediapipe.augment.functional import video as F
from mediapipe.augment.temporal import FrameDrop, TemporalJitter, TemporalReverse, UniformTemporalSubsample
from mediapipe.fields import VIDEO, FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

LAYOUTS = ("TCHW", "CTHW")

__all__ = ["ClipLayout", "FrameDrop", "TemporalJitter", "TemporalReverse", "UniformTemporalSubsample", "YUVToRGB"]


AUTO = "auto"


@dataclass(frozen=True)
class YUVToRGB(Op):
    """Convert Y, U, V planes (``mp.decoders.video(output="yuv")``) to RGB, batched on the device.

    Input: videos, uint8 (..., 3, H, W) with channels Y, U, V in 8-bit code values, e.g. a
    clip batch (B, T, 3, H, W); with "auto", also ``<key>_colour``: int64 (B,), the colour code
    of each sample's stream (`colour_code`), which the video decoder adds as a side field.
    Output ``out`` (default ``key``): uint8 RGB, rounded and saturated (``dtype="uint8"``), or
    float in [0, 1] (``dtype="float32"``, ``"float16"``, ``"bfloat16"``); same shape. Stage: batch.
    Args:
        matrix: "auto" (each sample's own stream signalling, per sample), "bt709" (HD),
            "bt2020" (UHD/HDR) or "bt601" (SD, and FFmpeg's choice for unsignalled streams). An
            explicit value overrides the stream's for every sample.
        range: "auto", "limited" (Y in [16, 235], the video norm) or "full" (JPEG range,
            "yuvj" formats); an explicit value overrides the stream's.
        dtype: output dtype.
    Per-sample matrices cost nothing extra: the batch is one batched matrix product.
    """

    matrix: str = AUTO
    range: str = AUTO
    dtype: str = "uint8"
    accepts: ClassVar[frozenset[str]] = frozenset({VIDEO})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self, "matrix", self.matrix, (AUTO, *F.MATRICES))
        check_choice(self, "range", self.range, (AUTO, *F.RANGES))
        check_choice(self, "dtype", self.dtype, C.DTYPES)

    @property
    def auto(self) -> bool:
        """Whether any sample's matrix or range comes from its stream (the ``<key>_colour`` field)."""
        return AUTO in (self.matrix, self.range)

    def colour_field(self, src: str) -> str:
        return f"{src}_colour"

    def reads(self) -> tuple[str, ...]:
        if not self.auto:
            return self.inputs
        return self.inputs + tuple(self.colour_field(k) for k in self.inputs)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {} if self.auto else {"code": F.colour_code(self.matrix, self.range)}

    def codes(self, stream: torch.Tensor | int) -> torch.Tensor | int:
        """Each sample's code: the stream's ``stream`` codes with the explicit matrix/range put in."""
        if not self.auto:
            return F.colour_code(self.matrix, self.range)
        return F.override_code(stream, None if self.matrix == AUTO else self.matrix,
                               None if self.range == AUTO else self.range)

    def apply_fields(self, data: dict[str, Any], params: Params, only: Any = None, canvas_size: Any = None) -> None:
        for src, dst in zip(self.inputs, self.outputs):
            if only is not None and src not in only:
                continue
            if self.auto:
                data[dst] = self._convert(data[src], self.codes(data[self.colour_field(src)]))
            else:
                data[dst] = self.apply(data[src], params)

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Any) -> torch.Tensor:
        if "code" not in params:
            raise ValueError(f"YUVToRGB(matrix={self.matrix!r}, range={self.range!r}) reads each sample's "
                             f"colour from the field {self.colour_field(self.inputs[0])!r}: use apply_fields, "
                             "or give matrix and range")
        return self._convert(x, params["code"])

    def _convert(self, x: torch.Tensor, code: torch.Tensor | int) -> torch.Tensor:
        if isinstance(code, torch.Tensor) and code.ndim == 1 and code.numel() and bool((code == code[0]).all()):
            code = int(code[0])  # one matrix for the batch: a single broadcast product
        return F.yuv_to_rgb(x, code, dtype=C.dtype_of(self.dtype))


@dataclass(frozen=True)
class ClipLayout(Op):
    """Reorder a clip's dims for the model: "CTHW" gives (B, C, T, H, W) (3D CNNs: I3D, X3D,
    SlowFast), "TCHW" keeps (B, T, C, H, W) (transformers, 2D CNNs over frames).

    Input: videos (..., T, C, H, W), any dtype. Output: (..., C, T, H, W) as a contiguous
    tensor (one copy on the device). Stage: batch; place it last, after the image ops.
    """

    layout: str = "CTHW"
    accepts: ClassVar[frozenset[str]] = frozenset({VIDEO})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self, "layout", self.layout, LAYOUTS)

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Any) -> torch.Tensor:
        if self.layout == "TCHW":
            return x
        if x.ndim < 4:
            raise ValueError(f"ClipLayout: expected (..., T, C, H, W), got shape {tuple(x.shape)}")
        return x.transpose(-4, -3).contiguous()
