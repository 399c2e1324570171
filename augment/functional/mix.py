"""Batch-mixing kernels (MixUp, CutMix): each sample mixed with its neighbour in the batch.

The partner of sample i is sample i - 1 (the batch rolled by one, sample 0 takes the last),
as in torchvision v2; in a batch with invalid slots (``on_error="replace"``), the previous valid
sample, so a valid sample is never mixed with an empty slot. Labels become soft (B, num_classes)
float rows that sum to 1.
"""

from __future__ import annotations

import torch


def soft_labels(label: torch.Tensor, num_classes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """int64 (B,) class indices to one-hot (B, num_classes); float (B, num_classes) passes as is.

    Label -1 (a sample replaced by zeros under ``on_error="replace"``) gives a row of zeros.
    """
    if label.is_floating_point():
        if label.ndim != 2 or label.shape[1] != num_classes:
            raise ValueError(f"soft labels of shape {tuple(label.shape)}: expected (B, {num_classes})")
        return label
    if label.ndim != 1:
        raise ValueError(f"labels of shape {tuple(label.shape)}: expected class indices (B,)")
    if label.numel() and label.device.type != "meta" and (int(label.min()) < -1 or int(label.max()) >= num_classes):
        raise ValueError(f"labels in [{int(label.min())}, {int(label.max())}] for num_classes={num_classes}")
    valid = (label >= 0).to(dtype).unsqueeze(1)
    return torch.nn.functional.one_hot(label.clamp(min=0), num_classes).to(dtype).mul_(valid)


def partners(valid: torch.Tensor | None, batch_size: int) -> torch.Tensor | None:
    """The partner of each sample: None (the batch rolled by one) without ``valid`` (bool (B,));
    else for each sample the previous valid one, cyclically (the roll when every slot is valid).
    Tensor arithmetic only, so no host sync on a device."""
    if valid is None:
        return None
    index = torch.arange(batch_size, device=valid.device)
    last_valid = torch.cummax(torch.where(valid.to(torch.bool), index, -1), 0).values  # up to and at i
    before = torch.cat([last_valid[-1:], last_valid[:-1]])  # strictly before i; i = 0 wraps to the last
    before = torch.where(before < 0, last_valid[-1], before)  # none before i: wrap to the last valid
    return torch.where(before < 0, index, before)  # no valid sample at all: itself


def _partner_of(x: torch.Tensor, partner: torch.Tensor | None) -> torch.Tensor:
    return x.roll(1, 0) if partner is None else x.index_select(0, partner.to(x.device))


def _lerp(a: torch.Tensor, partner: torch.Tensor, lam: float) -> torch.Tensor:
    """lam * a + (1 - lam) * partner; integer images are mixed in float32 and rounded back."""
    if a.is_floating_point():
        return partner.mul(1.0 - lam).add_(a, alpha=lam)
    mixed = partner.to(torch.float32).mul_(1.0 - lam).add_(a.to(torch.float32), alpha=lam)
    return mixed.round_().clamp_(0, 255).to(a.dtype)


def mixup(x: torch.Tensor, label: torch.Tensor, lam: float,
          partner: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """lam * sample i + (1 - lam) * its partner (sample i - 1, or `partners`), for the images
    ``x`` (B, ...) and soft labels."""
    return _lerp(x, _partner_of(x, partner), lam), _lerp(label, _partner_of(label, partner), lam)


def cutmix_box(lam: float, center_x: float, center_y: float, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """torchvision's CutMix box (x1, y1, x2, y2) for Beta draw ``lam`` and a centre given as
    fractions of the width and height in [0, 1) (torchvision draws ``randint(W)``, ``randint(H)``)."""
    h, w = size
    r_x, r_y = int(center_x * w), int(center_y * h)
    r = 0.5 * (1.0 - lam) ** 0.5
    r_w_half, r_h_half = int(r * w), int(r * h)
    x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
    x2, y2 = min(r_x + r_w_half, w), min(r_y + r_h_half, h)
    return x1, y1, x2, y2


def cutmix(
    x: torch.Tensor, label: torch.Tensor, box: tuple[int, int, int, int], partner: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Paste the region ``box`` = (x1, y1, x2, y2) of sample i's partner (sample i - 1, or
    `partners`) into sample i; labels mixed by the pasted area: lam = 1 - box area / image area."""
    x1, y1, x2, y2 = box
    h, w = x.shape[-2:]
    out = x.clone()
    out[..., y1:y2, x1:x2] = _partner_of(x, partner)[..., y1:y2, x1:x2]
    lam = 1.0 - (x2 - x1) * (y2 - y1) / (w * h)
    return out, _lerp(label, _partner_of(label, partner), lam)
