"""Collate: per-sample tensors and numbers to batch tensors; per-sample params to tensors.

Batches are written into `mediapipe.memory` buffers, so a worker's batch crosses the
process boundary without a copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mediapipe import memory
from mediapipe.augment.base import Params
from mediapipe.errors import PipelineError


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


def collate(samples: list[dict[str, Any] | None], policies: dict[str, str],
            indices: list[int] | None = None, private: frozenset[str] = frozenset(),
            template: dict[str, Any] | None = None) -> dict[str, Any]:
    """Stack each field over the batch; "pad" fields are padded on their last dim and get
    ``<field>_lengths``. A failed sample (None, under on_error="replace") becomes zeros,
    label -1, and keeps its own ``index``; when every sample failed, ``template`` (a good
    sample) gives the fields, shapes and dtypes. Fields in ``private`` stay in this process
    (a worker's batch-stage op replaces them): they skip the shared-memory allocation."""
    present = [s for s in samples if s is not None]
    reference = present[0] if present else template
    if reference is None:
        raise PipelineError("every sample of a batch failed to load")
    out: dict[str, Any] = {}
    for name, first in reference.items():
        values = [s.get(name) if s is not None else None for s in samples]
        if name == "index" and indices is not None:
            values = list(indices)
        if isinstance(first, torch.Tensor):
            out.update(_collate_tensors(name, values, policies.get(name, "stack"), name in private,
                                        like=first))
        elif isinstance(first, (bool, int, float, np.integer, np.floating)):
            dtype = torch.int64 if isinstance(first, (int, np.integer)) and not isinstance(first, bool) else None
            filled = [v if v is not None else (-1 if name == "label" else 0) for v in values]
            out[name] = torch.tensor(filled, dtype=dtype if dtype is not None else torch.float32)
        else:
            out[name] = values
    return out


def _collate_tensors(name: str, values: list[torch.Tensor | None], policy: str,
                     private: bool = False, like: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    present = [v for v in values if v is not None] or [like]
    first = present[0]
    if policy == "pad":
        length = max(v.shape[-1] for v in present)
        shape = (len(values), *first.shape[:-1], length)
        # written once: each row's samples, then zeros past its length (never zero-fill, then copy)
        out = torch.empty(shape, dtype=first.dtype) if private else memory.empty(shape, dtype=first.dtype)
        lengths = torch.zeros(len(values), dtype=torch.int64)
        for i, v in enumerate(values):
            n = 0 if v is None else v.shape[-1]
            if n:
                out[i, ..., :n] = v
                lengths[i] = n
            out[i, ..., n:] = 0
        return {name: out, f"{name}_lengths": lengths}
    shapes = {tuple(v.shape) for v in present}
    if len(shapes) > 1:
        raise PipelineError(
            f"field {name!r} has shapes {sorted(shapes)[:4]} in one batch: add a sample-stage op that gives "
            "every sample one size (RandomResizedCrop, Resize with an exact size, CenterCrop)"
        )
    shape = (len(values), *first.shape)
    out = torch.empty(shape, dtype=first.dtype) if private else memory.empty(shape, dtype=first.dtype)
    for i, v in enumerate(values):
        if v is None:
            out[i].zero_()
        else:
            out[i].copy_(v)
    return {name: out}
