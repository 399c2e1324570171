"""Random erasing (cutout): a random rectangle per sample set to a value (batch stage)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mediapipe.augment.base import Op, Params, check_probability
from mediapipe.augment.functional import erase as F
from mediapipe.fields import FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta


@dataclass(frozen=True)
class RandomErasing(Op):
    """Erase a random rectangle of each sample with probability ``p`` (torchvision's ``RandomErasing``,
    Zhong et al. 2017).

    Input: images (B, C, H, W) and clips (B, T, C, H, W), any dtype; a clip gets one box for all
    frames. Masks, boxes and keypoints are not erased (torchvision leaves them too).
    Output: same shape and dtype; the box holds ``value`` cast to the dtype.
    Args:
        p: probability per sample; 0 never erases, 1 always tries (ten tries for a box that fits,
            else nothing is erased, as torchvision).
        scale: (low, high) fraction of the image area erased.
        ratio: (low, high) box height / width, drawn log-uniformly.
        value: fill, one number or one per channel, in the input's units (255 is white for
            uint8). torchvision's ``value="random"`` (noise) is not supported.
    Stage: batch (one mask from the per-sample boxes, one ``where``).
    """

    p: float = 0.5
    scale: tuple[float, float] = (0.02, 0.33)
    ratio: tuple[float, float] = (0.3, 3.3)
    value: float | tuple[float, ...] = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self, self.p)
        if not 0.0 <= self.scale[0] <= self.scale[1] <= 1.0:
            raise ValueError(f"RandomErasing(scale={self.scale!r}): expected 0 <= low <= high <= 1")
        if not 0.0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"RandomErasing(ratio={self.ratio!r}): expected 0 < low <= high")
        values = self.value if isinstance(self.value, tuple) else (self.value,)
        if isinstance(self.value, str) or not values or not all(isinstance(v, (int, float)) for v in values):
            raise ValueError(f"RandomErasing(value={self.value!r}): expected a number or one number per channel "
                             "(random noise is not supported)")

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        none = {"top": 0, "left": 0, "height": 0, "width": 0}
        if not rng.bernoulli(self.p):
            return none
        area = height * width
        for _ in range(10):
            erase_area = area * rng.uniform(*self.scale)
            aspect = rng.log_uniform(*self.ratio)
            h = int(round(math.sqrt(erase_area * aspect)))
            w = int(round(math.sqrt(erase_area / aspect)))
            if h < height and w < width:
                return {"top": rng.integers(0, height - h + 1), "left": rng.integers(0, width - w + 1),
                        "height": h, "width": w}
        return none

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: tuple[int, int] | None
                  ) -> torch.Tensor:
        channels = x.shape[-3]
        if isinstance(self.value, tuple) and len(self.value) not in (1, channels):
            raise ValueError(f"RandomErasing(value={self.value}): {len(self.value)} values for {channels} channels")
        return F.erase(x, params["top"], params["left"], params["height"], params["width"], self.value)
