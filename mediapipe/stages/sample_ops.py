"""The sample-stage ops on one sample: the loop a worker runs after its decoders, and the
device runs after a device decode, over the ops placed there."""

from __future__ import annotations

from typing import Any

from mediapipe.augment.base import CanvasError, ObjectCountError
from mediapipe.errors import DecodeError
from mediapipe.plan import PlacedOp, Plan
from mediapipe.stages.draws import draw_within_limits
from mediapipe.stages.progress import SampleProgress


def run_sample_ops(plan: Plan, ops: list[PlacedOp], data: dict[str, Any], progress: SampleProgress, epoch: int,
                   index: int, key: str) -> None:
    """``ops`` on sample ``index`` (``key``: its file, for errors), in order, in place. An op's draw
    sees the size of its canvas (its first raster input); an op that drew ahead (fused into a
    decoder) drew on the decoded file's size, which its other fields (a mask, boxes) must then
    have too. Fields an op already did (``progress.done``) are not done again."""
    for p in ops:
        todo = [f for f in p.op.inputs if (p.index, f) not in progress.done]
        try:
            params = progress.drawn.get(p.index)
            canvas = None
            if params is None:
                first = data[p.size_field]
                meta = {**progress.meta, "size": tuple(first.shape[-2:]), "shape": tuple(first.shape),
                        "fields": {f: data[f] for f in p.op.draws_on()}}
                params = draw_within_limits(plan, p, epoch, index, meta, key)
            else:
                canvas = _check_canvas(p, data, todo, progress.canvas.get(p.index))
            p.op.apply_fields(data, params, only=None if len(todo) == len(p.op.inputs) else todo, canvas_size=canvas)
        except CanvasError as err:
            raise DecodeError(key, type(p.op).__name__, str(err), category="fields of one draw differ in size") from None
        except ObjectCountError as err:
            raise DecodeError(key, type(p.op).__name__, str(err), category="bad annotation") from None


def _check_canvas(p: PlacedOp, data: dict[str, Any], todo: list[str],
                  canvas: tuple[int, int] | None) -> tuple[int, int] | None:
    """The decoded size an op drew on, once its other raster fields are checked to have it."""
    canvas = tuple(canvas) if canvas is not None else None
    off = {f: s for f, s in p.op.raster_sizes(data, todo).items() if s != canvas}
    if off and canvas is not None:
        raise CanvasError(f"{type(p.op).__name__} draws once for {list(p.op.inputs)} on the decoded {canvas}, but "
                          + ", ".join(f"{f} is {s}" for f, s in off.items()))
    return canvas
