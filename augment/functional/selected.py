"""Per-sample switches: a kernel applied to the samples of a batch whose flag is set, the others
left as they are, without the host waiting for the device to count them."""

from __future__ import annotations

from collections.abc import Callable

import torch

from mediapipe.stages import memory, scratch

# fn(samples, index): the kernel on the selected samples; ``index`` (int64, on the flags' device)
# says which they are, to pick their parameters, or is None when the whole batch is given
Kernel = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def take(values: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """The rows of per-sample ``values`` (B, ...) that ``index`` selects (all of them for None)."""
    return values if index is None else values.index_select(0, index.to(values.device))


def on_host(x: torch.Tensor, flags: torch.Tensor) -> bool:
    """Whether the samples' flags can be counted without waiting for a device (both on the CPU)."""
    return x.device.type == "cpu" and flags.device.type == "cpu"


def where_selected(x: torch.Tensor, flags: torch.Tensor, fn: Kernel) -> torch.Tensor:
    """``fn`` on the samples of ``x`` (B, ...) whose ``flags`` (B,) are true; the rest pass unchanged.

    On the CPU only the selected samples are computed (the flags are on the host there) and
    written into ``x`` itself where the batch stage owns it (`scratch`), else into a copy; on a
    device ``fn`` runs on the whole batch and ``torch.where`` keeps each sample's own result, so
    no count of the selected samples is read back (a read would make the host wait).
    """
    flags = flags.reshape(-1)
    if on_host(x, flags):
        index = flags.nonzero().reshape(-1)
        if index.numel() == 0:
            return x
        if index.numel() == x.shape[0]:
            return fn(x, None)
        done = fn(x.index_select(0, index), index).to(x.dtype)
        out = x if scratch.writable(x) else memory.empty(x.shape, x.dtype, x.device).copy_(x)  # shared in a worker
        return out.index_copy_(0, index, done)
    with scratch.read_only():  # x is read again below: fn must leave it as it is
        out = fn(x, None)
    return torch.where(flags.to(x.device).reshape(-1, *(1,) * (x.ndim - 1)), out, x)
