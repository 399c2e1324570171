"""CPU tensors for the DALI backend's outputs, on memory recycled once every tensor on it is gone.

DALI's CPU outputs are copied into torch tensors the training loop keeps as long as it likes.
A fresh allocation of a batch's size is a fresh ``mmap``: a page fault, and the kernel
zeroing the page, per 4 KiB, which costs several times the copy itself. So the loader keeps
a few buffers (numpy arrays, which the tensors made from them reference) and watches each
tensor's storage by weak reference: once no tensor or view of it is left, the buffer takes
the next batch. A buffer is never written while anything still reads it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.multiprocessing.reductions import StorageWeakRef

KEEP = 8  # buffers remembered at once: a few batches in flight, of a field or two each
SLACK = 2.0  # a free buffer serves a request down to 1/SLACK of its size


class RecycledBuffers:
    """``empty(shape, dtype)``: an uninitialised CPU tensor, on a recycled buffer when one is free."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._held: list[tuple[np.ndarray, StorageWeakRef]] = []  # (buffer, the storage lent on it)

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if math.prod(shape) == 0:
            return torch.empty(shape, dtype=dtype)
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        free = [i for i, (buf, ref) in enumerate(self._held) if ref.expired() and nbytes <= buf.nbytes <= nbytes * SLACK]
        if free:
            buf = self._held.pop(min(free, key=lambda i: self._held[i][0].nbytes))[0]
        else:
            buf = np.empty(nbytes, dtype=np.uint8)
            expired = [i for i, (_, ref) in enumerate(self._held) if ref.expired()]
            if len(self._held) >= self.keep and expired:
                self._held.pop(expired[0])  # the oldest free one that does not fit: sizes drift
        tensor = torch.from_numpy(buf[:nbytes]).view(dtype).view(shape)
        if len(self._held) < self.keep:
            self._held.append((buf, StorageWeakRef(tensor.untyped_storage())))
        return tensor
