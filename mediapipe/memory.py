"""Batch buffers allocated in shared memory inside loader worker processes.

A tensor that a worker sends to the training process must live in shared memory;
torch's queue copies an ordinary tensor there at send time. A kernel that writes a
batch (collate, Normalize) allocates through `empty` instead, so in a worker the batch
is written into shared memory once and crosses the process boundary without a copy:
for a float32 batch of 64 images at 224 px that halved the cost of normalising and
sending it. Outside workers `empty` is plain ``torch.empty``.
"""

from __future__ import annotations

import math

import torch

_in_worker = False


def use_shared_memory(enabled: bool = True) -> None:
    """Called once in each worker process: from now on `empty` allocates in shared memory."""
    global _in_worker
    _in_worker = enabled


def empty(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """An uninitialised tensor; in a worker process, on the CPU, backed by shared memory."""
    if not _in_worker or torch.device(device).type != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    storage = torch.UntypedStorage._new_shared(max(nbytes, 1))
    return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))
