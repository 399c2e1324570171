"""The device-decode stage: fields whose decoder runs on the device (nvJPEG through
nvImageCodec) are decoded here, a whole batch per call, in the training process.

The workers have already read the bytes, checked the headers and drawn every random
parameter (the fused crop's too), so the values do not depend on where decoding ran.
After decoding, the sample-stage ops that follow run per sample on the device, the
fields are stacked there, and the batch-stage parameters that needed their shapes are
drawn with the same keys the workers would have used.
"""

from __future__ import annotations

from typing import Any

import torch

from mediapipe.batch_stage import batch_params
from mediapipe.collate import collate
from mediapipe.decoders.base import NO_HINT, Decoded
from mediapipe.errors import MediapipeError, SampleUnavailableError
from mediapipe.host_batch import Deferred, HostBatch
from mediapipe.plan import Plan
from mediapipe.sample_stage import SampleStage, canvas_key


def finish_deferred(plan: Plan, host: HostBatch) -> None:
    """Decode ``host``'s deferred fields on ``plan.device`` and finish their sample stage, in place."""
    data = host.data
    indices = [int(i) for i in data["index"].tolist()]
    samples: list[dict[str, Any] | None] = [{} for _ in indices]
    caches: list[dict[int, Any]] = [{} for _ in indices]
    dones: list[set] = [set() for _ in indices]
    metas: list[dict[str, Any]] = [{} for _ in indices]
    side_fields: set[str] = set()
    for name, decoder in plan.device_decoders().items():
        pending: list[Deferred | None] = data.pop(name)
        for i, d in enumerate(pending):
            if d is None:  # the sample failed in the worker (on_error="replace")
                samples[i] = None
        todo = [i for i, s in enumerate(samples) if s is not None]
        decoded = decoder.decode_batch([pending[i].blob for i in todo], [pending[i].hint for i in todo],
                                       [pending[i].meta for i in todo]) if todo else []
        fused = plan.fused.get(name)
        for i, x in zip(todo, decoded):
            d = pending[i]
            if isinstance(x, BaseException):
                _fail(plan, host, i, x)
                samples[i] = None
                continue
            metas[i] = d.meta
            if isinstance(x, Decoded):  # side fields, as the workers' decoders give them
                extra = {f"{name}_{side}": value for side, value in x.fields.items()}
                samples[i].update(extra)
                side_fields.update(extra)
                x = x.value
            if fused is not None:
                caches[i][fused.index] = d.fused_params
                caches[i][canvas_key(fused.index)] = d.meta.get("size")
            if fused is not None and d.hint is not NO_HINT:
                x = fused.op.apply_decoded(x, d.fused_params)
                dones[i].add((fused.index, name))
                samples[i][fused.op.outputs[fused.op.inputs.index(name)]] = x
            samples[i][name] = x
    if all(s is None for s in samples):  # nothing decoded to take shapes from, and no worker to redraw
        raise SampleUnavailableError(plan.on_error, [plan.source.ref(i).key for i in indices], [],
                                     "every sample of the batch failed, and the device has no good one "
                                     "to take the shapes from")
    # fields the workers finished that a deferred op also reads (an image's mask): per sample
    borrowed = {f for p in plan.sample_ops if p.index in plan.deferred_ops for f in p.op.reads()} - plan.deferred
    stage = SampleStage(plan)
    for i, sample in enumerate(samples):
        if sample is None:
            continue
        sample["index"] = indices[i]  # keys this sample's batch-stage draws
        for key in borrowed & data.keys():
            sample[key] = data[key][i].to(plan.device)
        stage.run_ops(sample, host.epoch, indices[i], metas[i], caches[i], dones[i], deferred=True,
                      key=plan.source.ref(indices[i]).key)
    names = [f for f in plan.deferred if any(s is not None and f in s for s in samples)] + sorted(side_fields)
    stacked = collate([None if s is None else {f: s[f] for f in names} for s in samples],
                      {n: plan.collate_of(n) for n in names})
    data.update(stacked)
    params = batch_params(plan, host.draw_number, host.epoch, data["index"], samples, data, deferred=True)
    host.params.update({k: {n: v.to(plan.device) for n, v in p.items()} for k, p in params.items()})


def _fail(plan: Plan, host: HostBatch, position: int, err: BaseException) -> None:
    """A sample that failed on the device: raise, or zero it and flag it (no worker can redraw it)."""
    if plan.on_error == "raise" or not isinstance(err, MediapipeError):
        raise err
    valid = host.data.get("valid")
    if valid is None:
        valid = host.data["valid"] = torch.ones(len(host.data["index"]), dtype=torch.bool)
    if valid[position]:  # a real sample's slot (padding repeats one: counted once)
        host.stats.count_error(err)
    valid[position] = False
