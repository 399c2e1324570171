"""Which fields a placed op transforms: `Binding` (its inputs, one output each, their types), and
`resolve_binding`, which finds them for the field types of a pipeline: the fields the user named,
or every field of a kind the op transforms. A field of a kind the op has no kernel for is refused
there, when the pipeline is built, naming the op, the field and its kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from mediapipe.errors import PipelineError
from mediapipe.fields import OTHER, FieldType

if TYPE_CHECKING:
    from mediapipe.augment.base import Op

BoundOp = TypeVar("BoundOp", bound="Op")


@dataclass(frozen=True)
class Binding:
    """The fields a placed op transforms: its inputs, one output each, and the inputs' types."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    types: tuple[FieldType, ...]

    def type_of(self, name: str) -> FieldType:
        return self.types[self.inputs.index(name)]


def resolve_binding(op: Op, types: Mapping[str, FieldType], where: str = "") -> Binding:
    """The fields ``op`` transforms in a pipeline whose fields here have ``types``. Raises
    `PipelineError` naming the op, the field and its kind for a field it cannot transform."""
    name = f"{where}{type(op).__name__}"
    inputs = op.requested or _fields_of_its_kinds(op, types, name)
    for f in inputs:
        if f in types and (why := op.refuses(types[f])) is not None:
            raise PipelineError(f"{name} cannot transform field {f!r} of kind {types[f]}: {why}")
    objects = [f for f in inputs if f in types and types[f].spec.is_objects]
    if objects and not any(types[f].spec.has_canvas for f in inputs if f in types) and not op.reads_canvas:
        raise PipelineError(f"{name} moves {objects} but no image, mask or video: boxes and keypoints are in "
                            "pixels of the image they move with, so list that image in keys too")
    outputs = op._out_names() or inputs
    if len(outputs) != len(inputs):
        raise PipelineError(f"{name}: out={op.out!r} names {len(outputs)} fields for the {len(inputs)} "
                            f"it transforms {list(inputs)}: name them with keys=")
    default = FieldType(op.primary_kind())
    return Binding(inputs, outputs, tuple(types.get(f, default) for f in inputs))


def _fields_of_its_kinds(op: Op, types: Mapping[str, FieldType], name: str) -> tuple[str, ...]:
    """Every field of a kind ``op`` transforms, for an op given no ``keys``."""
    inputs = tuple(n for n, t in types.items() if t.kind in op.kinds())
    if not inputs:
        raise PipelineError(f"{name} has no field to transform: it transforms {sorted(op.kinds())} "
                            f"fields; fields here: {_describe(types)}")
    if op.single_input and len(inputs) > 1:
        raise PipelineError(f"{name} transforms one field, and {list(inputs)} are of kinds it takes: "
                            "name one with key=")
    return inputs


def bound_copy(op: BoundOp, binding: Binding) -> BoundOp:
    """A shallow copy of a frozen op (its settings are immutable) that knows its fields."""
    new = object.__new__(type(op))
    new.__dict__.update(op.__dict__)
    object.__setattr__(new, "_binding", binding)
    return new


def _describe(types: Mapping[str, FieldType]) -> str:
    return ", ".join(f"{n} ({t})" for n, t in types.items() if t.kind != OTHER) or "none"
