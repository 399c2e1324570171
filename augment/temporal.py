"""Temporal ops: which frames of a decoded clip the model sees. The time axis is dim -4 of
a clip (T, C, H, W), of several clips (N, T, C, H, W) and of a batch (B, T, C, H, W)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from mediapipe.augment.base import Op, Params, check_probability
from mediapipe.augment.functional import video as F
from mediapipe.fields import VIDEO, FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta


@dataclass(frozen=True)
class _TemporalOp(Op):
    """An op on the time axis of videos (boxes and masks of a clip hold for every frame: untouched)."""

    accepts: ClassVar[frozenset[str]] = frozenset({VIDEO})


def _frames_of(meta: SampleMeta, op: Op) -> int:
    shape = meta.get("shape")
    if shape is None or len(shape) < 4:
        raise ValueError(f"{type(op).__name__}: expected a clip (..., T, C, H, W), got shape {shape}")
    return int(shape[-4])


@dataclass(frozen=True)
class TemporalJitter(_TemporalOp):
    """Pick ``num_frames`` frames of a longer decoded clip at a random stride and offset:
    frame k is ``offset + k * stride``, with ``stride`` drawn from ``strides`` (those that fit)
    and ``offset`` uniform over the room left. Decode e.g. ``clip_len=32, stride=1`` and jitter
    to 16 frames at stride 1 or 2: speed augmentation without decoding twice.

    Input: videos (..., T, C, H, W) with T >= num_frames. Output: (..., num_frames, C, H, W).
    Stage: sample (changes the shape). A stride that does not fit falls back to the largest
    that does (1 always fits).
    """

    num_frames: int = 8
    strides: tuple[int, ...] = (1, 2)
    batched = False

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "strides", tuple(int(s) for s in self.strides))
        if self.num_frames < 1 or not self.strides or min(self.strides) < 1:
            raise ValueError(f"TemporalJitter(num_frames={self.num_frames}, strides={self.strides}): "
                             "expected num_frames >= 1 and strides >= 1")

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        length = _frames_of(meta, self)
        if length < self.num_frames:
            raise ValueError(f"TemporalJitter: clip has {length} frames, fewer than num_frames={self.num_frames}")
        stride = rng.choice(self.strides)
        fitting = [s for s in self.strides if (self.num_frames - 1) * s < length] or [1]
        if stride not in fitting:
            stride = max(fitting)
        room = length - (self.num_frames - 1) * stride
        offset = rng.integers(0, room)
        return {"indices": torch.arange(self.num_frames, dtype=torch.int64) * stride + offset}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Any) -> torch.Tensor:
        return F.select_frames(x, params["indices"])


@dataclass(frozen=True)
class FrameDrop(_TemporalOp):
    """Drop each frame with probability ``p``; a dropped frame shows the last kept one (a stall,
    as dropped frames look in a stream). The first frame is always kept; the shape is kept.

    Input: videos (B, T, C, H, W), any dtype. Output: same. Stage: batch (one gather).
    """

    p: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.p < 1.0:
            raise ValueError(f"FrameDrop(p={self.p}): expected 0 <= p < 1")

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        length = _frames_of(meta, self)
        keep = torch.tensor([True] + [not rng.bernoulli(self.p) for _ in range(length - 1)])
        return {"indices": F.held_frames(keep)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Any) -> torch.Tensor:
        return F.select_frames(x, params["indices"])


@dataclass(frozen=True)
class TemporalReverse(_TemporalOp):
    """Play the clip backwards with probability ``p``, drawn per sample.

    Input: videos (B, T, C, H, W), any dtype. Output: same. Stage: batch (one masked flip).
    """

    p: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self, self.p)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"reverse": rng.bernoulli(self.p)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Any) -> torch.Tensor:
        return F.reverse_time(x, params["reverse"])


@dataclass(frozen=True)
class UniformTemporalSubsample(_TemporalOp):
    """Keep ``num_frames`` frames evenly spaced over the clip (first and last included),
    as PyTorchVideo's transform of the same name; deterministic.

    Input: videos (..., T, C, H, W). Output: (..., num_frames, C, H, W); frames repeat when
    T < num_frames. Stage: sample (changes the shape).
    """

    num_frames: int = 8
    batched = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_frames < 1:
            raise ValueError(f"UniformTemporalSubsample(num_frames={self.num_frames}): expected >= 1")

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Any) -> torch.Tensor:
        if x.ndim < 4:
            raise ValueError(f"UniformTemporalSubsample: expected (..., T, C, H, W), got {tuple(x.shape)}")
        return F.select_frames(x, F.uniform_indices(x.shape[-4], self.num_frames))
