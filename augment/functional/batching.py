"""Run a batch kernel on one sample: when a batch-stage op is placed in the sample stage
(a later sample-stage op reads its output), it gets one sample and plain Python params."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def is_single(params: dict[str, Any]) -> bool:
    """True when the params are one sample's plain values, not tensors stacked over a batch."""
    return any(not isinstance(v, torch.Tensor) for v in params.values())


def as_batch(x: torch.Tensor, params: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any], bool]:
    """(x, params, False) for a batch; (x[None], params as (1, ...) tensors, True) for one sample."""
    if not is_single(params):
        return x, params, False
    batched = {}
    for name, value in params.items():
        if isinstance(value, bool):
            batched[name] = torch.tensor([value], dtype=torch.bool)
        elif isinstance(value, int):
            batched[name] = torch.tensor([value], dtype=torch.int64)
        elif isinstance(value, float):
            batched[name] = torch.tensor([value], dtype=torch.float32)
        else:
            batched[name] = torch.as_tensor(np.asarray(value))[None]
    return x[None], batched, True
