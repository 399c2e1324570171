"""An op's parameters, as one sample's plain values (drawn in the sample stage) or tensors stacked
over a batch (B, ...): one sample as a batch of one, one sample's slice of a batch, and per-sample
values spread over the rows of objects (boxes, keypoints), each row with its sample's."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

Params = dict[str, Any]


def is_single(params: Params) -> bool:
    """True when the params are one sample's plain values, not tensors stacked over a batch."""
    return any(not isinstance(v, torch.Tensor) for v in params.values())


def promote(x: Any, params: Params) -> tuple[Any, Params]:
    """One sample and its plain params as a batch of one: x[None] and (1, ...) tensors."""
    batched = {}
    for name, value in params.items():
        if isinstance(value, torch.Tensor):
            batched[name] = value[None]
        elif isinstance(value, bool):
            batched[name] = torch.tensor([value], dtype=torch.bool)
        elif isinstance(value, int):
            batched[name] = torch.tensor([value], dtype=torch.int64)
        elif isinstance(value, float):
            batched[name] = torch.tensor([value], dtype=torch.float32)
        else:
            batched[name] = torch.as_tensor(np.asarray(value))[None]
    return (x[None] if isinstance(x, torch.Tensor) else x), batched


def sample_slice(params: Params, i: int) -> Params:
    """Sample ``i``'s params of a stacked batch, as a batch of one."""
    return {k: v[i : i + 1] if isinstance(v, torch.Tensor) and v.ndim else v for k, v in params.items()}


def expand_rows(params: Params, sample: torch.Tensor) -> Params:
    """Per-sample params (B, ...) to per-row params: row r gets sample ``sample[r]``'s values."""
    out = {}
    for k, v in params.items():
        if isinstance(v, torch.Tensor) and v.ndim:
            out[k] = v.index_select(0, sample.to(v.device))
        else:
            out[k] = v
    return out
