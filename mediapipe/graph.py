"""The compiled pipeline: ops ordered and placed, geometry fused into decoders, and the
two halves that run it: the sample stage (in a worker) and the batch stage (on the device).

Placement: an op runs in the *sample* stage when it changes a sample's shape, or when a
later sample-stage op reads a field it writes; everything else runs once per batch on the
device. The first op to read a decoded field is fused into the decoder when it offers a
`DecodeHint` (region of interest, DCT-scaled size, frame indices).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from mediapipe import memory
from mediapipe.augment.base import Op, Params, Stage
from mediapipe.collate import collate, stack_params
from mediapipe.decoders.base import NO_HINT, Decoded, Decoder, DecoderSpec, Limits
from mediapipe.errors import DecodeError, MediapipeError, PipelineError
from mediapipe.loaders.sources import Source
from mediapipe.rng import BATCH_INDEX_BASE, DECODER_OP_INDEX_BASE, REPLACEMENT_OP_INDEX, SampleRNG
from mediapipe.sample import SampleRef

ON_ERROR = ("raise", "skip", "replace")
MAX_REPLACEMENT_TRIES = 16


@dataclass(frozen=True)
class PlacedOp:
    index: int  # position in the user's list: the op's RNG key
    op: Op
    stage: Stage


@dataclass
class StageStats:
    """Counts and seconds per stage, merged from every worker into `Loader.stats`."""

    samples: int = 0
    batches: int = 0
    bytes: int = 0
    frames: int = 0  # video frames the decoders produced (lead-in included; frames skip_frame skipped not)
    reused_buffers: int = 0  # batches written into shared memory a worker got back (no page faults)
    seconds: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)  # reason -> count
    failed: list[str] = field(default_factory=list)  # "path: reason", the first few

    def merge(self, other: StageStats) -> None:
        self.samples += other.samples
        self.batches += other.batches
        self.bytes += other.bytes
        self.frames += other.frames
        self.reused_buffers += other.reused_buffers
        self.seconds.update(other.seconds)
        self.errors.update(other.errors)
        self.failed.extend(other.failed[: max(0, 100 - len(self.failed))])

    def count_error(self, err: BaseException) -> None:
        """Count a sample that failed under on_error="skip" or "replace", by reason."""
        self.errors[_error_reason(err)] += 1
        if len(self.failed) < 100:
            self.failed.append(str(err))

    def as_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "batches": self.batches, "bytes": self.bytes,
                "frames": self.frames, "reused_buffers": self.reused_buffers,
                "seconds": dict(self.seconds), "errors": dict(self.errors), "failed": list(self.failed)}


@dataclass
class Deferred:
    """A sample's field left for the device to decode: the bytes, the hint, and the fused
    op's parameters (drawn in the worker)."""

    blob: Any
    hint: Any
    meta: dict[str, Any]
    fused_params: Params | None


@dataclass
class HostBatch:
    """What a worker sends: collated tensors, the batch-stage parameters, and its stats."""

    number: int
    epoch: int
    data: dict[str, Any]
    params: dict[int, Params]  # op index -> stacked params
    stats: StageStats
    finished: bool = False  # the batch-stage ops already ran (in the worker, for a CPU device)
    worker: int | None = None  # the worker process that built it
    buffers: dict[str, int] = field(default_factory=dict)  # field -> the worker's shared buffer


def _lent(host: HostBatch) -> HostBatch:
    """Mark the batch's shared buffers as lent to the consumer (see `mediapipe.memory`)."""
    memory.into_shared(host.data)
    host.worker, host.buffers = memory.worker_id(), memory.lend(host.data)
    host.stats.reused_buffers += memory.take_reused()
    return host


def _error_reason(err: BaseException) -> str:
    if isinstance(err, DecodeError):
        return f"{type(err).__name__}: {err.reason}"
    return f"{type(err).__name__}: {err}"


class Plan:
    """A validated pipeline: decoders per field, ops in order with their stage, fusions."""

    def __init__(
        self,
        source: Source,
        decode: dict[str, DecoderSpec],
        ops: list[Op],
        *,
        seed: int,
        on_error: str = "raise",
        limits: Limits = Limits(),
        device: torch.device | None = None,
    ) -> None:
        if not decode:
            raise PipelineError("decode: name at least one field, e.g. {'image': mp.decoders.image()}")
        if on_error not in ON_ERROR:
            raise PipelineError(f"on_error={on_error!r}: expected one of {ON_ERROR}")
        self.source, self.decode, self.ops = source, dict(decode), list(ops)
        self.seed, self.on_error, self.limits = seed, on_error, limits
        self.device = device if device is not None else torch.device("cpu")
        self.placed = self._place()
        self.fused = self._fusions()
        self.shape_source = self._shape_sources()
        self.deferred, self.deferred_ops = self._deferrals()
        self.absorbed = self._absorptions()
        self.done_by_next = {before.index for before in self.absorbed.values()}
        self._decoders: dict[str, Decoder] | None = None
        self._device_decoders: dict[str, Decoder] | None = None

    # -- compile ------------------------------------------------------------------------
    def _base_fields(self) -> set[str]:
        fields = set(self.decode) | {"label", "index"}
        fields |= {f"{name}_lengths" for name, spec in self.decode.items() if spec.collate == "pad"}
        fields |= {f"{name}_{side}" for name, spec in self.decode.items() for side in spec.side_fields}
        return fields

    def _place(self) -> list[PlacedOp]:
        available = self._base_fields()
        for i, op in enumerate(self.ops):
            if not isinstance(op, Op):
                raise PipelineError(f"augment[{i}] is {op!r}, not an op")
            missing = [f for f in op.reads() if f not in available]
            if missing:
                raise PipelineError(
                    f"augment[{i}] {type(op).__name__} reads {missing}, which no decoder or earlier op "
                    f"produces; fields here: {sorted(available)}"
                )
            available |= set(op.writes())
        placed: list[PlacedOp] = []
        needed_in_samples: set[str] = set()
        for i in reversed(range(len(self.ops))):
            op = self.ops[i]
            sample = op.stage is Stage.SAMPLE or bool(set(op.writes()) & needed_in_samples)
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
                    if p.stage is Stage.SAMPLE and p.op.fusable(name) and p.op.reads() == p.op.inputs:
                        fused[name] = p
                    break
        return fused

    def _shape_sources(self) -> dict[str, str]:
        """For each field an op writes, the field whose sample-stage shape it has."""
        source = {f: f for f in self._base_fields()}
        for p in self.placed:
            for src, dst in zip(p.op.inputs, p.op.outputs):
                if p.stage is Stage.BATCH and dst not in source:
                    source[dst] = source.get(src, src)
                elif p.stage is Stage.SAMPLE:
                    source[dst] = dst
        return source

    def _deferrals(self) -> tuple[set[str], set[int]]:
        """Fields decoded on the device (and what sample-stage ops derive from them), and
        the sample-stage ops that must therefore run after the device decode."""
        deferred = {name for name, spec in self.decode.items() if spec.placement(self.device) == "device"}
        ops: set[int] = set()
        for p in self.placed:
            if p.stage is Stage.SAMPLE and set(p.op.reads()) & deferred:
                ops.add(p.index)
                deferred |= set(p.op.writes())
        return deferred, ops

    def _absorptions(self) -> dict[int, PlacedOp]:
        """Batch ops done by the next one on the CPU (a flip by Normalize): absorber index -> op.
        On a GPU each stays a kernel of its own, where a per-sample loop would cost launches."""
        if self.device.type != "cpu":
            return {}
        batch = self.batch_ops
        return {after.index: before for before, after in zip(batch, batch[1:])
                if before.index + 1 == after.index and after.op.absorbs(before.op)}

    @property
    def sample_ops(self) -> list[PlacedOp]:
        return [p for p in self.placed if p.stage is Stage.SAMPLE]

    @property
    def batch_ops(self) -> list[PlacedOp]:
        return [p for p in self.placed if p.stage is Stage.BATCH]

    def describe(self) -> str:
        """One line per op: its stage and whether it is fused into a decoder."""
        fused_ops = {id(p) for p in self.fused.values()}
        absorbed = {before.index: after for after, before in self.absorbed.items()}
        lines = [f"decode {name}: {spec.kind} ({spec.backend})" for name, spec in self.decode.items()]
        for p in self.placed:
            tag = " (fused into decode)" if id(p) in fused_ops else ""
            if p.index in absorbed:
                tag = f" (done by [{absorbed[p.index]}] {type(self.ops[absorbed[p.index]]).__name__})"
            lines.append(f"[{p.index}] {type(p.op).__name__}: {p.stage.value}{tag}")
        return "\n".join(lines)

    # -- sample stage (in a worker) -----------------------------------------------------
    def decoders(self) -> dict[str, Decoder]:
        """Live decoders, created once per process. Workers never touch the GPU: a device
        backend is created here for its header probe only, on the CPU."""
        if self._decoders is None:
            self._decoders = {name: spec.create(None, self.limits) for name, spec in self.decode.items()}
        return self._decoders

    def device_decoders(self) -> dict[str, Decoder]:
        """The decoders of deferred fields, on the pipeline's device (training process only)."""
        if self._device_decoders is None:
            self._device_decoders = {name: self.decode[name].create(self.device, self.limits)
                                     for name in self.decode if name in self.deferred}
        return self._device_decoders

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_decoders"] = state["_device_decoders"] = None  # rebuilt in each process
        return state

    def load_sample(self, index: int, epoch: int, stats: StageStats) -> dict[str, Any]:
        """Read, decode and run the sample-stage ops for one sample."""
        ref = self.source.ref(index)
        data: dict[str, Any] = {"index": index}
        if ref.label is not None:
            data["label"] = ref.label
        data.update(ref.fields)
        params_cache: dict[int, Params] = {}
        done: set[tuple[int, str]] = set()
        for field_index, (name, decoder) in enumerate(self.decoders().items()):
            self._decode_field(ref, name, field_index, decoder, epoch, data, params_cache, done, stats)
        t0 = time.perf_counter()
        self.run_sample_ops(data, epoch, index, ref.meta, params_cache, done, deferred=False)
        stats.seconds["sample_ops"] += time.perf_counter() - t0
        return data

    def run_sample_ops(self, data: dict[str, Any], epoch: int, index: int, meta: dict, params_cache: dict,
                       done: set, *, deferred: bool) -> None:
        """The sample-stage ops on one sample: those before a device decode (``deferred=False``,
        in a worker) or those after it (``deferred=True``, on the device)."""
        for p in self.sample_ops:
            if (p.index in self.deferred_ops) != deferred:
                continue
            params = params_cache.get(p.index)
            if params is None:
                first = data[p.op.inputs[0]]
                op_meta = {**meta, "size": tuple(first.shape[-2:]), "shape": tuple(first.shape)}
                params = p.op.sample_params(SampleRNG(self.seed, epoch, index, p.index), op_meta)
            todo = [(s, d) for s, d in zip(p.op.inputs, p.op.outputs) if (p.index, s) not in done]
            if len(todo) == len(p.op.inputs):
                p.op.apply_fields(data, params)
            else:
                for src, dst in todo:
                    data[dst] = p.op.apply_to(data[src], params, src)

    def _decode_field(self, ref: SampleRef, name: str, field_index: int, decoder: Decoder, epoch: int,
                      data: dict[str, Any], params_cache: dict[int, Params], done: set, stats: StageStats) -> None:
        t0 = time.perf_counter()
        blob = ref.blob(decoder.kind, name)
        if getattr(decoder, "reads_whole", True) and blob.data is None:
            blob = replace(blob, data=blob.read())
        stats.bytes += blob.nbytes()
        t1 = time.perf_counter()
        stats.seconds["read"] += t1 - t0
        hint, fused = NO_HINT, self.fused.get(name)
        meta = dict(ref.meta)
        if fused is None and name in self.deferred:
            meta.update(decoder.probe(blob))  # reject a bad header in the worker, where on_error applies
        if fused is not None:
            probe = decoder.probe(blob)
            meta.update(probe)
            if "height" in meta and "width" in meta:
                meta["size"] = (meta["height"], meta["width"])
            params = params_cache.get(fused.index)
            if params is None:
                params = fused.op.sample_params(SampleRNG(self.seed, epoch, ref.index, fused.index), meta)
                params_cache[fused.index] = params
            hint = fused.op.decode_hint(params, meta) or NO_HINT
        if name in self.deferred:  # the device decodes it, batched; the worker checked the header
            data[name] = Deferred(blob, hint, meta, params_cache.get(fused.index) if fused else None)
            return
        rng = SampleRNG(self.seed, epoch, ref.index, DECODER_OP_INDEX_BASE + field_index)
        x = decoder.decode(blob, hint, rng, meta)
        if isinstance(x, Decoded):
            data.update({f"{name}_{side}": value for side, value in x.fields.items()})
            stats.frames += x.frames
            x = x.value
        t2 = time.perf_counter()
        stats.seconds["decode"] += t2 - t1
        if fused is not None and hint is not NO_HINT:
            x = fused.op.apply_decoded(x, params_cache[fused.index])
            done.add((fused.index, name))
            dst = fused.op.outputs[fused.op.inputs.index(name)]
            data[dst] = x
            if dst != name:
                data[name] = x  # the op wrote a new field; the decoded field is what the decoder gave
            stats.seconds["sample_ops"] += time.perf_counter() - t2
        else:
            data[name] = x

    def load_batch(self, number: int, epoch: int, indices: np.ndarray, valid: int,
                   with_valid: bool = False) -> HostBatch:
        """The sample stage for one batch, then collate; applies the ``on_error`` policy.

        ``batch["valid"]`` (bool (B,)) marks real samples; it is present when asked
        (``last_batch="pad"``), when padding happened, or with ``on_error="replace"``."""
        return _lent(self._load_batch(number, epoch, indices, valid, with_valid))

    def _load_batch(self, number: int, epoch: int, indices: np.ndarray, valid: int,
                    with_valid: bool = False, private: frozenset[str] = frozenset()) -> HostBatch:
        stats = StageStats()
        order = indices.tolist()
        self.source.prefetch(order)
        samples: list[dict[str, Any] | None] = []
        for position, index in enumerate(order):
            samples.append(self._load_with_policy(index, epoch, stats))
            stats.samples += position < valid
        t0 = time.perf_counter()
        policies = {n: s.collate for n, s in self.decode.items()}
        data = collate(samples, policies, [int(i) for i in indices] if self.on_error == "replace" else None,
                       private)
        if with_valid or valid < len(indices) or self.on_error == "replace":
            mask = torch.tensor([s is not None for s in samples], dtype=torch.bool)
            mask[valid:] = False
            data["valid"] = mask
        params = self.batch_params(number, epoch, indices, samples, data)
        stats.seconds["collate"] += time.perf_counter() - t0
        stats.batches += 1
        return HostBatch(number, epoch, data, params, stats)

    def _load_with_policy(self, index: int, epoch: int, stats: StageStats) -> dict[str, Any] | None:
        try:
            return self.load_sample(index, epoch, stats)
        except MediapipeError as err:
            if self.on_error == "raise":
                raise
            stats.count_error(err)
            if self.on_error == "replace":
                return None
        # "skip": a deterministic replacement, keyed by the failed sample's index
        rng = SampleRNG(self.seed, epoch, index, REPLACEMENT_OP_INDEX)
        for _ in range(MAX_REPLACEMENT_TRIES):
            other = rng.integers(0, len(self.source))
            try:
                return self.load_sample(other, epoch, stats)
            except MediapipeError as err:
                stats.count_error(err)
        raise PipelineError(f"on_error='skip': {MAX_REPLACEMENT_TRIES} replacements for sample {index} failed too")

    def batch_params(self, number: int, epoch: int, indices: np.ndarray, samples: list, data: dict,
                     *, deferred: bool = False) -> dict[int, Params]:
        """Stacked parameters of the batch-stage ops; those reading a device-decoded field are
        drawn on the device once its shapes are known (``deferred=True``), with the same keys."""
        out: dict[int, Params] = {}
        for p in self.batch_ops:
            if bool(set(p.op.inputs) & self.deferred) != deferred:
                continue
            if p.op.per_batch:
                rng = SampleRNG(self.seed, epoch, BATCH_INDEX_BASE + number, p.index)
                out[p.index] = p.op.batch_params(rng, len(indices))
                continue
            shape_field = self.shape_source.get(p.op.inputs[0], p.op.inputs[0])
            drawn = []
            for position, index in enumerate(indices.tolist()):
                sample = samples[position]
                x = sample.get(shape_field) if sample is not None else None
                if x is None and isinstance(data.get(shape_field), torch.Tensor):
                    x = data[shape_field][position]
                meta = {} if x is None else {"size": tuple(x.shape[-2:]), "shape": tuple(x.shape)}
                real_index = sample["index"] if sample is not None else index
                drawn.append(p.op.sample_params(SampleRNG(self.seed, epoch, real_index, p.index), meta))
            out[p.index] = stack_params(drawn)
        return out

    def load_finished_batch(self, number: int, epoch: int, indices: np.ndarray, valid: int,
                            with_valid: bool = False) -> HostBatch:
        """`load_batch`, then the batch-stage ops in the same worker: for a CPU device, where
        the worker's cores are the device. Same parameters, same kernels, same values."""
        replaced = frozenset(f for p in self.batch_ops for f in p.op.outputs if f in p.op.inputs)
        host = self._load_batch(number, epoch, indices, valid, with_valid, replaced)
        t0 = time.perf_counter()
        host.data = self.run_batch_ops(host.data, host.params)
        host.stats.seconds["batch_ops"] += time.perf_counter() - t0
        host.params, host.finished = {}, True
        return _lent(host)

    # -- batch stage (on the device) ----------------------------------------------------
    def run_batch_ops(self, data: dict[str, Any], params: dict[int, Params]) -> dict[str, Any]:
        for p in self.batch_ops:
            if p.index in self.done_by_next:
                continue
            before = self.absorbed.get(p.index)
            if before is None:
                p.op.apply_fields(data, params[p.index])
            else:
                for field in p.op.inputs:
                    data[field] = p.op.apply_absorbing(data[field], params[p.index], before.op, params[before.index])
        return data
