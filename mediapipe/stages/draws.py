"""The keyed draw: an op's parameters for one sample of one epoch, the same in every stage.

Every stage that draws (a worker's sample stage, an op fused into a decoder, the device's ops
after a device decode, the batch stage) calls `draw`, so where an op runs never changes what it
draws. Keys come from `mediapipe.rng`.
"""

from __future__ import annotations

from typing import Any

from mediapipe.augment.base import Params
from mediapipe.errors import LimitError
from mediapipe.plan import PlacedOp, Plan
from mediapipe.rng import batch_rng, op_rng


def draw(plan: Plan, placed: PlacedOp, epoch: int, index: int, meta: dict[str, Any]) -> Params:
    """``placed``'s parameters for sample ``index`` of ``epoch``, drawn on ``meta`` (its canvas
    ``size`` and ``shape``, the ``fields`` it draws on, the source's metadata)."""
    return placed.op.sample_params(op_rng(plan.seed, epoch, index, placed.index), meta)


def draw_per_batch(plan: Plan, placed: PlacedOp, epoch: int, draw_number: int, count: int) -> Params:
    """A per-batch op's parameters (MixUp's lambda) for batch ``draw_number`` of ``count`` samples."""
    return placed.op.batch_params(batch_rng(plan.seed, epoch, draw_number, placed.index), count)


def draw_within_limits(plan: Plan, placed: PlacedOp, epoch: int, index: int, meta: dict[str, Any],
                       key: str) -> Params:
    """`draw`, refusing a drawn output size above the pipeline's ``max_pixels`` before anything
    allocates it: a resize's size follows the input's aspect ratio, so a 1 x 60000 image (under
    the limit) resized to a shorter side of 256 would be 256 x 15 million pixels."""
    params = draw(plan, placed, epoch, index, meta)
    size, limit = params.get("size"), plan.limits.max_pixels
    if limit is not None and size is not None and len(size) == 2:
        height, width = (int(v) for v in size)
        if height * width > limit:
            raise LimitError(key, type(placed.op).__name__, f"output of {height}x{width} = {height * width} pixels "
                             f"is above max_pixels={limit}")
    return params
