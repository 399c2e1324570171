"""Rows of per-object fields: count them and keep some, in every form a field takes.

A per-object field (boxes, keypoints, class ids, one mask per object) holds one row per object
of its sample: (N, ...) for one sample; in a batch a list of them (``"list"``), or (B, N_max, ...)
with zeros past each sample's ``lengths`` (``"pad"``). Rows are flattened sample by sample into
(M, ...) with M = the sum of the counts, so one kernel call decides for every object of a batch,
and every per-object field of the sample keeps the same rows.
"""

from __future__ import annotations

from typing import Any

import torch


def row_counts(value: Any, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """int64 (B,): the rows of each sample of a list or padded batch; (1,) for one sample."""
    if isinstance(value, list):
        return torch.tensor([v.shape[0] for v in value], dtype=torch.int64)
    if lengths is not None:
        return lengths.to(torch.int64).cpu()
    return torch.tensor([value.shape[0]], dtype=torch.int64)


def flat_rows(value: Any, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Every valid row, sample after sample: (M, ...)."""
    if isinstance(value, list):
        return torch.cat(list(value))
    if lengths is not None:
        valid = torch.arange(value.shape[1], device=value.device)[None, :] < lengths.to(value.device)[:, None]
        return value[valid]
    return value


def keep_rows(value: Any, keep: torch.Tensor, lengths: torch.Tensor | None = None) -> tuple[Any, torch.Tensor | None]:
    """The rows of ``value`` whose flag in ``keep`` (M,) is set, in their order: a list stays a list,
    a padded batch is compacted to the front with new lengths (zeros after them), one sample is
    indexed. Returns (the field, its new lengths or None)."""
    if isinstance(value, list):
        counts = row_counts(value).tolist()
        keeps = keep.to(value[0].device if value else keep.device).split(counts)
        shapes = {(v.shape[1:], v.dtype) for v in value}
        if len(shapes) == 1 and value:  # one gather for the whole batch
            kept = torch.cat(list(value))[torch.cat(keeps)]
            rows = kept.split([int(k.sum()) for k in keeps])
        else:  # rows of several shapes (one mask per object, images of several sizes)
            rows = [v[k] for v, k in zip(value, keeps)]
        return type(value)(rows), None
    if lengths is None:
        return value[keep.to(value.device)], None
    b, n = value.shape[:2]
    valid = torch.arange(n, device=value.device)[None, :] < lengths.to(value.device)[:, None]
    flags = torch.zeros(b, n, dtype=torch.bool, device=value.device)
    flags[valid] = keep.to(value.device)
    new_lengths = flags.sum(dim=1)
    order = torch.argsort((~flags).to(torch.int8), dim=1, stable=True)  # kept rows first, in their order
    index = order.reshape(b, n, *(1,) * (value.ndim - 2)).expand_as(value)
    out = value.gather(1, index)
    past = torch.arange(n, device=value.device)[None, :] >= new_lengths[:, None]
    out[past] = 0
    return out, new_lengths.to(lengths.dtype).to(lengths.device)
