"""Composition: RandomChoice, RandomApply and RandomOrder (torchvision v2's), drawn per sample.

Each sample draws which inner op runs (RandomChoice), whether its inner ops run (RandomApply) or
in which order (RandomOrder) from its own keyed RNG; inner op ``j`` draws its parameters from a
key derived from the composite's and ``j`` (`inner_rng`). A sample's result is therefore the
drawn inner ops applied to it with their own draws, whichever samples drew the same op, worker,
device or resume point.

* **Batch stage.** The inner ops are drawn with the composite, on the canvas it sees. At each
  step of the drawn sequences the batch runs each inner op once, on the rows of the samples that
  drew it there (``index_select``, the op's batched kernel, ``index_copy``): a few kernel calls
  per batch, never one per sample. The groups come from the drawn decisions on the host (on an
  accelerator, one read-back of the batch's decisions per composite).
* **Per batch.** Inner ops that draw once per batch (MixUp, CutMix) make a composite that draws
  once per batch, from the batch's key: ``RandomChoice([MixUp(...), CutMix(...)])`` mixes each
  batch one way, as torchvision's classification recipe does.
* **Sample stage.** With an inner op that runs per sample (a crop, a resize) the composite runs
  in the sample stage, and each inner op draws when it runs, on the canvas the ops before it left.

Fields: each inner op is bound to its fields as it would be alone (`Op.bind`); the composite
transforms their union, so boxes, masks and keypoints move with a geometric inner op. Inner ops
transform in place and keep each field's type: a sample that does not run an op has nothing it
could write elsewhere. ``to_config`` nests the inner ops' configs; the constructor takes them back.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from mediapipe.augment.base import ArgumentError, Op, Stage, check_probability, op_from_config
from mediapipe.augment.binding import Binding, bound_copy
from mediapipe.augment.params import Params, is_single
from mediapipe.errors import PipelineError
from mediapipe.fields import MASK, OBJECTS, FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

__all__ = ["RandomApply", "RandomChoice", "RandomOrder", "inner_rng"]

_INNER = 0x436F6D70  # the key part that marks an inner op's draws
_NONE = -1  # no op at this step of a sample's sequence (RandomApply not applied)
_CANVAS_META = ("size", "shape", "fields")  # what a draw's meta takes from the canvas, not the source


def inner_rng(key: int, j: int) -> SampleRNG:
    """The draws of inner op ``j`` of a composite whose own draws have ``key``."""
    return SampleRNG(key, _INNER, j, 0)


def params_of(params: Params, j: int) -> Params:
    """Inner op ``j``'s parameters among a composite's (stored as ``"j.name"``)."""
    prefix = f"{j}."
    return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}


@dataclass(frozen=True)
class _Compose(Op):
    """What the three composites share: the inner ops, their binding, draws and grouped runs."""

    ops: tuple[Op, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        ops = tuple(op_from_config(op) if isinstance(op, dict) else op for op in self.ops)
        bad = next((op for op in ops if not isinstance(op, Op)), None)
        if bad is not None:
            raise ArgumentError(f"{name}(ops=...): expected mediapipe.augment ops (or their configs), got {bad!r}")
        object.__setattr__(self, "ops", ops)
        if not ops:
            raise ValueError(f"{name}(ops=()): expected at least one op")
        if self.requested is not None or self.out is not None:
            raise ValueError(f"{name}(key/keys/out=...): name the fields on its inner ops, which are bound to "
                             "their fields as they would be alone")
        moving = next((op for op in ops if op.out is not None), None)
        if moving is not None:
            raise ValueError(f"{name}(ops=...): {type(moving).__name__}(out={moving.out!r}) writes a new field, "
                             "which a sample that does not run it would lack: the inner ops transform in place")
        if len({op.per_batch for op in ops}) > 1:
            per_batch = [type(op).__name__ for op in ops if op.per_batch]
            raise ValueError(f"{name}(ops=...): {per_batch} draw once per batch and the other ops once per "
                             "sample; compose ops of one kind (RandomChoice([MixUp(...), CutMix(...)]))")

    # -- what the inner ops make of the composite ----------------------------------------
    @property
    def per_batch(self) -> bool:  # type: ignore[override]
        """Drawn once per batch when its inner ops are (MixUp, CutMix)."""
        return all(op.per_batch for op in self.ops)

    @property
    def batch_only(self) -> bool:  # type: ignore[override]
        return any(op.batch_only for op in self.ops)

    @property
    def reads_canvas(self) -> bool:  # type: ignore[override]
        return any(op.reads_canvas for op in self.ops)

    @property
    def batched(self) -> bool:  # type: ignore[override]
        return self.placement() is Stage.BATCH

    def placement(self) -> Stage:
        """The sample stage when an inner op runs there (it changes a sample's shape), else the batch stage."""
        return Stage.SAMPLE if any(op.placement() is Stage.SAMPLE for op in self.ops) else Stage.BATCH

    def kinds(self) -> frozenset[str]:
        return frozenset().union(*(op.kinds() for op in self.ops))

    def refuses(self, field_type: FieldType) -> str | None:
        if any(op.refuses(field_type) is None for op in self.ops):
            return None
        return f"none of its ops does: they transform {sorted(self.kinds())} fields"

    @property
    def binding(self) -> Binding:
        """The union of the inner ops' fields (each op bound as it would be alone)."""
        bound = self.__dict__.get("_binding")
        return bound if bound is not None else _union(op.binding for op in self.ops)

    def bind(self, types: Mapping[str, FieldType], where: str = "") -> Op:
        """A copy whose inner ops are bound to their fields (errors name ``Name.ops[j]``), and
        which transforms their union."""
        name = f"{where}{type(self).__name__}"
        inner = tuple(op.bind(types, where=f"{name}.ops[{j}] ") for j, op in enumerate(self.ops))
        for j, op in enumerate(inner):
            _check_inner(op, types, f"{name}.ops[{j}] {type(op).__name__}")
        new = bound_copy(self, _union(op.binding for op in inner))
        object.__setattr__(new, "ops", inner)
        object.__setattr__(new, "_name", name)
        return new

    def reads(self) -> tuple[str, ...]:
        return _ordered(f for op in self.ops for f in op.reads())

    def writes(self) -> tuple[str, ...]:
        return _ordered(f for op in self.ops for f in op.writes())

    def draws_on(self) -> tuple[str, ...]:
        return _ordered(f for op in self.ops for f in op.draws_on())

    # -- draws ------------------------------------------------------------------------------
    def decide(self, rng: SampleRNG) -> Params:
        """This sample's (or batch's) decision: which op, whether, which order."""
        raise NotImplementedError

    def steps(self, decision: Params, batch: int) -> torch.Tensor:
        """The inner ops each sample runs, in order: (batch, steps) int64 on the CPU, -1 for none."""
        raise NotImplementedError

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        """The decision, and every inner op's draw on this canvas (``"j.name"``); in the sample stage
        the key the inner ops draw from when they run, each on the canvas before it."""
        params = self.decide(rng)
        if self.placement() is Stage.SAMPLE:
            params["key"] = rng.key
            params["meta"] = {k: v for k, v in meta.items() if k not in _CANVAS_META}
            return params
        for j, op in enumerate(self.ops):
            params.update({f"{j}.{k}": v for k, v in op.sample_params(inner_rng(rng.key, j), meta).items()})
        return params

    def batch_params(self, rng: SampleRNG, batch_size: int) -> Params:
        """A composite of per-batch ops: the batch's decision and every inner op's batch draw."""
        params = self.decide(rng)
        for j, op in enumerate(self.ops):
            params.update({f"{j}.{k}": v for k, v in op.batch_params(inner_rng(rng.key, j), batch_size).items()})
        return params

    # -- application ----------------------------------------------------------------------
    def apply(self, x: Any, params: Params, field: Any = None, canvas_size: Any = None,
              lengths: torch.Tensor | None = None) -> Any:
        """One field (the composite's first) through the drawn inner ops."""
        name = self.inputs[0]
        data = {name: x}
        self.apply_fields(data, params, canvas_size=canvas_size)
        return data[name]

    def apply_fields(self, data: dict[str, Any], params: Params, only: Collection[str] | None = None,
                     canvas_size: Any = None) -> None:
        """The drawn inner ops on every field they transform: grouped by drawn op over a batch,
        in sequence for one sample or a per-batch decision."""
        if self.per_batch or is_single(params):
            drawn = None if self.per_batch or self.placement() is Stage.BATCH else params
            for j in self._sequence(params):
                op = self.ops[j]
                mine = params_of(params, j) if drawn is None else self._draw_now(op, j, data, drawn)
                op.apply_fields(data, mine, only=_present(op, data, only), canvas_size=canvas_size)
            return
        if any(isinstance(v, torch.Tensor) and v.device.type == "meta" for v in data.values()):
            return  # shapes only: the inner ops keep each field's shape and dtype in the batch stage
        steps = self.steps(params, _batch_size(params))
        owned: set[str] = set()  # fields this call already copied: written in place from then on
        for step in range(steps.shape[1]):
            column = steps[:, step]
            for j in column.unique().tolist():
                if j != _NONE:
                    rows = _Rows((column == j).nonzero().reshape(-1))
                    self._run_on_rows(j, rows, steps.shape[0], data, params, only, canvas_size, owned)

    def _sequence(self, params: Params) -> list[int]:
        """The inner ops one sample (or a per-batch decision) runs, in order."""
        decision = {k: v for k, v in params.items() if "." not in k and k not in ("key", "meta")}
        return [j for j in self.steps(decision, 1)[0].tolist() if j != _NONE]

    def _draw_now(self, op: Op, j: int, data: dict[str, Any], params: Params) -> Params:
        """Inner op ``j``'s draw in the sample stage, on the canvas the ops before it left."""
        b = op.binding
        first = data[next((f for f, t in zip(b.inputs, b.types) if t.spec.has_canvas and f in data), b.inputs[0])]
        meta = {**params["meta"], "size": tuple(first.shape[-2:]), "shape": tuple(first.shape),
                "fields": {f: data[f] for f in op.draws_on()}}
        return op.sample_params(inner_rng(params["key"], j), meta)

    def _run_on_rows(self, j: int, rows: _Rows, batch: int, data: dict[str, Any], params: Params,
                     only: Collection[str] | None, canvas_size: Any, owned: set[str]) -> None:
        """Inner op ``j`` on the samples at ``rows`` of the batch, written back in their place."""
        op, mine = self.ops[j], params_of(params, j)
        fields = _present(op, data, only)
        if len(rows.list) == batch:  # every sample: no rows to take or put back
            op.apply_fields(data, mine, only=fields, canvas_size=canvas_size)
            owned.difference_update(op.writes())
            return
        needed = {*op.reads(), *(f"{f}_lengths" for f in op.inputs), "valid"}
        group = {f: _take(data[f], rows) for f in needed if f in data}
        taken = dict(group)
        canvas = [canvas_size[i] for i in rows.list] if isinstance(canvas_size, list) else canvas_size
        op.apply_fields(group, _take_params(mine, rows), only=fields, canvas_size=canvas)
        for f, value in group.items():
            if value is not taken.get(f):
                who = f"{self.__dict__.get('_name', type(self).__name__)}.ops[{j}] {type(op).__name__}"
                data[f] = self._put(data[f], rows, value, f in owned, who, f)
                owned.add(f)

    @staticmethod
    def _put(x: Any, rows: _Rows, value: Any, in_place: bool, who: str, name: str) -> Any:
        """``value`` (the group's rows) written into batch field ``x`` at ``rows``."""
        if isinstance(x, list):
            out = x if in_place else type(x)(x)
            for i, v in zip(rows.list, value):
                out[i] = v
            return out
        if value.shape[1:] != x.shape[1:] or value.dtype != x.dtype:
            raise PipelineError(f"{who} made {name!r} {tuple(value.shape[1:])} {value.dtype} of "
                                f"{tuple(x.shape[1:])} {x.dtype}: in the batch stage the ops of a composite keep "
                                "each field's shape and dtype, as the samples that do not run it keep theirs")
        at = rows.on(x.device)
        return x.index_copy_(0, at, value) if in_place else x.index_copy(0, at, value)

    # -- config -----------------------------------------------------------------------------
    def to_config(self) -> dict[str, Any]:
        config = super().to_config()
        config["ops"] = [op.to_config() for op in self.ops]
        return config


def _check_inner(op: Op, types: Mapping[str, FieldType], name: str) -> None:
    """Refuse a bound inner op that changes a field's type, or moves pixels without the masks, boxes
    and keypoints drawn on them (the pipeline's rule for an op alone, for the samples that run it)."""
    b = op.binding
    changed = next(((f, t) for f, t in zip(b.inputs, b.types) if op.output_type(t) != t), None)
    if changed is not None:
        raise PipelineError(f"{name} turns {changed[0]!r} ({changed[1]}) into {op.output_type(changed[1])}: every "
                            "sample of a batch must keep one type")
    moved = [f for f, t in zip(b.inputs, b.types) if t.spec.has_canvas]
    left = [f for f, t in types.items() if t.kind in OBJECTS | {MASK} and f not in b.inputs]
    if OBJECTS <= op.kinds() and moved and left:
        raise PipelineError(f"{name} moves {moved} but not {left}, which are drawn on it: leave its keys unset "
                            "(every spatial field moves with one draw) or add them to its keys")


def _union(bindings: Iterable[Binding]) -> Binding:
    """The fields of several bindings, each once, in order of first appearance."""
    types: dict[str, FieldType] = {}
    for b in bindings:
        for f, t in zip(b.inputs, b.types):
            types.setdefault(f, t)
    names = tuple(types)
    return Binding(names, names, tuple(types.values()))


def _ordered(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def _present(op: Op, data: dict[str, Any], only: Collection[str] | None) -> list[str]:
    """The inputs of ``op`` in ``data`` (among ``only``, when given)."""
    return [f for f in op.inputs if f in data and (only is None or f in only)]


def _batch_size(params: Params) -> int:
    return next(v.shape[0] for v in params.values() if isinstance(v, torch.Tensor) and v.ndim)


class _Rows:
    """A group's rows of the batch: on the host, and copied once to each device that uses them."""

    def __init__(self, rows: torch.Tensor) -> None:
        self.list: list[int] = rows.tolist()
        self._on = {rows.device: rows}

    def on(self, device: torch.device) -> torch.Tensor:
        if device not in self._on:
            self._on[device] = next(iter(self._on.values())).to(device)
        return self._on[device]


def _take(x: Any, rows: _Rows) -> Any:
    if isinstance(x, list):
        return [x[i] for i in rows.list]
    if isinstance(x, torch.Tensor) and x.ndim:
        return x.index_select(0, rows.on(x.device))
    return x


def _take_params(params: Params, rows: _Rows) -> Params:
    return {k: v.index_select(0, rows.on(v.device)) if isinstance(v, torch.Tensor) and v.ndim else v
            for k, v in params.items()}


def _host(value: Any) -> torch.Tensor:
    """A decision as a CPU int64 tensor (one read-back when it lives on an accelerator)."""
    return torch.as_tensor(value).to("cpu", torch.int64)


@dataclass(frozen=True)
class RandomChoice(_Compose):
    """Run one of ``ops`` per sample, op j with probability ``p[j] / sum(p)`` (torchvision's
    ``RandomChoice``); of per-batch ops (MixUp, CutMix), one per batch.

    Input/Output: what the inner ops take and give (each bound to its fields as alone; boxes,
    masks and keypoints move with a geometric one). Args:
        ops: the ops to choose from (at least one), transforming in place.
        p: one weight >= 0 per op (normalised, as torchvision does), or None for equal odds.
    Stage: batch (each op once on the samples that chose it), sample when an op runs per sample.
    """

    p: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.p is not None:
            if len(self.p) != len(self.ops) or min(self.p) < 0 or not sum(self.p) > 0:
                raise ValueError(f"RandomChoice(p={self.p!r}): expected one weight >= 0 per op "
                                 f"({len(self.ops)}), not all 0")

    def probabilities(self) -> tuple[float, ...]:
        """Each op's chance, as torchvision normalises ``p``."""
        weights = self.p if self.p is not None else (1.0,) * len(self.ops)
        total = sum(weights)
        return tuple(w / total for w in weights)

    def decide(self, rng: SampleRNG) -> Params:
        u, edge = rng.random(), 0.0
        chances = self.probabilities()
        for j, chance in enumerate(chances):
            edge += chance
            if u < edge and chance > 0:
                return {"choice": j}
        return {"choice": max(j for j, chance in enumerate(chances) if chance > 0)}  # u at the rounded top

    def steps(self, decision: Params, batch: int) -> torch.Tensor:
        return _host(decision["choice"]).reshape(batch, 1)


@dataclass(frozen=True)
class RandomApply(_Compose):
    """Run all of ``ops`` in sequence on a sample with probability ``p``, else none
    (torchvision's ``RandomApply``); of per-batch ops, on a whole batch.

    Input/Output: what the inner ops take and give. Args:
        ops: the ops (at least one), run in order, transforming in place.
        p: probability per sample (per batch for MixUp, CutMix); 0 never, 1 always.
    Stage: batch (the ops on the samples that drew them), sample when an op runs per sample.
    """

    p: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self, self.p)

    def decide(self, rng: SampleRNG) -> Params:
        return {"apply": rng.bernoulli(self.p)}

    def steps(self, decision: Params, batch: int) -> torch.Tensor:
        apply = _host(decision["apply"]).reshape(batch, 1).bool()
        every = torch.arange(len(self.ops)).expand(batch, -1)
        return torch.where(apply, every, torch.full_like(every, _NONE))


@dataclass(frozen=True)
class RandomOrder(_Compose):
    """Run every op of ``ops`` once per sample, in an order drawn per sample, each permutation
    equally likely (torchvision's ``RandomOrder``); of per-batch ops, one order per batch.

    Input/Output: what the inner ops take and give. Args:
        ops: the ops (at least one), transforming in place.
    Stage: batch (at each step, each op once on the samples that run it then), sample when an op
    runs per sample.
    """

    def decide(self, rng: SampleRNG) -> Params:
        order = list(range(len(self.ops)))
        for i in range(len(order) - 1, 0, -1):  # Fisher-Yates
            j = rng.integers(0, i + 1)
            order[i], order[j] = order[j], order[i]
        return {"order": tuple(order)}

    def steps(self, decision: Params, batch: int) -> torch.Tensor:
        return _host(decision["order"]).reshape(batch, len(self.ops))
