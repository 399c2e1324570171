"""Batch buffers in shared memory inside loader worker processes, recycled once consumed.

A tensor that a worker sends to the training process must live in shared memory;
torch's queue copies an ordinary tensor there at send time. A kernel that writes a
batch (collate, Normalize) allocates through `empty` instead, so in a worker the batch
is written into shared memory once and crosses the process boundary without a copy.

Fresh shared memory costs a page fault per 4 KiB page on first write (for a float32
image batch, a large part of what Normalize costs), so a worker keeps the
buffers it lent and reuses one as soon as the training process says that every tensor
on it is gone (`release`): the consumer watches its batches with storage weak
references, so a buffer is never rewritten while any view of it is alive. Buffers come in
size classes (`size_class`), and a request takes the smallest free one that fits, so padded
batches whose length changes every time (audio) reuse them too.
Outside workers `empty` is plain ``torch.empty``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

_worker: int | None = None
_lent: dict[int, torch.UntypedStorage] = {}  # key (data pointer) -> a buffer the consumer holds
_free: list[torch.UntypedStorage] = []  # buffers ready for reuse, oldest first
_ours: set[int] = set()  # data pointers of the buffers `empty` made
MAX_TRACKED = 256  # pointers of our buffers remembered at once
MAX_FREE = 6  # a worker has at most `prefetch` batches out, of a field or two each: spares for the churn
PAGE = 4096
REUSE_SLACK = 2.0  # a free buffer serves a request down to 1/REUSE_SLACK of its size (padded batches vary)
counters = {"allocated": 0, "reused": 0}


def use_shared_memory(worker: int | None = 0) -> None:
    """Called once in each worker process: from now on `empty` allocates in shared memory."""
    global _worker
    _worker = worker
    _lent.clear(), _free.clear(), _ours.clear()
    keep_freed_memory()


def keep_freed_memory() -> bool:
    """Let glibc's malloc keep freed blocks of up to 32 MiB for reuse (a worker process only).

    A worker's private intermediates (the uint8 batch before Normalize, an op's fresh output)
    are megabytes each. By default glibc often serves such blocks with fresh ``mmap`` calls
    and gives them back on free, so every batch paid a page fault per 4 KiB page again.
    Raising the mmap and trim thresholds keeps them in the heap.
    Returns whether the settings were applied.
    """
    if _mallopt is None:  # not glibc (macOS, musl): nothing to tune
        return False
    return bool(_mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(_mallopt(M_TRIM_THRESHOLD, 256 << 20))


def _find_mallopt() -> Any:
    """glibc's ``mallopt``, looked up once when this module is imported (in the training
    process), so a forked worker only calls it; None where there is no such function."""
    try:
        import ctypes

        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_mallopt = _find_mallopt()


def worker_id() -> int | None:
    return _worker


def empty(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """An uninitialised tensor; in a worker process, on the CPU, backed by shared memory."""
    if _worker is None or torch.device(device).type != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    nbytes = max(1, math.prod(shape) * torch.empty((), dtype=dtype).element_size())
    storage = _take_free(nbytes)
    if storage is not None:
        counters["reused"] += 1
    else:
        storage = torch.UntypedStorage._new_shared(size_class(nbytes))
        _ours.add(storage.data_ptr())
        counters["allocated"] += 1
    return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))


def size_class(nbytes: int) -> int:
    """``nbytes`` rounded up to the next of 4 sizes per doubling (at most 19% more), in whole
    pages, so that a slightly larger batch next time still fits a buffer it gave back. The
    pages past what a batch writes are never touched, so they cost no memory."""
    if nbytes <= PAGE:
        return PAGE
    step = 2 ** (math.ceil(4 * math.log2(nbytes)) / 4)
    return max(nbytes, -(-int(step) // PAGE) * PAGE)


def _take_free(nbytes: int) -> torch.UntypedStorage | None:
    """The smallest free buffer that holds ``nbytes`` without wasting more than REUSE_SLACK:
    a padded batch (audio) is a little longer or shorter each time, never the same size."""
    fits = [i for i, s in enumerate(_free) if nbytes <= s.nbytes() <= nbytes * REUSE_SLACK]
    if not fits:
        return None
    return _free.pop(min(fits, key=lambda i: _free[i].nbytes()))


MIN_SHARED_COPY = 1 << 16  # smaller tensors (labels, lengths) go through torch's queue as they are


def into_shared(data: dict[str, Any]) -> None:
    """Copy the batch's large private CPU tensors (an op's fresh output) onto recycled shared
    buffers, in place in ``data``: sending them otherwise makes torch's queue copy each into a
    new shared segment, page faults included, every batch."""
    if _worker is None:
        return
    for name, value in data.items():
        if (isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.nbytes >= MIN_SHARED_COPY
                and value.untyped_storage().data_ptr() not in _ours):
            data[name] = empty(value.shape, value.dtype).copy_(value)


def lend(data: dict[str, Any]) -> dict[str, int]:
    """Note which fields of an outgoing batch sit on our buffers: field -> key."""
    if _worker is None:
        return {}
    keys = {}
    for name, value in data.items():
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            storage = value.untyped_storage()
            key = storage.data_ptr()
            if key in _ours and key not in _lent:
                _lent[key] = storage
                keys[name] = key
    if len(_ours) > MAX_TRACKED:  # forget buffers dropped inside the worker (intermediates)
        _ours.intersection_update({*_lent, *(s.data_ptr() for s in _free)})
    return keys


def take_reused() -> int:
    """How many buffers `empty` reused since the last call."""
    reused, counters["reused"] = counters["reused"], 0
    return reused


def release(keys: list[int]) -> None:
    """The consumer dropped these buffers: they may be written again."""
    for key in keys:
        storage = _lent.pop(key, None)
        if storage is None:
            continue
        _free.append(storage)
        if len(_free) > MAX_FREE:  # keep the newest: sizes drift with the data
            _ours.discard(_free.pop(0).data_ptr())
