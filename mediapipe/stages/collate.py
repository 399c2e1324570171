"""Collate: per-sample tensors and numbers to batch tensors; per-sample params to tensors.

Each field batches by its policy (see `mediapipe.fields`): "stack" (equal shapes), "pad" (the
varying axis padded with zeros, plus ``<field>_lengths``), or "list" (a `TensorList` of the
samples' tensors: boxes, whose count varies per sample). Batches are written on the
samples' device (a field decoded on a GPU stays there), into `mediapipe.stages.memory` buffers on the
CPU, so a worker's batch crosses the process boundary without a copy; a list crosses as one
packed tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mediapipe.augment.base import Params
from mediapipe.errors import PipelineError
from mediapipe.stages import memory


def stack_params(drawn: list[Params]) -> Params:
    """Per-sample parameter dicts to one dict of tensors with a leading batch dim."""
    if not drawn or not drawn[0]:
        return {}
    out = {}
    for name in drawn[0]:
        values = [d[name] for d in drawn]
        first = values[0]
        if isinstance(first, torch.Tensor):
            out[name] = torch.stack(values)
        elif isinstance(first, bool):
            out[name] = torch.tensor(values, dtype=torch.bool)
        elif isinstance(first, int):
            out[name] = torch.tensor(values, dtype=torch.int64)
        elif isinstance(first, float):
            out[name] = torch.tensor(values, dtype=torch.float32)
        else:
            out[name] = torch.as_tensor(np.asarray(values))
    return out


Policy = str | tuple[str, int]  # "stack" | "pad" | "list", with the axis "pad" pads (default: the last)


class TensorList(list):
    """A batch field as a list of per-sample tensors (boxes: (N_i, 4) each). It pickles as one
    tensor of the samples concatenated along dim 0 and their lengths, so a worker sends it as
    one shared buffer, not one per sample."""

    def __reduce__(self) -> tuple:
        tensors = [t for t in self if isinstance(t, torch.Tensor)]
        packable = (len(tensors) == len(self) and len(self) > 0 and all(t.ndim >= 1 for t in tensors)
                    and len({(t.shape[1:], t.dtype, t.device) for t in tensors}) == 1)
        if not packable:
            return (TensorList, (list(self),))
        return (_unpack, (torch.cat(tensors), [t.shape[0] for t in tensors]))


def _unpack(packed: torch.Tensor, lengths: list[int]) -> TensorList:
    return TensorList(packed.split(lengths))


def collate(samples: list[dict[str, Any] | None], policies: dict[str, Policy],
            indices: list[int] | None = None, private: frozenset[str] = frozenset(),
            template: dict[str, Any] | None = None) -> dict[str, Any]:
    """Batch each field by its policy (default "stack"); "pad" fields get ``<field>_lengths``.
    A failed sample (None, under on_error="replace") becomes zeros (no rows in a list or a padded
    field), label -1, and keeps its own ``index``; when every sample failed, ``template`` (a good
    sample) gives the fields, shapes and dtypes. Fields in ``private`` stay in this process
    (a worker's batch-stage op replaces them): they skip the shared-memory allocation."""
    present = [s for s in samples if s is not None]
    reference = present[0] if present else template
    if reference is None:
        raise PipelineError("every sample of a batch failed to load")
    out: dict[str, Any] = {}
    for name, first in _fields(reference, present).items():
        values = [s.get(name) if s is not None else None for s in samples]
        if name == "index" and indices is not None:
            values = list(indices)
        elif isinstance(first, (torch.Tensor, bool, int, float, np.integer, np.floating)):
            _require_everywhere(name, samples, indices)
        if isinstance(first, torch.Tensor):
            policy = policies.get(name, "stack")
            policy, axis = (policy, -1) if isinstance(policy, str) else policy
            out.update(_collate_tensors(name, values, policy, name in private, like=first, axis=axis))
        elif isinstance(first, (bool, int, float, np.integer, np.floating)):
            dtype = torch.int64 if isinstance(first, (int, np.integer)) and not isinstance(first, bool) else None
            filled = [v if v is not None else (-1 if name == "label" else 0) for v in values]
            out[name] = torch.tensor(filled, dtype=dtype if dtype is not None else torch.float32)
        else:
            out[name] = values
    return out


def _fields(reference: dict[str, Any], present: list[dict[str, Any]]) -> dict[str, Any]:
    """Every field of the batch's samples, each with its first value (a field the first sample
    lacks is not dropped)."""
    fields = dict(reference)
    for sample in present:
        for name, value in sample.items():
            fields.setdefault(name, value)
    return fields


def _require_everywhere(name: str, samples: list[dict[str, Any] | None], indices: list[int] | None) -> None:
    """A tensor or number field must be in every loaded sample: a zero in its place would pass for
    data. (A text or other field missing from a sample is None in the batch's list.)"""
    lacking = [i for i, s in enumerate(samples) if s is not None and name not in s]
    if lacking:
        which = [indices[i] for i in lacking] if indices is not None else lacking
        raise PipelineError(f"field {name!r} is missing from sample(s) {which[:8]} of a batch whose other samples "
                            "have it: give every sample the field (a default in the source or manifest), or "
                            "leave it out of all of them")


def _collate_tensors(name: str, values: list[torch.Tensor | None], policy: str, private: bool = False,
                     like: torch.Tensor | None = None, axis: int = -1) -> dict[str, Any]:
    present = [v for v in values if v is not None] or [like]
    first = present[0]
    if policy == "list":
        empty = first.new_zeros((0, *first.shape[1:])) if first.ndim else first.new_zeros(())
        return {name: TensorList(v if v is not None else empty for v in values)}
    if policy == "pad":
        return _collate_padded(name, values, first, axis % max(first.ndim, 1), private)
    shapes = {tuple(v.shape) for v in present}
    if len(shapes) > 1:
        raise PipelineError(
            f"field {name!r} has shapes {sorted(shapes)[:4]} in one batch: add a sample-stage op that gives "
            "every sample one size (RandomResizedCrop, Resize with an exact size, CenterCrop), or batch it as "
            f"a list or padded: Pipeline(collate={{{name!r}: 'list'}}) or 'pad'"
        )
    stacked = _rows_of_one_tensor(values)
    if stacked is not None:
        return {name: stacked}
    shape = (len(values), *first.shape)
    out = _empty(shape, first, private)
    for i, v in enumerate(values):
        if v is None:
            out[i].zero_()
        else:
            out[i].copy_(v)
    return {name: out}


def _empty(shape: tuple[int, ...], like: torch.Tensor, private: bool) -> torch.Tensor:
    """A batch buffer on the samples' device: a field decoded on a device stays there. On the CPU
    in a worker, shared memory (`mediapipe.stages.memory`) unless the field stays ``private``."""
    if private or like.device.type != "cpu":
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    return memory.empty(shape, dtype=like.dtype)


def _rows_of_one_tensor(values: list[torch.Tensor | None]) -> torch.Tensor | None:
    """The (B, ...) tensor whose rows ``values`` are, in order, when a batched kernel made them
    so (the device stage's batched resize): the batch without a copy. None otherwise (and in a
    worker, whose batches belong in shared memory)."""
    first = values[0]
    if first is None or len(values) < 2 or not first.is_contiguous() or memory.worker_id() is not None:
        return None
    storage, start, step = first.untyped_storage().data_ptr(), first.storage_offset(), first.numel()
    for i, v in enumerate(values):
        if (v is None or v.untyped_storage().data_ptr() != storage or v.storage_offset() != start + i * step
                or v.shape != first.shape or not v.is_contiguous()):
            return None
    return first.as_strided((len(values), *first.shape), (step, *first.stride()), start)


def _collate_padded(name: str, values: list[torch.Tensor | None], first: torch.Tensor, axis: int,
                    private: bool) -> dict[str, torch.Tensor]:
    """(B, ...) with ``axis`` padded to the longest sample: audio's time (last), boxes' objects (first).
    A sample with nothing on that axis (no boxes) may have any other shape: it only gets zeros."""
    present = [v for v in values if v is not None and v.shape[axis] > 0]
    first = present[0] if present else first
    others = {tuple(s for d, s in enumerate(v.shape) if d != axis) for v in present}
    if len(others) > 1:
        raise PipelineError(f"field {name!r} has shapes {sorted(others)[:4]} besides its padded axis {axis} "
                            "in one batch: only that axis may vary")
    length = max(v.shape[axis] for v in present or [first])
    shape = list(first.shape)
    shape[axis] = length
    shape = (len(values), *shape)
    # written once: each row's samples, then zeros past its length (never zero-fill, then copy)
    out = _empty(shape, first, private)
    lengths = torch.zeros(len(values), dtype=torch.int64, device=first.device)
    for i, v in enumerate(values):
        n = 0 if v is None else min(v.shape[axis], length) if v.ndim == first.ndim else 0
        row = out[i]
        if n:
            row.narrow(axis, 0, n).copy_(v)
            lengths[i] = n
        row.narrow(axis, n, length - n).zero_()
    return {name: out, f"{name}_lengths": lengths}
