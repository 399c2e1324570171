"""The ops that keep boxes usable, moving no pixels: clamped to their image
(`ClampBoundingBoxes`), degenerate ones dropped with the same rows of every per-object field
(`SanitizeBoundingBoxes`), as torchvision v2's ops of those names. Both read the canvas (H, W)
the boxes are in pixels of from an image, mask or video field they do not transform.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from mediapipe.augment.base import Canvas, ObjectCountError, Op, Params, Stage
from mediapipe.augment.binding import Binding, bound_copy
from mediapipe.augment.functional import objects as O
from mediapipe.augment.functional import rows as R
from mediapipe.augment.functional import spatial as S
from mediapipe.augment.geometry import _meta
from mediapipe.errors import PipelineError
from mediapipe.fields import BOXES, IMAGE, FieldType


@dataclass(frozen=True)
class _OnCanvas(Op):
    """An op on boxes that moves no pixels: it takes the canvas (H, W) the boxes are in pixels of
    from the sample's image, the first image, mask or video field (or the one ``canvas_key``
    names), which it reads but does not transform."""

    canvas_key: str | None = field(default=None, kw_only=True)
    reads_canvas = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.canvas_key is not None and not self.canvas_key:
            raise ValueError(f"{type(self).__name__}(canvas_key=''): expected a field name, or None for the first "
                             "image, mask or video field")

    def bind(self, types: Mapping[str, FieldType], where: str = "") -> Op:
        return self._with_canvas(super().bind(types, where), types, where)

    def _with_canvas(self, bound: Op, types: Mapping[str, FieldType], where: str) -> Op:
        name = f"{where}{type(self).__name__}"
        rasters = [f for f, t in types.items() if t.spec.has_canvas]
        canvas = self.canvas_key or (rasters[0] if rasters else None)
        if canvas is None or canvas not in rasters:
            raise PipelineError(f"{name} needs the image its boxes are in pixels of, and "
                                + (f"canvas_key={canvas!r} is not an image, mask or video field; " if canvas else "")
                                + f"image, mask and video fields here: {rasters or 'none'}")
        object.__setattr__(bound, "_canvas_key", canvas)
        return bound

    @property
    def canvas_field(self) -> str:
        """The raster field whose (H, W) is the canvas: resolved by `bind` (else "image")."""
        return self.__dict__.get("_canvas_key") or self.canvas_key or IMAGE

    def reads(self) -> tuple[str, ...]:
        return (*self.inputs, self.canvas_field)

    def canvas_of(self, data: dict[str, Any], fields: Any = None) -> Canvas:
        x = data.get(self.canvas_field)
        if x is None:
            return None
        return [tuple(v.shape[-2:]) for v in x] if isinstance(x, list) else tuple(x.shape[-2:])


@dataclass(frozen=True)
class ClampBoundingBoxes(_OnCanvas):
    """Clip boxes to their image, [0, W] x [0, H] (torchvision's ``ClampBoundingBoxes``).

    Input/Output: boxes (N, 4) in their format, float32; a batch of them as a list or padded.
    The image (``canvas_key``, default the first image, mask or video field) is read for its
    size, not changed. Stage: batch (one kernel call over every box of the batch).
    """

    functional = S.clamp

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return S.clamp(x, **_meta(field, canvas_size))

    def apply_fields(self, data: dict[str, Any], params: Params, only: Any = None, canvas_size: Canvas = None) -> None:
        """Clamping is coordinate by coordinate: one call on a sample's (N, 4) or a padded (B, N, 4)
        (padding stays 0), one per sample where each has its own canvas (a list batch)."""
        b = self.binding
        canvas = canvas_size or self.canvas_of(data)
        for src, dst, ftype in zip(b.inputs, b.outputs, b.types):
            x = data[src]
            if isinstance(x, list) or isinstance(canvas, list):
                sizes = canvas if isinstance(canvas, list) else [canvas] * len(x)
                out = [self.transform(v, params, ftype, c) for v, c in zip(x, sizes)]
                data[dst] = type(x)(out) if isinstance(x, list) else torch.stack(out)
            else:
                data[dst] = self.transform(x, params, ftype, canvas)
            if dst != src and f"{src}_lengths" in data:
                data[f"{dst}_lengths"] = data[f"{src}_lengths"]


@dataclass(frozen=True)
class SanitizeBoundingBoxes(_OnCanvas):
    """Drop degenerate boxes and, with them, the same rows of every per-object field of the sample:
    class ids, masks per object, keypoints (torchvision's ``SanitizeBoundingBoxes``).

    A box is kept when its width and height are at least ``min_size``, its area at least
    ``min_area``, and no coordinate lies below 0 or past the image (clamp first with
    `ClampBoundingBoxes` to keep boxes that only cross the border); a box on an edge stays on it
    through every geometric op, and its xywh or cxcywh rounding is not taken for crossing it
    (`valid_boxes`). Run it after `RandomIoUCrop`, which marks the boxes it leaves out as all zeros.

    Which fields lose rows: ``labels`` names them (a name or a tuple; ``()`` for none). Left
    unset, every per-object field the pipeline declares: the source's keypoints and its fields
    typed ``mediapipe.fields.per_object(...)`` (class ids, one mask per object, iscrowd...), as
    torchvision's default ``labels_getter`` finds "labels". Unlike torchvision, keypoints lose
    their rows too: a keypoints field holds one row per object. A per-object field whose row
    count differs from the boxes' is a bad annotation of that sample (`DecodeError`).
    ``key`` names the boxes field when the sample has several.
    Input/Output: one sample's fields, or a batch of them as lists or padded (rows kept moved to
    the front, ``<field>_lengths`` updated). Stage: batch, unless a field it drops rows of
    batches stacked (equal counts): then per sample, before batching.
    Args:
        min_size: smallest width and height kept, in pixels, >= 1.
        min_area: smallest area kept, in square pixels, >= 1.
        labels: the per-object fields that follow the boxes; None: every one declared.
    """

    min_size: float = 1.0
    min_area: float = 1.0
    labels: str | tuple[str, ...] | None = None
    accepts = frozenset({BOXES})  # and the per-object fields `bind` finds

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        for arg in ("min_size", "min_area"):
            if not getattr(self, arg) >= 1:
                raise ValueError(f"{name}({arg}={getattr(self, arg)!r}): expected a value >= 1 (as torchvision)")
        if self.out is not None:
            raise ValueError(f"{name}(out={self.out!r}): it drops rows in place; out= is not supported")
        if isinstance(self.labels, str):
            object.__setattr__(self, "labels", (self.labels,))

    def bind(self, types: Mapping[str, FieldType], where: str = "") -> Op:
        name = f"{where}{type(self).__name__}"
        boxes = self.requested or tuple(f for f, t in types.items() if t.kind == BOXES)
        if len(boxes) != 1:
            raise PipelineError(f"{name} drops the objects of one boxes field: " + (
                f"name one with key=, of {list(boxes)}" if boxes else "there is none here"))
        box = boxes[0]
        if box not in types or types[box].kind != BOXES:
            raise PipelineError(f"{name}: field {box!r} is {types.get(box, 'not a field here')}, not boxes")
        if self.labels is None:
            rows = tuple(f for f, t in types.items() if t.rows_are_objects and t.kind != BOXES)
        else:
            rows = tuple(self.labels)
            for f in rows:
                if f not in types:
                    raise PipelineError(f"{name}(labels={self.labels!r}): no field {f!r}; fields here: {sorted(types)}")
                if not types[f].rows_are_objects or types[f].kind == BOXES:
                    raise PipelineError(
                        f"{name}(labels={self.labels!r}): field {f!r} is {types[f]}, not one row per object: "
                        "a source declares per-object fields in field_types() with mediapipe.fields.per_object()")
        inputs = (box, *rows)
        bound = bound_copy(self, Binding(inputs, inputs, tuple(types[f] for f in inputs)))
        return self._with_canvas(bound, types, where)

    def placement(self) -> Stage:
        stacked = any(t.batching == "stack" for t in self.binding.types)
        return Stage.SAMPLE if stacked else Stage.BATCH

    def apply_fields(self, data: dict[str, Any], params: Params, only: Any = None, canvas_size: Canvas = None) -> None:
        b = self.binding
        box = b.inputs[0]
        counts = R.row_counts(data[box], data.get(f"{box}_lengths"))
        for f in b.inputs[1:]:
            have = R.row_counts(data[f], data.get(f"{f}_lengths"))
            if not torch.equal(have, counts):
                raise ObjectCountError(f"{box!r} has {counts.tolist()} objects but {f!r} has {have.tolist()} rows: a "
                                       "per-object field holds one row per box (name those that do with labels=)")
        rows = R.flat_rows(data[box], data.get(f"{box}_lengths"))
        canvas = canvas_size or self.canvas_of(data)
        if isinstance(canvas, list):  # images of several sizes: each row gets its sample's
            canvas = torch.tensor(canvas, dtype=torch.float32).repeat_interleave(counts, dim=0)
        keep = O.valid_boxes(rows, canvas_size=canvas, format=b.types[0].format, min_size=self.min_size,
                             min_area=self.min_area)
        for f in b.inputs:
            data[f], lengths = R.keep_rows(data[f], keep, data.get(f"{f}_lengths"))
            if lengths is not None:
                data[f"{f}_lengths"] = lengths
