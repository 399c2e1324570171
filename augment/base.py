"""The op protocol: parameters drawn in one place, a pure kernel per field kind applies them.

An op is a frozen dataclass of its settings. ``sample_params`` draws one sample's parameters on
the CPU from a keyed `SampleRNG` (``meta["size"]`` is the (height, width) of the canvas the op
sees); ``transform`` runs the kernel for one field, chosen by the field's kind (see
`mediapipe.fields`), as torchvision v2's ``transform`` dispatches on the input's type. The base
class owns what every op shares:

* **Which fields.** ``keys`` names the fields the op transforms with one draw (a name or a tuple
  of names; ``key`` is the same for one name). Left unset, the pipeline gives the op every field
  of a kind it transforms: a geometric op moves the image, its mask, boxes, keypoints and video
  together, a colour op touches images and videos and leaves masks and boxes alone. ``out``
  names a new field per input (default: in place). An op outside a pipeline reads the field
  named after its first kind ("image", "video", "audio"). `bind` resolves this once, when the
  pipeline is built, and refuses a field whose kind the op has no kernel for
  (`mediapipe.augment.binding`).
* **One sample or a batch.** Kernels of a ``batched`` op take a batch (B, ...) with per-sample
  parameters stacked into tensors (B, ...); `apply` runs them on one sample as a batch of one
  when the op is placed in the sample stage, on a list of tensors sample by sample, and on
  boxes and keypoints as rows, one per object, each with its sample's parameters
  (`mediapipe.augment.params`).
* **The canvas.** Boxes and keypoints are in pixels of the image they are transformed with:
  `apply_fields` takes the canvas (H, W) from the op's raster inputs (image, mask, video), which
  must share one size, as torchvision's ``query_size`` requires.
* **Placement.** `placement` says where an op runs: per sample in the workers (``Stage.SAMPLE``:
  it changes a sample's shape, or reads files) or once per batch on the device (``Stage.BATCH``).

Adding an op: subclass `Op` as a frozen dataclass, validate the settings in ``__post_init__``
(the base checks every argument against its type annotation first), draw in `sample_params`,
and either set ``functional`` to a `Functional` table (one kernel per kind, see
`mediapipe.augment.functional.dispatch`) and call it in `transform`, or set ``accepts`` to the
kinds your single kernel takes. Adding a kind to an op: register a kernel for it in the op's
functional (``@register_kernel(hflip, "keypoints")``); the op transforms it from then on.
"""

from __future__ import annotations

import enum
import functools
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import torch

from mediapipe.arguments import conform, type_name
from mediapipe.augment.binding import Binding, bound_copy, resolve_binding
from mediapipe.augment.functional.dispatch import Functional
from mediapipe.augment.params import Params, expand_rows, is_single, promote, sample_slice
from mediapipe.augment.schedule import Schedule, is_schedule_config
from mediapipe.decoders.base import DecodeHint
from mediapipe.fields import AUDIO, FEATURES, IMAGE, KINDS, MASK, VIDEO, FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

Canvas = tuple[int, int] | list[tuple[int, int]] | None  # one (H, W), or one per sample of a list batch

_OPS: dict[str, type[Op]] = {}

# The kind an op outside a pipeline assumes, when it has several: images first.
_PREFERRED = (IMAGE, VIDEO, AUDIO, FEATURES, MASK, *KINDS)


class Stage(enum.Enum):
    """Where an op runs: per sample in a worker, or on whole batches on the device."""

    SAMPLE = "sample"
    BATCH = "batch"


class ArgumentError(TypeError, ValueError):
    """An op's argument of the wrong type (a TypeError, and a ValueError as range errors are)."""


class CanvasError(ValueError):
    """The raster fields of one draw differ in size (a mask that does not match its image)."""


class ObjectCountError(ValueError):
    """A sample's per-object fields hold different numbers of rows (3 boxes but 2 labels)."""


@dataclass(frozen=True)
class Op:
    """Base class of every augmentation op. Subclasses are registered by class name."""

    key: str | None = field(default=None, kw_only=True)
    keys: str | tuple[str, ...] | None = field(default=None, kw_only=True)
    out: str | tuple[str, ...] | None = field(default=None, kw_only=True)

    functional: ClassVar[Functional | None] = None  # kind -> kernel table (geometric ops)
    accepts: ClassVar[frozenset[str]] = frozenset({IMAGE, VIDEO})  # kinds of an op without a table
    batched: ClassVar[bool] = True  # kernels take a batch with stacked params (else one sample's)
    single_input: ClassVar[bool] = False  # transforms one field (audio ops: a field and its lengths)
    per_batch: ClassVar[bool] = False  # params drawn once per batch (MixUp), not per sample
    batch_only: ClassVar[bool] = False  # cannot run on a single sample (MixUp, CutMix)
    reads_canvas: ClassVar[bool] = False  # takes the canvas from an image it does not transform (ClampBoundingBoxes)
    schedulable: ClassVar[frozenset[str]] = frozenset()  # arguments that may follow the epoch (a `Schedule`)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_"):
            _OPS[cls.__name__] = cls
        if "__post_init__" in cls.__dict__:
            cls.__post_init__ = _unless_scheduled(cls.__dict__["__post_init__"])

    def __post_init__(self) -> None:
        if check_schedules(self):
            return
        check_arguments(self)
        name = type(self).__name__
        if self.key is not None and self.keys is not None:
            raise ValueError(f"{name}: give key= (one field) or keys= (one or more), not both")
        if isinstance(self.keys, str):
            object.__setattr__(self, "keys", (self.keys,))  # a name, not its letters
        if self.keys is not None and (not self.keys or len(set(self.keys)) != len(self.keys)):
            raise ValueError(f"{name}(keys={self.keys!r}): expected distinct field names")
        if isinstance(self.out, tuple) and len(self.out) == 1:
            object.__setattr__(self, "out", self.out[0])
        requested = self.requested
        if self.out is not None and requested is not None and len(self._out_names()) != len(requested):
            raise ValueError(f"{name}: out={self.out!r} must name one field per input {requested}")
        if self.single_input and requested is not None and len(requested) != 1:
            raise ValueError(f"{name}: one field per op (key=...), got keys={self.keys}")

    # -- fields -----------------------------------------------------------------------
    @property
    def requested(self) -> tuple[str, ...] | None:
        """The fields the user named (``keys``, or ``key``), or None: every field of a kind it transforms."""
        if self.keys is not None:
            return tuple(self.keys)
        return (self.key,) if self.key is not None else None

    def kinds(self) -> frozenset[str]:
        """The kinds this op transforms: its functional's kernels, else ``accepts``."""
        return self.functional.kinds if self.functional is not None else self.accepts

    def refuses(self, field_type: FieldType) -> str | None:
        """Why this op cannot transform a field of this type with its settings, or None."""
        if field_type.kind not in self.kinds():
            return f"it transforms {sorted(self.kinds())} fields"
        return None

    def output_type(self, field_type: FieldType) -> FieldType:
        """The type of what the op writes for an input of ``field_type`` (the same, unless it
        turns one kind into another: audio into features)."""
        return field_type

    @property
    def binding(self) -> Binding:
        """The fields this op transforms: resolved by `bind`, or for an op outside a pipeline the
        named fields (else the field named after its first kind), each of that kind."""
        bound = self.__dict__.get("_binding")
        if bound is not None:
            return bound
        kind = self.primary_kind()
        inputs = self.requested or (kind,)
        return Binding(inputs, self._out_names() or inputs, tuple(FieldType(kind) for _ in inputs))

    @property
    def inputs(self) -> tuple[str, ...]:
        """The fields this op transforms."""
        return self.binding.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        """The fields this op writes, one per input."""
        return self.binding.outputs

    def reads(self) -> tuple[str, ...]:
        """Every field the op needs (inputs, plus e.g. ``label`` for MixUp)."""
        return self.inputs

    def writes(self) -> tuple[str, ...]:
        return self.outputs

    def primary_kind(self) -> str:
        kinds = self.kinds()
        return next(k for k in _PREFERRED if k in kinds) if kinds else IMAGE

    def _out_names(self) -> tuple[str, ...] | None:
        if self.out is None:
            return None
        return (self.out,) if isinstance(self.out, str) else tuple(self.out)

    def bind(self, types: Mapping[str, FieldType], where: str = "") -> Op:
        """A copy of this op that knows its fields, for a pipeline whose fields here have ``types``
        (`resolve_binding`). Raises `PipelineError` naming the op, the field and its kind for a
        field it cannot transform."""
        return bound_copy(self, resolve_binding(self, types, where))

    # -- placement ----------------------------------------------------------------------
    def placement(self) -> Stage:
        """Where this op runs: an op with batched kernels once per batch (the pipeline moves it to
        the sample stage when a later sample-stage op reads what it writes), else per sample."""
        return Stage.BATCH if self.batched else Stage.SAMPLE

    # -- parameters -------------------------------------------------------------------
    def draws_on(self) -> tuple[str, ...]:
        """Fields whose values this op's draw reads, besides the canvas size (RandomIoUCrop: the
        boxes). The sample stage hands them to `sample_params` as ``meta["fields"]``."""
        return ()

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        """Draw this sample's parameters. ``meta["size"]`` is the (height, width) the op will see;
        ``meta["fields"]`` holds the fields `draws_on` names."""
        return {}

    def batch_params(self, rng: SampleRNG, batch_size: int) -> Params:
        """Draw parameters once per batch (only for ``per_batch`` ops)."""
        return {}

    # -- application ------------------------------------------------------------------
    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: tuple[int, int] | None
                  ) -> torch.Tensor:
        """The kernel for one field of kind ``field.kind``: a batch with stacked params for a
        ``batched`` op (rows and per-row params for boxes and keypoints), else one sample."""
        raise NotImplementedError(f"{type(self).__name__}.transform")

    def apply(self, x: Any, params: Params, field: FieldType | str | None = None, canvas_size: Canvas = None,
              lengths: torch.Tensor | None = None) -> Any:
        """One field through the kernel of its kind: one sample or a batch, a tensor or a list of
        them; ``lengths`` for a padded boxes or keypoints batch. ``canvas_size``: the (H, W) of the
        image it is drawn on (boxes, keypoints), one per sample for a list."""
        ftype = FieldType(field or self.primary_kind()) if not isinstance(field, FieldType) else field
        if not self.batched:
            return self.transform(x, params, ftype, _one_canvas(canvas_size, 0))
        if isinstance(x, list):
            return self._apply_list(x, params, ftype, canvas_size)
        if ftype.spec.is_objects:
            return self._apply_rows(x, params, ftype, canvas_size, lengths)
        if is_single(params):
            xb, pb = promote(x, params)
            return self.transform(xb, pb, ftype, canvas_size)[0]
        return self.transform(x, params, ftype, canvas_size)

    def apply_fields(self, data: dict[str, Any], params: Params, only: Collection[str] | None = None,
                     canvas_size: Canvas = None) -> None:
        """Apply to every input field (those in ``only``, when given) with the same params, writing
        the outputs. ``canvas_size``: where the op's draw was made (a decoder did part of it), else
        taken from the raster inputs here. Ops that read several fields override."""
        b = self.binding
        todo = [f for f in b.inputs if only is None or f in only]
        if canvas_size is None:
            canvas_size = self.canvas_of(data, todo)
        for src in todo:
            dst, ftype = b.outputs[b.inputs.index(src)], b.type_of(src)
            lengths = data.get(f"{src}_lengths") if ftype.spec.is_objects else None
            data[dst] = self.apply(data[src], params, ftype, canvas_size, lengths)
            if lengths is not None and dst != src:
                data[f"{dst}_lengths"] = lengths

    def canvas_of(self, data: dict[str, Any], fields: Collection[str] | None = None) -> Canvas:
        """The (H, W) shared by the raster fields among ``fields`` (default: the inputs), one per
        sample for lists; None when there is none. `CanvasError` when they differ."""
        sizes = self.raster_sizes(data, fields)
        if not sizes:
            return None
        stacked = next((s for s in sizes.values() if not isinstance(s, list)), None)
        lists = [s for s in sizes.values() if isinstance(s, list)]
        if stacked is not None and lists:  # a stacked image with a list field (one mask per object each)
            sizes = {f: s if isinstance(s, list) else [s] * len(lists[0]) for f, s in sizes.items()}
        first = next(iter(sizes.values()))
        if any(s != first for s in sizes.values()):
            raise CanvasError(f"{type(self).__name__} draws once for {list(self.inputs)}, but their sizes differ: "
                              + ", ".join(f"{f} {s}" for f, s in sizes.items()))
        return stacked if stacked is not None else first  # one size for every sample where one is stacked

    def raster_sizes(self, data: dict[str, Any], fields: Collection[str] | None = None) -> dict[str, Any]:
        """field -> (H, W) (a list of them for a list batch) of the raster inputs among ``fields``."""
        b = self.binding
        sizes: dict[str, Any] = {}
        for f in fields if fields is not None else b.inputs:
            if f in b.inputs and b.type_of(f).spec.has_canvas and f in data:
                x = data[f]
                sizes[f] = [tuple(v.shape[-2:]) for v in x] if isinstance(x, list) else tuple(x.shape[-2:])
        return sizes

    def _apply_list(self, xs: list, params: Params, ftype: FieldType, canvas: Canvas) -> list:
        """A list batch (one tensor per sample): each sample through the kernel as a batch of one."""
        out = []
        for i, x in enumerate(xs):
            one = sample_slice(params, i)
            c = _one_canvas(canvas, i)
            if ftype.spec.is_objects:
                out.append(self.transform(x, expand_rows(one, torch.zeros(x.shape[0], dtype=torch.int64)), ftype, c))
            else:
                out.append(self.transform(x[None], one, ftype, c)[0])
        return out

    def _apply_rows(self, x: torch.Tensor, params: Params, ftype: FieldType, canvas: Canvas,
                    lengths: torch.Tensor | None) -> torch.Tensor:
        """Boxes or keypoints of one sample (N, ...) or a padded batch (B, N, ...) with ``lengths``:
        the kernel sees the valid rows, each with its sample's parameters; padding stays zero."""
        if is_single(params):
            _, pb = promote(x, params)
            return self.transform(x, expand_rows(pb, torch.zeros(x.shape[0], dtype=torch.int64)), ftype, canvas)
        if isinstance(canvas, list):  # images of several sizes (a list batch): sample by sample
            n = lengths.tolist() if lengths is not None else [x.shape[1]] * x.shape[0]
            out = torch.zeros_like(x)
            for i, c in enumerate(canvas):
                rows = self._apply_list([x[i, : n[i]]], sample_slice(params, i), ftype, [c])[0]
                out[i, : n[i]] = rows.to(x.dtype)
            return out
        if lengths is None:  # a stacked batch (B, N, ...): every row is valid
            lengths = torch.full((x.shape[0],), x.shape[1], dtype=torch.int64)
        lengths = lengths.to(x.device)
        valid = torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]
        sample = torch.arange(x.shape[0], device=x.device).repeat_interleave(lengths)
        out = torch.zeros_like(x)
        out[valid] = self.transform(x[valid], expand_rows(params, sample), ftype, canvas).to(x.dtype)
        return out

    # -- fusion with the decoder (sample-stage geometry) --------------------------------
    def fusable(self, field_type: FieldType) -> bool:
        """Whether the decoder of a field of this type may do this op's work through `decode_hint`."""
        return type(self).decode_hint is not Op.decode_hint

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint | None:
        """A hint that lets the decoder do (part of) this op's work, or None."""
        return None

    def apply_decoded(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        """Finish the op on what a decoder returned for `decode_hint`."""
        return self.apply(x, params)

    def apply_decoded_batch(self, xs: list[torch.Tensor], params: list[Params]) -> torch.Tensor | None:
        """`apply_decoded` of a batch decoded on the device at once, as one (B, ...) tensor in a
        few batched calls; None where this op finishes each sample on its own."""
        return None

    # -- fusion with the batch op before it (CPU) ----------------------------------------
    def absorbs(self, before: Op) -> bool:
        """Whether this op can do ``before``'s work on its own inputs while it writes its output, as
        DALI's CropMirrorNormalize mirrors while it normalises: one pass over the batch fewer.
        ``before`` still runs on its other inputs."""
        return False

    def apply_absorbing(self, x: torch.Tensor, params: Params, before: Op, before_params: Params) -> torch.Tensor:
        """``self.apply(before.apply(x, before_params), params)`` in one pass (see `absorbs`)."""
        return self.apply(before.apply(x, before_params), params)

    # -- the epoch ----------------------------------------------------------------------
    @property
    def scheduled(self) -> bool:
        """Whether an argument follows the epoch (a `Schedule`), here or in an op this one holds."""
        return any(_is_scheduled(getattr(self, f.name)) for f in fields(self))

    def at_epoch(self, epoch: int) -> Op:
        """This op with each `Schedule` argument replaced by its value at ``epoch`` (the ops it
        holds too), bound to the same fields; the op itself when nothing follows the epoch."""
        changes = {f.name: _value_at(getattr(self, f.name), epoch) for f in fields(self)
                   if f.init and _is_scheduled(getattr(self, f.name))}
        if not changes:
            return self
        resolved = replace(self, **changes)
        bound = self.__dict__.get("_binding")
        return bound_copy(resolved, bound) if bound is not None else resolved

    # -- config -----------------------------------------------------------------------
    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"op": type(self).__name__}
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                config[f.name] = _to_list(value)
        return config


def _to_list(value: Any) -> Any:
    if isinstance(value, Schedule):
        return value.to_config()
    return [_to_list(v) for v in value] if isinstance(value, tuple) else value


# -- schedules ------------------------------------------------------------------------------------
def _is_scheduled(value: Any) -> bool:
    """A `Schedule`, or an op (or a tuple of them: a composite's) with one."""
    if isinstance(value, Schedule):
        return True
    if isinstance(value, Op):
        return value.scheduled
    return isinstance(value, (tuple, list)) and any(_is_scheduled(v) for v in value)


def _value_at(value: Any, epoch: int) -> Any:
    if isinstance(value, Schedule):
        return value.at(epoch)
    if isinstance(value, Op):
        return value.at_epoch(epoch)
    return type(value)(_value_at(v, epoch) for v in value)


def _unless_scheduled(post_init: Any) -> Any:
    """A subclass's ``__post_init__``, run on concrete arguments only: an op with a `Schedule`
    argument is checked by `check_schedules`, which makes one op per step of the schedule."""
    @functools.wraps(post_init)
    def checked(self: Op) -> None:
        if not check_schedules(self):
            post_init(self)

    return checked


def check_schedules(op: Op) -> bool:
    """For an op with `Schedule` arguments: refuse one its class does not let follow the epoch, and
    check the op at every step of each schedule as it checks fixed arguments, naming the op, the
    argument and the epoch; the other arguments are then normalised as that check normalises them.
    Returns whether the op has a schedule (then nothing else is left to check)."""
    scheduled = {f.name: getattr(op, f.name) for f in fields(op) if isinstance(getattr(op, f.name), Schedule)}
    if not scheduled:
        return False
    name = type(op).__name__
    for arg, schedule in scheduled.items():
        if arg not in op.schedulable:
            can = f"arguments that can: {sorted(op.schedulable)}" if op.schedulable else "none of its arguments can"
            raise ArgumentError(f"{name}({arg}={schedule!r}): {arg} cannot follow the epoch ({can})")
    first = None
    for epoch in sorted({e for s in scheduled.values() for e in s.epochs}):
        values = {arg: s.at(epoch) for arg, s in scheduled.items()}
        try:
            concrete = replace(op, **values)
        except (TypeError, ValueError) as err:
            args = ", ".join(f"{a}={s!r}" for a, s in scheduled.items())
            raise ArgumentError(f"{name}({args}): at epoch {epoch}, {err}") from None
        first = concrete if first is None else first
    for f in fields(op):
        if f.name not in scheduled:
            object.__setattr__(op, f.name, getattr(first, f.name))
    return True


def scheduled_arguments(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """Op ``name``'s config values with each `Schedule.to_config` dict turned back into a `Schedule`."""
    out = dict(config)
    for arg, value in config.items():
        if is_schedule_config(value):
            try:
                out[arg] = Schedule.from_config(value)
            except ValueError as err:
                raise ArgumentError(f"{name}({arg}={value!r}): {err}") from None
    return out


def _one_canvas(canvas: Canvas, i: int) -> tuple[int, int] | None:
    return canvas[i] if isinstance(canvas, list) else canvas


# -- argument checks ------------------------------------------------------------------------------
def check_probability(op: Op, p: float, name: str = "p") -> None:
    """Reject a probability outside [0, 1], naming the op, the argument and the value."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{type(op).__name__}({name}={p}): expected 0 <= {name} <= 1")


def check_choice(op: Op, name: str, value: Any, choices: Collection[Any]) -> None:
    """Reject a value that is not one of ``choices``, naming the op and the argument."""
    if value not in choices:
        raise ValueError(f"{type(op).__name__}({name}={value!r}): expected one of {tuple(choices)}")


def check_positive(op: Op, **values: float | None) -> None:
    """Reject a value that is not > 0 (None passes), naming the op and the argument."""
    for name, value in values.items():
        if value is not None and not value > 0:
            raise ValueError(f"{type(op).__name__}({name}={value!r}): expected a value > 0")


def check_range(op: Op, name: str, value: tuple[float, float], low: float = float("-inf"),
                high: float = float("inf"), strict_low: bool = False) -> None:
    """Reject a (low, high) pair that is reversed or leaves [low, high] (low excluded when strict)."""
    a, b = value
    ok = (a > low if strict_low else a >= low) and a <= b <= high
    if not ok:
        bound = f"{low} < low" if strict_low else f"{low} <= low"
        raise ValueError(f"{type(op).__name__}({name}={value!r}): expected {bound} <= high <= {high}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def check_arguments(op: Op) -> None:
    """Check every argument against its annotation (int is not float, a string is not a tuple),
    turning lists into tuples and an enum into its value; a TypeError names the op, the argument, the value and the type."""
    hints = _hints(type(op))
    for f in fields(op):
        value = getattr(op, f.name)
        tp = hints.get(f.name, Any)
        ok, fixed = conform(value, tp)
        if not ok and isinstance(value, enum.Enum):  # torchvision's InterpolationMode, AutoAugmentPolicy
            ok, fixed = conform(value.value, tp)
        if not ok:
            raise ArgumentError(f"{type(op).__name__}({f.name}={value!r}): expected {type_name(tp)}")
        if fixed is not value:
            object.__setattr__(op, f.name, fixed)


# -- config -------------------------------------------------------------------------------------
def op_from_config(config: dict[str, Any]) -> Op:
    """Rebuild an op from `Op.to_config`'s dict."""
    config = dict(config)
    name = config.pop("op")
    if name not in _OPS:
        raise ValueError(f"unknown op {name!r}; known: {sorted(_OPS)}")
    return _OPS[name](**scheduled_arguments(name, config))


def registered_ops() -> dict[str, type[Op]]:
    return dict(_OPS)
