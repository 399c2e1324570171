"""The compiled pipeline: every field's type, decoders per field, ops in order bound to their
fields with their stage, and what is fused.

Types: the decoders declare the kinds of what they decode, the source those of its fields
(``label``, and e.g. boxes through a ``field_types()`` method), and each op the kinds of
what it writes, so every field's `FieldType` is known here, before anything is read. Each op
is bound to its fields (`Op.bind`): an op without ``keys`` gets every field of a kind it
transforms, and a field of a kind it has no kernel for is refused here, naming the op, the
field and its kind.

Placement: an op runs in the *sample* stage when `Op.placement` says so (it changes a
sample's shape, or reads files), or when a later sample-stage op reads a field it writes;
everything else runs once per batch on the device. The first op to read a decoded field is
fused into the decoder when it offers a `DecodeHint` (region of interest, DCT-scaled size,
frame indices). A `Plan` is fixed once built; the stages that run it live in
`sample_stage`, `batch_builder` and `batch_stage`.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mediapipe.augment.base import Op, Stage
from mediapipe.decoders.base import Decoder, Limits
from mediapipe.decoders.spec import DecoderSpec
from mediapipe.errors import PipelineError
from mediapipe.fields import LABEL, MASK, OBJECTS, OTHER, FieldType, field_type
from mediapipe.loaders.sources.folder import Source, check_hooks
from mediapipe.options import ON_ERROR, OnError, Where
from mediapipe.sample import Blob, SampleRef
from mediapipe.stages.error_policy import ErrorPolicy
from mediapipe.torchvision_names import not_an_op_hint

if TYPE_CHECKING:
    from mediapipe.stages.epoch_cache import CacheBinding, EpochCache


@dataclass(frozen=True)
class BatchField:
    """A field every batch of a plan holds, and where it comes from: a decoder ("decoder"), a
    decoder's side value ``<field>_<side>`` ("side"), the lengths of a pad-collated field
    ``<field>_lengths`` ("lengths"), or an op that writes a new field ("op")."""

    name: str
    origin: str
    field: str | None = None  # the decoded field a side or lengths field belongs to


@dataclass(frozen=True)
class PlacedOp:
    """An op bound to its fields, with its stage (per sample or per batch) and where it runs: a
    sample-stage op in the workers, or on the device after a device decode it reads from; a
    batch-stage op on the device (or in the workers for a CPU device, the loader's choice)."""

    index: int  # position in the user's list: the op's RNG key
    op: Op  # bound to its fields
    stage: Stage
    where: Where = "worker"

    @property
    def size_field(self) -> str:
        """The field whose (H, W) the op's draws see: its first raster input (the canvas), else its first."""
        b = self.op.binding
        return next((f for f, t in zip(b.inputs, b.types) if t.spec.has_canvas), b.inputs[0])


def decode_order(decode: dict[str, DecoderSpec], device_fields: set[str]) -> list[tuple[int, str]]:
    """(index in ``decode``, field) in decoding order: a field read ``from_field`` another comes
    after it, so the worker hands it that field's time spans. The index stays each field's RNG key."""
    order: list[tuple[int, str]] = []
    placed: set[str] = set()
    pending = list(enumerate(decode))
    while pending:
        ready = [(i, n) for i, n in pending if decode[n].from_field is None or decode[n].from_field in placed]
        if not ready:
            name = pending[0][1]
            source = decode[name].from_field
            if source not in decode:
                raise PipelineError(f"decode[{name!r}] reads from_field={source!r}, which is not a decoded field; "
                                    f"fields: {sorted(decode)}")
            raise PipelineError(f"decode[{name!r}]: from_field makes a cycle through {source!r}")
        for i, name in ready:
            source = decode[name].from_field
            if source is not None and source in device_fields:
                raise PipelineError(f"decode[{name!r}] reads from_field={source!r}, which the device decodes: "
                                    "its time spans are not known in the workers; decode it in the workers")
            order.append((i, name))
            placed.add(name)
        pending = [p for p in pending if p not in ready]
    return order


def _check_settings(seed: int, limits: Limits) -> None:
    """The seed (every draw's key) and the decoders' limits, checked once here: a float seed drew as
    its integer part, a limit of 0, below it or NaN refused (or let through) every file at decode time."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise PipelineError(f"seed={seed!r}: expected an int")
    for name in ("max_pixels", "max_frames"):
        value = getattr(limits, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
            raise PipelineError(f"{name}={value!r}: expected an int >= 1 or None (None: no limit)")
    seconds = limits.max_duration
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float, np.number))
                                or not 0 < seconds < math.inf):
        raise PipelineError(f"max_duration={seconds!r}: expected positive seconds or None (None: no limit)")


class Plan:
    """A validated pipeline: field types, decoders per field, ops bound to their fields in order with
    their stage, fusions, the fields decoded on the device, and the batch ops another one absorbs.
    Pickles (to workers) without its live decoders, which each process creates for itself.

    ``collate``: field -> "stack", "pad" or "list", overriding the field type's default (see
    `mediapipe.fields`)."""

    def __init__(
        self,
        source: Source,
        decode: dict[str, DecoderSpec],
        ops: list[Op],
        *,
        seed: int,
        on_error: OnError = "raise",
        limits: Limits = Limits(),
        device: torch.device | None = None,
        collate: dict[str, str] | None = None,
    ) -> None:
        if not decode:
            raise PipelineError("decode: name at least one field, e.g. {'image': mp.decoders.image()}")
        if not isinstance(source, Source):
            raise PipelineError(f"source {type(source).__name__}: expected a mediapipe.loaders.Source (subclass it: "
                                "it declares the optional hooks a source may override, with their defaults)")
        check_hooks(source)
        if on_error not in ON_ERROR:
            raise PipelineError(f"on_error={on_error!r}: expected one of {ON_ERROR}")
        _check_settings(seed, limits)
        self.source, self.decode = source, dict(decode)
        self.seed, self.on_error, self.limits = seed, on_error, limits
        self.device = device if device is not None else torch.device("cpu")
        self.collate_policy = dict(collate or {})
        self.error_policy = ErrorPolicy(on_error, len(source), seed)  # what a failed sample becomes, in every stage
        self.base_types = self._base_types()
        self.ops, self.types = self._bind(list(ops))
        # the source's fields of one row per object (boxes, keypoints, class ids...), checked per sample
        self.object_fields = tuple(n for n, t in self.base_types.items() if t.rows_are_objects and t.kind != MASK)
        self.placed = self._place()
        self.device_fields = self._place_on_device()
        self.fused = self._fusions()
        self.shape_source = self._shape_sources()
        self.absorbed = self._absorptions()
        self.done_by_next = {before.index for before in self.absorbed.values()}
        self.decode_order = decode_order(self.decode, self.device_fields)
        self.cache: CacheBinding | None = None  # a loader's epoch cache (`with_cache`)
        self._decoders: dict[str, Decoder] | None = None
        self._device_decoders: dict[str, Decoder] | None = None
        self.scheduled = any(op.scheduled for op in self.ops)  # an argument follows the epoch (`at_epoch`)
        self.epoch: int | None = None  # the epoch a plan `at_epoch` made is resolved for
        self._base: Plan | None = None  # the plan it was resolved from: its live decoders serve it too
        self._epochs: dict[int, Plan] = {}

    def with_cache(self, cache: EpochCache) -> Plan:
        """A copy of this plan whose sample stage keeps its decoded images in ``cache``
        (`mediapipe.stages.epoch_cache`); refused (`PipelineError`) for a plan it cannot keep."""
        cached = copy.copy(self)
        cached.cache = cache.bind(self)
        cached._decoders = cached._device_decoders = None
        cached._epochs = {}
        return cached

    # -- the epoch ----------------------------------------------------------------------
    def at_epoch(self, epoch: int) -> Plan:
        """This plan with every `Schedule` argument of its ops at its value for ``epoch`` (made once
        per epoch and kept); the plan itself when no argument follows the epoch. Every stage that
        knows a batch's epoch runs the plan this returns."""
        if self._base is not None:
            return self if epoch == self.epoch else self._base.at_epoch(epoch)
        if not self.scheduled:
            return self
        plan = self._epochs.get(epoch)
        if plan is None:
            plan = self._resolved(epoch)
            kept = dict(list(self._epochs.items())[-3:])  # a few: a pass's epoch, the next one's (prefetch)
            kept[epoch] = plan
            self._epochs = kept  # one assignment: thread workers may resolve an epoch at once
        return plan

    def _resolved(self, epoch: int) -> Plan:
        """A copy whose ops (and their placed, fused and absorbed entries) hold ``epoch``'s values;
        types, placement and fusion do not change with an argument's value, so they are kept."""
        plan = copy.copy(self)
        plan.ops = [op.at_epoch(epoch) for op in self.ops]
        plan.placed = [replace(p, op=plan.ops[p.index]) for p in self.placed]
        by_index = {p.index: p for p in plan.placed}
        plan.fused = {name: by_index[p.index] for name, p in self.fused.items()}
        plan.absorbed = {after: by_index[p.index] for after, p in self.absorbed.items()}
        plan.scheduled, plan.epoch, plan._base, plan._epochs = False, epoch, self, {}
        plan._decoders = plan._device_decoders = None
        if self.cache is not None and any(self.ops[i].scheduled for i in self.cache.prefix):
            plan.cache = self.cache.cache.bind(plan, epoch=True)  # keyed by the stored ops at this epoch's values
        return plan

    # -- the fields of a batch -----------------------------------------------------------
    def batch_fields(self) -> list[BatchField]:
        """The fields every batch holds besides the source's (`SampleStage.source_fields`) and ``valid``
        (present when the sampler may pad, a batch is padded, or under ``on_error="replace"``):
        each decoded field with its side fields and lengths, then the new fields ops write.
        Every backend delivers these."""
        out = []
        for name, spec in self.decode.items():
            out.append(BatchField(name, "decoder"))
            out += [BatchField(f"{name}_{side}", "side", name) for side in spec.side_fields]
            if self.collate_of(name)[0] == "pad":
                out.append(BatchField(f"{name}_lengths", "lengths", name))
        known = {f.name for f in out} | set(self.base_types)  # a field an op rewrites keeps its origin
        for p in self.placed:
            lengths = {f"{name}_lengths": name for name in p.op.outputs}  # an audio op's new field's lengths
            for name in p.op.writes():
                if name not in known:
                    out.append(BatchField(name, "lengths", lengths[name]) if name in lengths else BatchField(name, "op"))
                    known.add(name)
        return out

    def collate_policies(self) -> dict[str, tuple[str, int]]:
        """How each field a sample starts with batches (`collate_of`): the decoders', the
        source's declared ones (boxes as lists, token ids padded), ``collate=`` overrides."""
        return {name: self.collate_of(name) for name in self.base_types}

    def blob(self, ref: SampleRef, name: str) -> Blob:
        """The blob decoded field ``name`` reads: its own (a manifest's ``"mask"`` column), or
        that of the field it is read ``from_field``."""
        source = self.decode[name].from_field
        return ref.blob(self.decode[source].kind, source) if source else ref.blob(self.decode[name].kind, name)

    # -- compile ------------------------------------------------------------------------
    def _base_types(self) -> dict[str, FieldType]:
        """The type of every field a sample has before the ops: decoded fields (in ``decode``'s
        order, which is the order an op without keys lists them in), the source's, side fields."""
        types: dict[str, FieldType] = {name: spec.field_type for name, spec in self.decode.items()}
        for name, t in self.source.field_types().items():
            types.setdefault(name, field_type(t))
        for name, policy in self.source.collate.items():  # e.g. token ids: "pad"
            types[name] = types.get(name, FieldType(OTHER)).with_collate(policy)
        types.setdefault("label", FieldType(LABEL))
        types.setdefault("index", FieldType(OTHER))
        for name, policy in self.collate_policy.items():
            if name not in types:
                raise PipelineError(f"collate[{name!r}]: no decoder or source gives a field {name!r}; "
                                    f"fields: {sorted(types)}")
            try:
                types[name] = types[name].with_collate(policy)
            except ValueError as err:
                raise PipelineError(f"collate[{name!r}]: {err}") from None
        for name, spec in self.decode.items():
            types.update({f"{name}_{side}": FieldType(OTHER) for side in spec.side_fields})
        for name, t in list(types.items()):
            if t.batching == "pad":
                types.setdefault(f"{name}_lengths", FieldType(OTHER))
        return types

    def _bind(self, ops: list[Op]) -> tuple[list[Op], dict[str, FieldType]]:
        """Each op bound to its fields, checked against the fields and kinds it reads; and the type
        of every field once all ops ran."""
        types = dict(self.base_types)
        bound: list[Op] = []
        for i, op in enumerate(ops):
            if not isinstance(op, Op):
                raise PipelineError(f"augment[{i}] is {op!r}, not an op{not_an_op_hint(op)}")
            op = op.bind(types, where=f"augment[{i}] ")
            missing = [f for f in op.reads() if f not in types]
            if missing:
                raise PipelineError(
                    f"augment[{i}] {type(op).__name__} reads {missing}, which no decoder or earlier op "
                    f"produces; fields here: {sorted(types)}"
                )
            b = op.binding
            self._check_moves_everything(op, types, i)
            for dst, t in zip(b.outputs, b.types):
                types[dst] = op.output_type(t)
            for name in op.writes():
                types.setdefault(name, FieldType(OTHER))
            bound.append(op)
        return bound, types

    @staticmethod
    def _check_moves_everything(op: Op, types: dict[str, FieldType], index: int) -> None:
        """A geometric op that moves pixels in place must move the masks, boxes and keypoints of
        the sample with them: left behind, they would silently stop matching the image. An op
        that mixes samples (MixUp, CutMix) cannot mix them at all, so it refuses to mix in place
        pixels that have them."""
        b = op.binding
        geometric = OBJECTS <= op.kinds()
        moved = [f for f, dst in zip(b.inputs, b.outputs) if f == dst and b.type_of(f).spec.has_canvas]
        if not (geometric or op.batch_only) or not moved:
            return
        left = [f for f, t in types.items() if t.kind in OBJECTS | {MASK} and f not in b.inputs]
        if left and op.batch_only:
            name = type(op).__name__
            raise PipelineError(
                f"augment[{index}] {name} mixes {moved} with other samples of the batch, but {left} are drawn on "
                f"them and cannot be mixed (a blended mask, or the objects of two images in one, have no meaning "
                f"{name} could give them): write the mixed pixels to a new field with out=, or leave {name} out of "
                "a detection or segmentation pipeline"
            )
        if left:
            raise PipelineError(
                f"augment[{index}] {type(op).__name__} moves {moved} but not {left}, which are drawn on it: leave "
                f"keys unset (every spatial field moves with one draw), add them to keys, or write the moved "
                f"pixels to a new field with out="
            )

    def collate_of(self, name: str) -> tuple[str, int]:
        """How field ``name`` batches: ("stack" | "pad" | "list", the axis "pad" pads)."""
        t = self.base_types.get(name)
        if t is None:
            return "stack", -1
        return t.batching, t.spec.pad_axis

    def _place(self) -> list[PlacedOp]:
        placed: list[PlacedOp] = []
        needed_in_samples: set[str] = set()
        for i in reversed(range(len(self.ops))):
            op = self.ops[i]
            sample = op.placement() is Stage.SAMPLE or bool(set(op.writes()) & needed_in_samples)
            if sample and op.batch_only:
                raise PipelineError(
                    f"augment[{i}] {type(op).__name__} works on whole batches, but a later sample-stage op "
                    f"reads {sorted(set(op.writes()) & needed_in_samples)}: move it after that op"
                )
            if sample:
                needed_in_samples |= set(op.reads())
            placed.append(PlacedOp(i, op, Stage.SAMPLE if sample else Stage.BATCH))
        return placed[::-1]

    def _fusions(self) -> dict[str, PlacedOp]:
        fused = {}
        for name in self.decode:
            for p in self.placed:
                if name in p.op.reads():
                    if (p.stage is Stage.SAMPLE and p.op.fusable(self.base_types[name])
                            and p.op.reads() == p.op.inputs):
                        fused[name] = p
                    break
        return fused

    def _shape_sources(self) -> dict[str, str]:
        """For each field an op writes, the field whose sample-stage shape it has."""
        source = {f: f for f in self.base_types}
        for p in self.placed:
            for src, dst in zip(p.op.inputs, p.op.outputs):
                if p.stage is Stage.BATCH and dst not in source:
                    source[dst] = source.get(src, src)
                elif p.stage is Stage.SAMPLE:
                    source[dst] = dst
        return source

    def _place_on_device(self) -> set[str]:
        """Fields decoded on the device (and what sample-stage ops derive from them); the
        sample-stage ops that read them are placed on the device, after the decode."""
        on_device = {name for name, spec in self.decode.items() if spec.placement(self.device) == "device"}
        placed = []
        for p in self.placed:
            there = p.stage is Stage.BATCH or bool(set(p.op.reads()) & on_device)
            if p.stage is Stage.SAMPLE and there:
                on_device |= set(p.op.writes())
            placed.append(replace(p, where="device" if there else "worker"))
        self.placed = placed
        return on_device

    def _absorptions(self) -> dict[int, PlacedOp]:
        """Batch ops done by the next one on the CPU (a flip by Normalize): absorber index -> op.
        On a GPU each stays a kernel of its own, where a per-sample loop would cost launches."""
        if self.device.type != "cpu":
            return {}
        batch = self.batch_ops
        return {after.index: before for before, after in zip(batch, batch[1:])
                if before.index + 1 == after.index and after.op.absorbs(before.op)
                and all(self.collate_of(f)[0] == "stack" for f in after.op.inputs)}

    @property
    def workers_use_cuda(self) -> bool:
        """Whether a decoder that runs in the loader workers decodes with CUDA (NVDEC): its workers
        must then start fresh (forkserver or spawn), never by fork."""
        from mediapipe.decoders.registry import decoder_class

        return any(decoder_class(spec.kind, spec.backend).uses_cuda for name, spec in self.decode.items()
                   if name not in self.device_fields)

    @property
    def sample_ops(self) -> list[PlacedOp]:
        return [p for p in self.placed if p.stage is Stage.SAMPLE]

    @property
    def worker_sample_ops(self) -> list[PlacedOp]:
        """The sample-stage ops a worker runs, after its decoders."""
        return [p for p in self.placed if p.stage is Stage.SAMPLE and p.where == "worker"]

    @property
    def device_sample_ops(self) -> list[PlacedOp]:
        """The sample-stage ops that run after the device decode, per sample, in the training process."""
        return [p for p in self.placed if p.stage is Stage.SAMPLE and p.where == "device"]

    @property
    def batch_ops(self) -> list[PlacedOp]:
        return [p for p in self.placed if p.stage is Stage.BATCH]

    def describe(self) -> str:
        """One line per op: its stage and whether it is fused into a decoder."""
        fused_ops = {id(p) for p in self.fused.values()}
        absorbed = {before.index: after for after, before in self.absorbed.items()}
        lines = []
        for name, spec in self.decode.items():
            kind = self.base_types[name]
            lines.append(f"decode {name}: {spec.kind} ({spec.backend})" + (f" as {kind}" if str(kind) != spec.kind else ""))
        for p in self.placed:
            tag = " (fused into decode)" if id(p) in fused_ops else ""
            if p.index in absorbed:
                tag = f" (done by [{absorbed[p.index]}] {type(self.ops[absorbed[p.index]]).__name__})"
            lines.append(f"[{p.index}] {type(p.op).__name__}: {p.stage.value}{tag} on {', '.join(p.op.inputs)}")
        return "\n".join(lines)

    # -- live decoders (one set per process; not pickled) ------------------------------
    def decoders(self) -> dict[str, Decoder]:
        """Live decoders, created once per process. Workers never touch the GPU: a device
        backend is created here for its header probe only, on the CPU."""
        if self._base is not None:
            return self._base.decoders()
        if self._decoders is None:
            self._decoders = {name: spec.create(None, self.limits) for name, spec in self.decode.items()}
        return self._decoders

    def device_decoders(self) -> dict[str, Decoder]:
        """The decoders of the device-decoded fields, on the pipeline's device (training process only)."""
        if self._base is not None:
            return self._base.device_decoders()
        if self._device_decoders is None:
            self._device_decoders = {name: self.decode[name].create(self.device, self.limits)
                                     for name in self.decode if name in self.device_fields}
        return self._device_decoders

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_decoders"] = state["_device_decoders"] = None  # rebuilt in each process
        state["_epochs"] = {}  # each process resolves its epochs itself
        return state

