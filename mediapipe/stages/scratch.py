"""Batch tensors an op may overwrite in place: those an earlier batch op made for this batch and
that no other field shares. A kernel that changes a few samples of a batch (RandomErasing, an
auto-augment op drawn by some samples) then writes them into the batch instead of copying it
whole first; anything else (the collated batch, a field two outputs share, a tensor a caller
passed to ``op.apply``) is copied as before.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import torch

# key -> the memory itself, held while the op runs: a memory freed then could come back at its
# address as another tensor (a composite's copy of a group), which is no memory of the batch's
_writable: contextvars.ContextVar[Mapping[int, torch.UntypedStorage]] = contextvars.ContextVar(
    "writable", default=MappingProxyType({}))


def storage_key(x: torch.Tensor) -> int:
    """What identifies the memory under ``x`` (views of one tensor share it)."""
    return x.untyped_storage().data_ptr()


def writable(x: Any) -> bool:
    """Whether ``x`` may be written in place: a CPU or device tensor on memory the batch stage
    owns for this batch (`owned_by_stage`)."""
    return isinstance(x, torch.Tensor) and x.numel() > 0 and storage_key(x) in _writable.get()


def storages(data: dict[str, Any]) -> Counter:
    """How many fields of ``data`` each tensor memory backs."""
    return Counter(storage_key(v) for v in data.values() if isinstance(v, torch.Tensor) and v.numel() > 0)


@contextlib.contextmanager
def owned_by_stage(fresh: set[int], data: dict[str, Any], replaced: Collection[str] | None = None) -> Iterator[None]:
    """While an op runs: the memories in ``fresh`` (made by earlier ops for this batch) that back
    exactly one field of ``data``, and that field one the op replaces (``replaced``; None: any), may
    be written in place. An op writing a new field (``out=``) keeps its source: not replaced."""
    counts = storages(data)
    mine = {storage_key(v): v.untyped_storage() for f, v in data.items()
            if isinstance(v, torch.Tensor) and v.numel() > 0 and (replaced is None or f in replaced)}
    token = _writable.set({k: s for k, s in mine.items() if k in fresh and counts.get(k) == 1})
    try:
        yield
    finally:
        _writable.reset(token)


@contextlib.contextmanager
def read_only() -> Iterator[None]:
    """Nothing is written in place in this block: for a kernel that reads its input again after a
    call that could write into it (AugMix starts each chain from the same image)."""
    token = _writable.set({})
    try:
        yield
    finally:
        _writable.reset(token)
