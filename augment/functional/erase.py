"""Erasing kernels: per-sample rectangles filled with a value, batched through one mask."""

from __future__ import annotations

import torch

from mediapipe.augment.functional.selected import on_host, take, where_selected


def box_mask(top: torch.Tensor, left: torch.Tensor, height: torch.Tensor, width: torch.Tensor,
             size: tuple[int, int], device: torch.device | None = None) -> torch.Tensor:
    """(B, H, W) bool: true inside box i = rows [top, top + height), columns [left, left + width)."""
    h, w = size
    rows = torch.arange(h, device=device)
    cols = torch.arange(w, device=device)
    top, left = top.to(device).reshape(-1, 1), left.to(device).reshape(-1, 1)
    height, width = height.to(device).reshape(-1, 1), width.to(device).reshape(-1, 1)
    in_rows = (rows >= top) & (rows < top + height)
    in_cols = (cols >= left) & (cols < left + width)
    return in_rows[:, :, None] & in_cols[:, None, :]


def erase(
    x: torch.Tensor,
    top: torch.Tensor,
    left: torch.Tensor,
    height: torch.Tensor,
    width: torch.Tensor,
    value: float | tuple[float, ...] = 0.0,
) -> torch.Tensor:
    """Fill box i of sample i of ``x`` (B, ..., C, H, W) with ``value`` (one, or one per channel).

    A zero-sized box leaves its sample unchanged; every frame of a clip gets its sample's box.
    The value is cast to the dtype of ``x`` (uint8 truncates), as torchvision's ``erase`` does.
    On the CPU only the samples with a box are touched (RandomErasing erases a few of a batch).
    """
    flags = (height.reshape(-1) > 0) & (width.reshape(-1) > 0)
    if not on_host(x, flags):
        return _erase_boxes(x, top, left, height, width, value)
    return where_selected(x, flags, lambda s, index: _erase_boxes(s, take(top, index), take(left, index),
                                                                   take(height, index), take(width, index), value))


def _erase_boxes(x: torch.Tensor, top: torch.Tensor, left: torch.Tensor, height: torch.Tensor, width: torch.Tensor,
                 value: float | tuple[float, ...]) -> torch.Tensor:
    """`erase` on every sample of ``x``, through one (B, H, W) mask."""
    b, c = x.shape[0], x.shape[-3]
    mask = box_mask(top, left, height, width, x.shape[-2:], x.device)
    mask = mask.reshape(b, *(1,) * (x.ndim - 3), *mask.shape[-2:])
    fill = torch.as_tensor(value, dtype=torch.float32).reshape(-1)
    if fill.numel() not in (1, c):
        raise ValueError(f"erase: value has {fill.numel()} entries for {c} channels")
    fill = fill.to(x.dtype).to(x.device).reshape(-1, 1, 1)
    return torch.where(mask, fill, x)
