"""The device-decode stage: fields whose decoder runs on the device (nvJPEG through
nvImageCodec) are decoded here, a whole batch per call, in the training process.

The workers have already read the bytes, checked the headers and drawn every parameter they
could (the fused crop's too), so the values do not depend on where decoding ran. One batch
goes through four steps, each once:

1. `decode_on_device`: each device field of the batch in one `decode_batch` call, then the op
   fused into its decoder on every decoded sample at once (a RandomResizedCrop resizes every
   decoded region in one call) where it has a batched form;
2. `run_device_ops`: the sample-stage ops placed after the decode, per sample, with the keyed
   draws a worker would have made;
3. ``on_error`` for the samples that failed in steps 1-2, as a worker treats them;
4. the device fields collated once, and the batch-stage parameters that needed their shapes.

A stand-in for a sample that failed here ("skip") is a sample like any other: the worker's
half (`SampleStage.load`) then steps 1-2, in this process.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from mediapipe.decoders.base import NO_HINT, Decoded, Decoder
from mediapipe.errors import MediapipeError, PipelineError
from mediapipe.plan import Plan
from mediapipe.stages.batch_stage import batch_params, run_batch_ops
from mediapipe.stages.collate import collate
from mediapipe.stages.host_batch import HostBatch
from mediapipe.stages.progress import PendingDecode, SampleProgress
from mediapipe.stages.sample_ops import run_sample_ops
from mediapipe.stages.sample_stage import SampleStage
from mediapipe.stages.stats import StageStats


class DeviceSamples:
    """The samples of a batch (or one stand-in) on their way through the device: the fields
    each has made here, its progress from the worker, and the samples that failed."""

    def __init__(self, count: int) -> None:
        self.samples: list[dict[str, Any] | None] = [{} for _ in range(count)]
        self.progress: list[SampleProgress | None] = [None] * count
        self.failed: dict[int, BaseException] = {}
        self.side_fields: set[str] = set()

    def fail(self, position: int, err: BaseException) -> None:
        self.failed.setdefault(position, err)
        self.samples[position] = None

    def arrived(self, position: int, pending: PendingDecode) -> SampleProgress:
        """Sample ``position``'s progress, with what its field ``pending`` brought from the worker."""
        progress = self.progress[position]
        if progress is None:
            progress = self.progress[position] = pending.progress
        else:
            progress.merge(pending.progress)
        return progress


def finish_batch(plan: Plan, host: HostBatch, on_host: dict[str, Any] | None = None,
                 stats: StageStats | None = None) -> dict[str, Any]:
    """What is left of a worker's batch in the training process, once it is on the device: the
    device decode (steps 1-4) when the plan has one, then the batch-stage ops unless the worker
    ran them. Returns the finished batch; ``stats`` gets the device decode's seconds. The ops are
    those of the batch's epoch (`Plan.at_epoch`)."""
    plan = plan.at_epoch(host.epoch)
    if plan.device_fields:
        t0 = time.perf_counter()
        finish_on_device(plan, host, on_host)
        if stats is not None:
            stats.seconds["device_decode"] += time.perf_counter() - t0
    if host.batch_ops_where == "worker":
        return host.data
    return run_batch_ops(plan, host.data, host.params)


def finish_on_device(plan: Plan, host: HostBatch, on_host: dict[str, Any] | None = None) -> None:
    """Decode ``host``'s device-decoded fields on ``plan.device`` and finish their sample stage, in place.

    ``on_host``: the worker's batch as it arrived (its ``index`` and ``valid`` on the CPU), when
    ``host.data`` already moved to the device; the stage then never reads a device tensor back."""
    data = host.data
    on_host = data if on_host is None else on_host
    indices = [int(i) for i in on_host["index"].tolist()]
    valid = on_host.get("valid")
    valid = valid.clone().cpu() if valid is not None else None
    pending = {name: data.pop(name) for name in plan.device_decoders()}
    batch = finish_samples(plan, pending, indices, host.epoch, host.stats, data, on_host)
    failed = sorted(batch.failed)
    replaced, valid = _apply_on_error(plan, host, batch, indices, valid)
    worker_made = [name for name in data if name != "valid"]
    device_made = _collate_device_fields(plan, host, batch, indices)
    data.update(device_made)
    if failed:  # the slots' other fields follow: a stand-in's, or emptied as a worker empties them
        _put_rows(data, on_host, {i: batch.samples[i] for i in failed}, [n for n in worker_made if n not in device_made],
                  plan)
    if valid is not None:
        data["valid"] = valid.to(plan.device)
    drawn = np.asarray([s["index"] if s is not None else indices[i] for i, s in enumerate(batch.samples)])
    params = batch_params(plan, host.draw_number, host.epoch, drawn, batch.samples, data, on_device=True)
    if replaced:  # a stand-in's own draws for the ops the workers drew for the failed sample
        params.update(batch_params(plan, host.draw_number, host.epoch, drawn, batch.samples, data))
    host.params.update({k: {n: v.to(plan.device) if isinstance(v, torch.Tensor) else v for n, v in p.items()}
                        for k, p in params.items()})  # a per-batch draw may be a number (MixUp's lambda)


def finish_samples(plan: Plan, pending: dict[str, list[PendingDecode | None]], indices: list[int], epoch: int,
                   stats: StageStats, worker_fields: dict[str, Any], on_host: dict[str, Any]) -> DeviceSamples:
    """Steps 1 and 2 for the samples ``indices``: ``pending`` holds each device field's `PendingDecode`
    per sample (None: the sample failed in the worker), ``worker_fields`` what the workers made."""
    plan = plan.at_epoch(epoch)
    batch = DeviceSamples(len(indices))
    for name, decoder in plan.device_decoders().items():
        decode_on_device(plan, name, decoder, batch, pending[name], stats)
    run_device_ops(plan, batch, indices, epoch, worker_fields, on_host)
    return batch


def decode_on_device(plan: Plan, name: str, decoder: Decoder, batch: DeviceSamples, pending: list[PendingDecode | None],
                     stats: StageStats) -> None:
    """Field ``name`` of every live sample in one `decode_batch` call, then the fused op on all
    of them at once (`Op.apply_decoded_batch`) or, where it has no batched form, per sample."""
    for i, d in enumerate(pending):
        if d is None:  # the sample failed in the worker (on_error="replace")
            batch.samples[i] = None
    todo = [i for i, s in enumerate(batch.samples) if s is not None]
    decoded = decoder.decode_batch([pending[i].blob for i in todo], [pending[i].hint for i in todo],
                                   [pending[i].meta for i in todo]) if todo else []
    fused = plan.fused.get(name)
    hinted: list[tuple[int, torch.Tensor]] = []
    for i, x in zip(todo, decoded):
        if isinstance(x, BaseException):
            batch.fail(i, x)
            continue
        batch.arrived(i, pending[i])
        if isinstance(x, Decoded):  # side fields, as the workers' decoders give them
            extra = {f"{name}_{side}": value for side, value in x.fields.items()}
            batch.samples[i].update(extra)
            batch.side_fields.update(extra)
            if x.fallback is not None:
                stats.count_fallback(decoder.name, x.fallback)
            x = x.value
        if decoder.auto_fallback is not None:
            stats.count_fallback(decoder.name, decoder.auto_fallback)
        if fused is not None and pending[i].hint is not NO_HINT:
            hinted.append((i, x))
        batch.samples[i][name] = x
    if hinted:
        _finish_fused(fused, name, batch, hinted)


def _finish_fused(fused: Any, name: str, batch: DeviceSamples, hinted: list[tuple[int, torch.Tensor]]) -> None:
    """The op fused into field ``name``'s decoder, on the decoded samples it hinted, batched where it can."""
    params = [batch.progress[i].drawn[fused.index] for i, _ in hinted]
    done = fused.op.apply_decoded_batch([x for _, x in hinted], params)
    output = fused.op.outputs[fused.op.inputs.index(name)]
    for k, (i, x) in enumerate(hinted):
        x = done[k] if done is not None else fused.op.apply_decoded(x, params[k])
        batch.progress[i].done.add((fused.index, name))
        batch.samples[i][output] = batch.samples[i][name] = x


def run_device_ops(plan: Plan, batch: DeviceSamples, indices: list[int], epoch: int, worker_fields: dict[str, Any],
                   on_host: dict[str, Any]) -> None:
    """The sample-stage ops after the device decode, per sample; fields the workers made that such
    an op also reads (an image's mask, the boxes a fused crop moves) come from ``worker_fields``,
    the collated batch (``on_host``: the same batch on the CPU, for the lengths of padded fields)."""
    ops = plan.device_sample_ops
    borrowed = {f for p in ops for f in p.op.reads()} - set(plan.device_decoders())
    for i, sample in enumerate(batch.samples):
        if sample is None:
            continue
        sample["index"] = indices[i]  # keys this sample's batch-stage draws
        for key in (borrowed & worker_fields.keys()) - sample.keys():
            sample[key] = _worker_row(plan, key, i, worker_fields, on_host)
        try:
            run_sample_ops(plan, ops, sample, batch.progress[i], epoch, indices[i], plan.source.ref(indices[i]).key)
        except MediapipeError as err:
            batch.fail(i, err)


def _worker_row(plan: Plan, name: str, position: int, batch: dict[str, Any], on_host: dict[str, Any]) -> Any:
    """Sample ``position``'s field ``name`` as the worker made it, from the collated ``batch``: a
    padded field (boxes batched "pad") cut back to its length, on the plan's device."""
    row = batch[name][position]
    lengths = on_host.get(f"{name}_lengths")
    if isinstance(lengths, torch.Tensor) and plan.collate_of(name)[0] == "pad":
        axis = plan.collate_of(name)[1] % max(row.ndim, 1)
        row = row.narrow(axis, 0, int(lengths[position]))
    return row.to(plan.device) if isinstance(row, torch.Tensor) else row


def load_stand_in(plan: Plan, index: int, epoch: int, stats: StageStats) -> dict[str, Any]:
    """Sample ``index`` made entirely in this process, for ``on_error``: the worker's half, then
    steps 1 and 2 of the device's."""
    plan = plan.at_epoch(epoch)
    sample = SampleStage(plan).load(index, epoch, stats)
    pending = {name: [sample.pop(name)] for name in plan.device_decoders()}
    worker_fields = {k: [v] for k, v in sample.items()}
    batch = finish_samples(plan, pending, [index], epoch, stats, worker_fields, worker_fields)
    if batch.failed:
        raise batch.failed[0]
    return {**sample, **batch.samples[0]}


def _apply_on_error(plan: Plan, host: HostBatch, batch: DeviceSamples, indices: list[int],
                    valid: torch.Tensor | None) -> tuple[list[int], torch.Tensor | None]:
    """``on_error`` for the samples that failed on the device, as `ErrorPolicy` treats them in a
    worker (a padding slot is not counted). Returns the slots a stand-in ("skip") now fills, and
    the ``valid`` mask on the host (made when "replace" empties a slot of a batch without one)."""
    replaced = []
    for i, err in sorted(batch.failed.items()):
        def load(j: int, failed: int = indices[i], err: BaseException = err) -> dict[str, Any]:
            if j == failed:
                raise err
            return load_stand_in(plan, j, host.epoch, host.stats)

        if i in host.stand_ins:  # the stand-in a worker chose failed here: that search goes on
            wanted, failure = host.stand_ins[i]
            batch.samples[i] = plan.error_policy.stand_in_again(load, wanted, host.epoch, failure, indices[i], err)
            replaced.append(i)
            continue

        real = valid is None or bool(valid[i])
        batch.samples[i] = plan.error_policy.load(load, indices[i], host.epoch, host.stats, counted=real)
        if batch.samples[i] is not None:
            replaced.append(i)
        else:
            if valid is None:
                valid = torch.ones(len(indices), dtype=torch.bool)
            valid[i] = False
    return replaced, valid


def _collate_device_fields(plan: Plan, host: HostBatch, batch: DeviceSamples, indices: list[int]) -> dict[str, Any]:
    """The fields made on the device, collated once, on the device. A batch in which every
    sample failed ("replace") takes zeros of a good sample's shapes."""
    template = None
    if all(s is None for s in batch.samples):
        failures = sorted((indices[i], e) for i, e in batch.failed.items())
        template = plan.error_policy.template(lambda j: load_stand_in(plan, j, host.epoch, StageStats()), host.epoch,
                                              failures)
    names = [f for f in plan.device_fields if any(f in s for s in batch.samples if s is not None)
             or (template is not None and f in template)] + sorted(batch.side_fields)
    stacked = collate([None if s is None else {f: s[f] for f in names if f in s} for s in batch.samples],
                      {n: plan.collate_of(n) for n in names},
                      template=None if template is None else {f: template[f] for f in names if f in template})
    return {k: v.to(plan.device) if isinstance(v, torch.Tensor) else v for k, v in stacked.items()}


def _put_rows(data: dict[str, Any], on_host: dict[str, Any], rows: dict[int, dict[str, Any] | None],
              names: list[str], plan: Plan) -> None:
    """The fields the workers made (label, index, the source's: boxes, texts) of the slots in ``rows``,
    for the sample the device put in each: a stand-in's values, or for an emptied slot (None) what
    `collate` gives a failed sample (zeros, label -1, no rows, None; its own index)."""
    padded = {n for n in names if plan.collate_of(n)[0] == "pad" and f"{n}_lengths" in data}
    for name in names:
        if name in {f"{p}_lengths" for p in padded}:
            continue
        values = {i: _row_value(name, s, data[name]) for i, s in rows.items()}
        column = data[name]
        if name in padded and isinstance(column, torch.Tensor):
            _put_padded_rows(data, on_host, name, values, plan.collate_of(name)[1])
        elif isinstance(column, list):
            for i, value in values.items():
                column[i] = _list_row(column, value)
        elif isinstance(column, torch.Tensor):
            for i, value in values.items():
                if not (value is None and name == "index"):  # an emptied slot keeps its own index
                    _put_stacked_row(column, name, i, value)


def _row_value(name: str, sample: dict[str, Any] | None, column: Any) -> Any:
    """Field ``name`` of the sample now in a slot (None: emptied); a stand-in lacking a tensor or
    number field the batch has is refused, as `collate` refuses it."""
    if sample is not None and name not in sample and not isinstance(column, list):
        raise PipelineError(f"field {name!r} is missing from sample {sample.get('index')}, the stand-in of a "
                            "batch whose other samples have it: give every sample the field, or leave it out of "
                            "all of them")
    return None if sample is None else sample.get(name)


def _list_row(column: list, value: Any) -> Any:
    """A list field's row for ``value``: a failed sample's is no rows (an empty tensor), or None."""
    if value is not None:
        return value
    like = next((v for v in column if isinstance(v, torch.Tensor)), None)
    if like is None:
        return None
    return like.new_zeros((0, *like.shape[1:])) if like.ndim else like.new_zeros(())


def _put_stacked_row(column: torch.Tensor, name: str, position: int, value: Any) -> None:
    """A stacked field's row: ``value``, or a failed sample's zeros (label -1)."""
    if value is None:
        column[position] = -1 if name == "label" and column.ndim == 1 else 0
        return
    value = torch.as_tensor(value)
    if tuple(value.shape) != tuple(column.shape[1:]):
        raise PipelineError(f"field {name!r} has shapes {[tuple(column.shape[1:]), tuple(value.shape)]} in one "
                            "batch: give every sample one size, or batch it as a list or padded: "
                            f"Pipeline(collate={{{name!r}: 'list'}}) or 'pad'")
    column[position] = value.to(column.device, column.dtype)


def _put_padded_rows(data: dict[str, Any], on_host: dict[str, Any], name: str, values: dict[int, Any],
                     axis: int) -> None:
    """A padded field's rows and lengths for ``values`` (None: no rows), padded to the longest row
    as `collate` pads; the lengths are read on the host, never from the device."""
    column = data[name]
    axis = axis % max(column.ndim - 1, 1) + 1  # the padded axis of the batch (dim 0: the samples)
    lengths = on_host[f"{name}_lengths"].clone()
    for i, value in values.items():
        lengths[i] = 0 if value is None else int(torch.as_tensor(value).shape[axis - 1])
    longest = int(lengths.max()) if len(lengths) else 0
    out = column.new_zeros((*column.shape[:axis], longest, *column.shape[axis + 1:]))
    kept = min(longest, column.shape[axis])
    out.narrow(axis, 0, kept).copy_(column.narrow(axis, 0, kept))
    for i, value in values.items():
        out[i].zero_()
        if value is not None and int(lengths[i]):
            out[i].narrow(axis - 1, 0, int(lengths[i])).copy_(torch.as_tensor(value).to(out.device, out.dtype))
    on_host[f"{name}_lengths"] = lengths
    data[name], data[f"{name}_lengths"] = out, lengths.to(data[f"{name}_lengths"].device)
