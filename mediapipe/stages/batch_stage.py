"""The batch stage: the batch ops' parameters, drawn per sample (or once per batch) and
stacked, and the ops themselves on whole batches (on the device, or in a worker for a CPU
device: same parameters, same kernels, same values)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import numpy as np
import torch

from mediapipe.augment.base import Params
from mediapipe.plan import PlacedOp, Plan
from mediapipe.stages import scratch
from mediapipe.stages.collate import stack_params
from mediapipe.stages.draws import draw, draw_per_batch


def batch_params(plan: Plan, draw_number: int, epoch: int, indices: np.ndarray, samples: list, data: dict,
                 *, on_device: bool = False) -> dict[int, Params]:
    """Stacked parameters of the batch-stage ops. A per-sample op's draws are keyed by the
    sample's index, its shape taken from the sample (or its slot in ``data``); a per-batch op's
    (MixUp) by ``draw_number`` (`BatchTask.draw_number`: ranks differ). Ops reading a
    device-decoded field are drawn on the device once its shapes are known (``on_device=True``).
    The ops are ``epoch``'s (`Plan.at_epoch`)."""
    plan = plan.at_epoch(epoch)
    out: dict[int, Params] = {}
    for p in plan.batch_ops:
        if bool(set(p.op.inputs) & plan.device_fields) != on_device:
            continue
        if p.op.per_batch:
            out[p.index] = draw_per_batch(plan, p, epoch, draw_number, len(indices))
            continue
        shape_field = plan.shape_source.get(p.size_field, p.size_field)
        drawn = []
        for position, index in enumerate(indices.tolist()):
            sample = samples[position]
            x = sample.get(shape_field) if sample is not None else None
            if x is None and isinstance(data.get(shape_field), (torch.Tensor, list)):
                x = data[shape_field][position]
            meta = {} if x is None else {"size": tuple(x.shape[-2:]), "shape": tuple(x.shape)}
            real_index = sample["index"] if sample is not None else index
            drawn.append(draw(plan, p, epoch, real_index, meta))
        out[p.index] = stack_params(drawn)
    return out


def run_batch_ops(plan: Plan, data: dict[str, Any], params: dict[int, Params], seconds: Counter | None = None
                  ) -> dict[str, Any]:
    """The batch-stage ops on a collated batch, in order; an op another absorbs runs inside it on
    the absorber's fields, and on its own other fields (a mask, boxes) just before it. Fields
    batched as lists (boxes) are moved to the batch's device here, with the rest of the batch.
    An op may write in place what earlier ops made for this batch (`scratch`), never the
    collated batch. ``seconds`` (on the CPU, where a kernel's time is its call's) gets each op's
    time under ``"op:<its class>"``. ``plan``: the batch's epoch's (`Plan.at_epoch`)."""
    _lists_to(data, plan.device)
    fresh: set[int] = set()  # memories the ops made for this batch (`scratch`): later ops may write them
    held = set(scratch.storages(data))  # the memories of the batch's fields now
    for p in plan.batch_ops:
        if p.index in plan.done_by_next:
            continue
        t0 = time.perf_counter()
        with scratch.owned_by_stage(fresh, data, _replaced(plan, p)):
            _run_op(plan, p, data, params)
        if seconds is not None:
            seconds[f"op:{type(p.op).__name__}"] += time.perf_counter() - t0
        now = set(scratch.storages(data))
        fresh = (fresh | (now - held)) & now  # what left the batch is freed: its address may come back
        held = now
    return data


def _replaced(plan: Plan, p: PlacedOp) -> set[str]:
    """The fields op ``p`` (and the op it absorbs) overwrites with its result: an input it writes
    back under its own name (not one it reads to write another, ``out=``)."""
    ops = [p.op] + ([plan.absorbed[p.index].op] if p.index in plan.absorbed else [])
    return {src for op in ops for src, dst in zip(op.inputs, op.outputs) if src == dst}


def _run_op(plan: Plan, p: PlacedOp, data: dict[str, Any], params: dict[int, Params]) -> None:
    """One batch op on ``data``, with the op it absorbs (if any)."""
    before = plan.absorbed.get(p.index)
    if before is None:
        p.op.apply_fields(data, params[p.index])
        return
    rest = [f for f in before.op.inputs if f not in p.op.inputs]
    if rest:
        before.op.apply_fields(data, params[before.index], only=rest,
                               canvas_size=before.op.canvas_of(data, p.op.inputs))
    for field in p.op.inputs:
        data[field] = p.op.apply_absorbing(data[field], params[p.index], before.op, params[before.index])


def _lists_to(data: dict[str, Any], device: torch.device) -> None:
    """Each tensor of a list field (one per sample) on ``device``."""
    if device.type == "cpu":
        return
    for name, value in data.items():
        if isinstance(value, list) and any(isinstance(v, torch.Tensor) and v.device != device for v in value):
            data[name] = [v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for v in value]
