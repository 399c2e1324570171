"""The device-decode stage: fields whose decoder runs on the device (nvJPEG through
nvImageCodec) are decoded here, a whole batch per call, in the training process.

The workers have already read the bytes, checked the headers and drawn every random
parameter (the fused crop's too), so the values do not depend on where decoding ran.
After decoding, the op fused into the decoder finishes the batch in one batched call where
it can (a RandomResizedCrop resizes every decoded region at once), the other sample-stage
ops run per sample, the fields are stacked on the device, and the batch-stage parameters
that needed their shapes are drawn with the same keys the workers would have used.

A sample that fails here gets the worker's ``on_error`` treatment: "raise" raises, "replace"
zeros its slot (``valid`` False), and "skip" loads the stand-in a worker would have chosen,
whole, in this process (read, decoded on the device, every op).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mediapipe.decoders.base import NO_HINT, Decoded, Decoder
from mediapipe.errors import MediapipeError
from mediapipe.plan import Plan
from mediapipe.stages.batch_stage import batch_params
from mediapipe.stages.collate import collate
from mediapipe.stages.error_policy import ErrorPolicy
from mediapipe.stages.host_batch import Deferred, HostBatch
from mediapipe.stages.sample_stage import SampleStage, canvas_key
from mediapipe.stages.stats import StageStats


class _Finishing:
    """The samples of a batch (or one stand-in) being finished on the device, with what each
    has done so far: the fused op's draws and canvas, the ops done, the worker's metadata."""

    def __init__(self, count: int) -> None:
        self.samples: list[dict[str, Any] | None] = [{} for _ in range(count)]
        self.caches: list[dict[Any, Any]] = [{} for _ in range(count)]
        self.dones: list[set] = [set() for _ in range(count)]
        self.metas: list[dict[str, Any]] = [{} for _ in range(count)]
        self.failed: dict[int, BaseException] = {}
        self.side_fields: set[str] = set()

    def fail(self, position: int, err: BaseException) -> None:
        self.failed.setdefault(position, err)
        self.samples[position] = None


def _decode_field(plan: Plan, name: str, decoder: Decoder, state: _Finishing, pending: list[Deferred | None],
                  stats: StageStats) -> None:
    """Field ``name`` of every live sample in one `decode_batch` call, then the fused op on all
    of them at once (`Op.apply_decoded_batch`) or, where it has no batched form, per sample."""
    for i, d in enumerate(pending):
        if d is None:  # the sample failed in the worker (on_error="replace")
            state.samples[i] = None
    todo = [i for i, s in enumerate(state.samples) if s is not None]
    decoded = decoder.decode_batch([pending[i].blob for i in todo], [pending[i].hint for i in todo],
                                   [pending[i].meta for i in todo]) if todo else []
    fused = plan.fused.get(name)
    hinted: list[tuple[int, torch.Tensor]] = []
    for i, x in zip(todo, decoded):
        d = pending[i]
        if isinstance(x, BaseException):
            state.fail(i, x)
            continue
        state.metas[i] = d.meta
        if isinstance(x, Decoded):  # side fields, as the workers' decoders give them
            extra = {f"{name}_{side}": value for side, value in x.fields.items()}
            state.samples[i].update(extra)
            state.side_fields.update(extra)
            if x.fallback is not None:
                stats.count_fallback(decoder.name, x.fallback)
            x = x.value
        if decoder.auto_fallback is not None:
            stats.count_fallback(decoder.name, decoder.auto_fallback)
        if fused is not None:
            state.caches[i][fused.index] = d.fused_params
            state.caches[i][canvas_key(fused.index)] = d.meta.get("size")
            if d.hint is not NO_HINT:
                hinted.append((i, x))
        state.samples[i][name] = x
    if fused is None or not hinted:
        return
    params = [state.caches[i][fused.index] for i, _ in hinted]
    batch = fused.op.apply_decoded_batch([x for _, x in hinted], params)
    output = fused.op.outputs[fused.op.inputs.index(name)]
    for k, (i, x) in enumerate(hinted):
        x = batch[k] if batch is not None else fused.op.apply_decoded(x, params[k])
        state.dones[i].add((fused.index, name))
        state.samples[i][output] = state.samples[i][name] = x


def _run_deferred_ops(plan: Plan, stage: SampleStage, state: _Finishing, indices: list[int], epoch: int,
                      worker_fields: dict[str, Any] | None, on_host: dict[str, Any] | None = None) -> None:
    """The sample-stage ops after the device decode, per sample; fields the workers made that such
    an op also reads (an image's mask, the boxes a fused crop moves) come from ``worker_fields``,
    the collated batch (``on_host``: the same batch on the CPU, for the lengths of padded fields)."""
    decoded = set(plan.device_decoders())
    borrowed = {f for p in plan.sample_ops if p.index in plan.deferred_ops for f in p.op.reads()} - decoded
    for i, sample in enumerate(state.samples):
        if sample is None:
            continue
        sample["index"] = indices[i]  # keys this sample's batch-stage draws
        if worker_fields is not None:
            for key in (borrowed & worker_fields.keys()) - sample.keys():
                sample[key] = _worker_row(plan, key, i, worker_fields, on_host or worker_fields)
        try:
            stage.run_ops(sample, epoch, indices[i], state.metas[i], state.caches[i], state.dones[i], deferred=True,
                          key=plan.source.ref(indices[i]).key)
        except MediapipeError as err:
            state.fail(i, err)


def _worker_row(plan: Plan, name: str, position: int, batch: dict[str, Any], on_host: dict[str, Any]) -> Any:
    """Sample ``position``'s field ``name`` as the worker made it, from the collated ``batch``: a
    padded field (boxes batched "pad") cut back to its length, on the plan's device."""
    row = batch[name][position]
    lengths = on_host.get(f"{name}_lengths")
    if isinstance(lengths, torch.Tensor) and plan.collate_of(name)[0] == "pad":
        axis = plan.collate_of(name)[1] % max(row.ndim, 1)
        row = row.narrow(axis, 0, int(lengths[position]))
    return row.to(plan.device) if isinstance(row, torch.Tensor) else row


def load_whole(plan: Plan, index: int, epoch: int, stats: StageStats) -> dict[str, Any]:
    """Sample ``index`` made entirely in this process: the workers' part (read, probe, draws,
    their ops), then the device decode and the ops after it. A stand-in under ``on_error``."""
    stage = SampleStage(plan)
    sample = stage.load(index, epoch, stats)
    state = _Finishing(1)
    for name, decoder in plan.device_decoders().items():
        _decode_field(plan, name, decoder, state, [sample.pop(name)], stats)
        if state.failed:
            raise state.failed[0]
    _run_deferred_ops(plan, stage, state, [index], epoch, {k: [v] for k, v in sample.items()})
    if state.failed:
        raise state.failed[0]
    return {**sample, **state.samples[0]}


def finish_deferred(plan: Plan, host: HostBatch, on_host: dict[str, Any] | None = None) -> None:
    """Decode ``host``'s deferred fields on ``plan.device`` and finish their sample stage, in place.

    ``on_host``: the worker's batch as it arrived (its ``index`` and ``valid`` on the CPU), when
    ``host.data`` already moved to the device; the stage then never reads a device tensor back."""
    data = host.data
    on_host = data if on_host is None else on_host
    indices = [int(i) for i in on_host["index"].tolist()]
    valid = on_host.get("valid")
    valid = valid.clone().cpu() if valid is not None else None
    state = _Finishing(len(indices))
    for name, decoder in plan.device_decoders().items():
        _decode_field(plan, name, decoder, state, data.pop(name), host.stats)
    stage = SampleStage(plan)
    _run_deferred_ops(plan, stage, state, indices, host.epoch, data, on_host)
    replaced, valid = _apply_on_error(plan, host, state, indices, valid)
    template = None
    if all(s is None for s in state.samples):  # "replace": zeros of a good sample's shapes
        policy = ErrorPolicy(plan.on_error, len(plan.source), plan.seed)
        template = policy.template(lambda j: load_whole(plan, j, host.epoch, StageStats()), host.epoch,
                                   sorted((indices[i], e) for i, e in state.failed.items()))
    names = [f for f in plan.deferred if any(f in s for s in state.samples if s is not None)
             or (template is not None and f in template)] + sorted(state.side_fields)
    stacked = collate([None if s is None else {f: s[f] for f in names if f in s} for s in state.samples],
                      {n: plan.collate_of(n) for n in names},
                      template=None if template is None else {f: template[f] for f in names if f in template})
    data.update({k: v.to(plan.device) if isinstance(v, torch.Tensor) else v for k, v in stacked.items()})
    for i in replaced:
        _put_row(data, i, state.samples[i], plan)
    if valid is not None:
        data["valid"] = valid.to(plan.device)
    drawn = np.asarray([s["index"] if s is not None else indices[i] for i, s in enumerate(state.samples)])
    params = batch_params(plan, host.draw_number, host.epoch, drawn, state.samples, data, deferred=True)
    if replaced:  # a stand-in's own draws for the ops the workers drew for the failed sample
        params.update(batch_params(plan, host.draw_number, host.epoch, drawn, state.samples, data))
    host.params.update({k: {n: v.to(plan.device) for n, v in p.items()} for k, p in params.items()})


def _apply_on_error(plan: Plan, host: HostBatch, state: _Finishing, indices: list[int],
                    valid: torch.Tensor | None) -> tuple[list[int], torch.Tensor | None]:
    """``on_error`` for the samples that failed on the device, as `ErrorPolicy` treats them in a
    worker (a padding slot is not counted). Returns the slots a stand-in ("skip") now fills, and
    the ``valid`` mask on the host (made when "replace" empties a slot of a batch without one)."""
    if not state.failed:
        return [], valid
    policy = ErrorPolicy(plan.on_error, len(plan.source), plan.seed)
    replaced = []
    for i, err in sorted(state.failed.items()):
        def load(j: int, failed: int = indices[i], err: BaseException = err) -> dict[str, Any]:
            if j == failed:
                raise err
            return load_whole(plan, j, host.epoch, host.stats)

        real = valid is None or bool(valid[i])
        state.samples[i] = policy.load(load, indices[i], host.epoch, host.stats, counted=real)
        if state.samples[i] is not None:
            replaced.append(i)
        else:
            if valid is None:
                valid = torch.ones(len(indices), dtype=torch.bool)
            valid[i] = False
    return replaced, valid


def _put_row(data: dict[str, Any], position: int, sample: dict[str, Any], plan: Plan) -> None:
    """A stand-in's fields the workers made (label, index, the source's) into its slot of the batch."""
    for name, value in sample.items():
        if name in plan.deferred or name not in data:
            continue
        column = data[name]
        if isinstance(column, torch.Tensor):
            column[position] = torch.as_tensor(value).to(column.device, column.dtype)
        elif isinstance(column, list):
            column[position] = value
