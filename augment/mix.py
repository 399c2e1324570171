"""MixUp and CutMix: mix each sample with its neighbour in the batch, and their labels.

Both run once per batch on the device (``batch_only``): lambda ~ Beta(alpha, alpha) is drawn
once per batch from the batch's key; sample i is mixed with sample i - 1 (the batch rolled by
one, as torchvision v2), or with the previous valid sample where a batch has empty slots
(``valid`` False under ``on_error="replace"``). They read the class indices in ``label`` (int64 (B,)), or soft labels
from an earlier mixing op, and write soft labels float32 (B, num_classes) rows that sum to 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from mediapipe.augment.base import Op, Params, check_positive
from mediapipe.augment.functional import mix as F
from mediapipe.fields import FEATURES, IMAGE, VIDEO
from mediapipe.rng import SampleRNG


@dataclass(frozen=True)
class _Mix(Op):
    num_classes: int = 0
    alpha: float = 1.0
    label_key: str = "label"
    per_batch: ClassVar[bool] = True
    batch_only: ClassVar[bool] = True
    accepts: ClassVar[frozenset[str]] = frozenset({IMAGE, VIDEO})

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        if self.num_classes <= 0:
            raise ValueError(f"{name}(num_classes={self.num_classes!r}): expected a positive int")
        check_positive(self, alpha=self.alpha)

    def reads(self) -> tuple[str, ...]:
        return (*self.inputs, self.label_key)

    def writes(self) -> tuple[str, ...]:
        return (*self.outputs, self.label_key)

    def batch_params(self, rng: SampleRNG, batch_size: int) -> Params:
        return {"lam": rng.beta(self.alpha, self.alpha)}


@dataclass(frozen=True)
class MixUp(_Mix):
    """Blend each sample with its neighbour: lam * x[i] + (1 - lam) * x[i - 1] (Zhang et al. 2018).

    Input: images, videos and audio features (B, ...), float (uint8 is mixed in float32 and
    rounded back); ``label_key``: int64 (B,) or float (B, num_classes).
    Output: ``out`` (default ``key``), same shape and dtype; ``label_key``: float32 (B, num_classes),
    lam * onehot(y[i]) + (1 - lam) * onehot(y[i - 1]).
    Args:
        num_classes: width of the soft labels (required).
        alpha: Beta(alpha, alpha) concentration of lam, drawn once per batch; > 0.
        label_key: the field holding the labels.
    Stage: batch only, params per batch.
    """

    accepts: ClassVar[frozenset[str]] = frozenset({IMAGE, VIDEO, FEATURES})

    def apply_fields(self, data: dict[str, Any], params: Params, only: Any = None, canvas_size: Any = None) -> None:
        lam = float(params["lam"])
        labels = F.soft_labels(data[self.label_key], self.num_classes)
        partner = F.partners(data.get("valid"), labels.shape[0])
        for src, dst in zip(self.inputs, self.outputs):
            data[dst], mixed = F.mixup(data[src], labels, lam, partner)
        data[self.label_key] = mixed


@dataclass(frozen=True)
class CutMix(_Mix):
    """Paste a box of the neighbour sample x[i - 1] into x[i]; labels weighted by area (Yun et al. 2019).

    The box is torchvision's: centre uniform over the image, half-sides sqrt(1 - lam) / 2 of the
    image's, clipped to the image; the labels use the clipped area: lam' = 1 - box area / image area.
    Input: images and videos (B, ..., H, W), any dtype (a clip gets the box in every frame);
    ``label_key``: int64 (B,) or float (B, num_classes).
    Output: ``out`` (default ``key``), same shape and dtype; ``label_key``: float32 (B, num_classes).
    Args:
        num_classes: width of the soft labels (required).
        alpha: Beta(alpha, alpha) concentration of lam, drawn once per batch; > 0.
        label_key: the field holding the labels.
    Stage: batch only, params (lam and box centre) per batch.
    """

    def batch_params(self, rng: SampleRNG, batch_size: int) -> Params:
        return {"lam": rng.beta(self.alpha, self.alpha), "center_x": rng.random(), "center_y": rng.random()}

    def box(self, params: Params, size: tuple[int, int]) -> tuple[int, int, int, int]:
        """(x1, y1, x2, y2) in pixels for an image of ``size`` = (height, width)."""
        return F.cutmix_box(float(params["lam"]), float(params["center_x"]), float(params["center_y"]), size)

    def apply_fields(self, data: dict[str, Any], params: Params, only: Any = None, canvas_size: Any = None) -> None:
        labels = F.soft_labels(data[self.label_key], self.num_classes)
        box = self.box(params, tuple(data[self.inputs[0]].shape[-2:]))
        partner = F.partners(data.get("valid"), labels.shape[0])
        for src, dst in zip(self.inputs, self.outputs):
            data[dst], mixed = F.cutmix(data[src], labels, box, partner)
        data[self.label_key] = mixed
