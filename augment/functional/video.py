"""Video kernels: YUV to RGB (BT.601 / BT.709 / BT.2020, limited / full range) and time-axis edits.

Clips are ``[..., T, C, H, W]``: a clip (T, C, H, W), a clip batch (B, T, C, H, W), or
several clips per video (B, N, T, C, H, W). The time axis is always dim -4.
"""

from __future__ import annotations

import torch

# (Kr, Kb) luma coefficients of each matrix: ITU-R BT.601, BT.709 and BT.2020 (non-constant luminance).
_LUMA = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722), "bt2020": (0.2627, 0.0593)}
MATRICES = tuple(_LUMA)
RANGES = ("limited", "full")


def colour_code(matrix: str, range: str) -> int:
    """One small int per (matrix, range): what per-sample parameters carry (0..5)."""
    if matrix not in _LUMA:
        raise ValueError(f"matrix={matrix!r}: expected one of {MATRICES}")
    if range not in RANGES:
        raise ValueError(f"range={range!r}: expected one of {RANGES}")
    return MATRICES.index(matrix) * 2 + RANGES.index(range)


def override_code(code: torch.Tensor | int, matrix: str | None = None, range: str | None = None) -> torch.Tensor | int:
    """``code`` (an int or a (B,) tensor of `colour_code`) with its matrix and/or range replaced."""
    if matrix is not None:
        code = MATRICES.index(matrix) * 2 + code % 2
    if range is not None:
        code = code - code % 2 + RANGES.index(range)
    return code


def yuv_to_rgb_matrix(matrix: str, range: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, offset) with rgb = M @ yuv + offset for 8-bit code values (float64)."""
    kr, kb = _LUMA[matrix]
    kg = 1.0 - kr - kb
    if range == "limited":
        ys, cs, y0 = 255.0 / 219.0, 255.0 / 224.0, 16.0
    elif range == "full":
        ys, cs, y0 = 1.0, 1.0, 0.0
    else:
        raise ValueError(f"range={range!r}: expected one of {RANGES}")
    m = torch.tensor(
        [
            [ys, 0.0, 2 * (1 - kr) * cs],
            [ys, -2 * kb * (1 - kb) / kg * cs, -2 * kr * (1 - kr) / kg * cs],
            [ys, 2 * (1 - kb) * cs, 0.0],
        ],
        dtype=torch.float64,
    )
    offset = -(m @ torch.tensor([y0, 128.0, 128.0], dtype=torch.float64))
    return m, offset


_TABLE = [yuv_to_rgb_matrix(m, r) for m in MATRICES for r in RANGES]  # indexed by colour_code
_M_TABLE = torch.stack([m for m, _ in _TABLE]).float()
_O_TABLE = torch.stack([o for _, o in _TABLE]).float()


def yuv_to_rgb(x: torch.Tensor, code: torch.Tensor | int, *, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """Convert YUV planes (channel dim -3: Y, U, V; 8-bit code values) to RGB.

    ``code`` is a `colour_code`: one int for the whole tensor, or a (B,) tensor with one per
    sample along dim 0. uint8 output is rounded and saturated; float output is in [0, 1].
    The whole batch is one matrix product, whatever the codes.
    """
    if x.shape[-3] != 3:
        raise ValueError(f"yuv_to_rgb: expected 3 planes (Y, U, V) on dim -3, got shape {tuple(x.shape)}")
    code_t = torch.as_tensor(code, dtype=torch.int64)
    work = torch.float32 if x.device.type == "cpu" or not dtype.is_floating_point else dtype
    work = torch.float32 if work == torch.float64 else work
    m = _M_TABLE.to(x.device)[code_t.to(x.device)]  # (3, 3) or (B, 3, 3)
    o = _O_TABLE.to(x.device)[code_t.to(x.device)]
    lead = x.shape[:-3]
    if code_t.ndim == 0:
        flat = x.reshape(1, -1, 3, x.shape[-2] * x.shape[-1])
        m, o = m[None], o[None]
    else:
        if code_t.shape[0] != x.shape[0]:
            raise ValueError(f"yuv_to_rgb: {code_t.shape[0]} codes for a batch of {x.shape[0]}")
        flat = x.reshape(x.shape[0], -1, 3, x.shape[-2] * x.shape[-1])
    yuv = flat.to(work)
    if x.is_floating_point():
        yuv = yuv * 255.0  # float planes are read as [0, 1] code values
    rgb = torch.matmul(m[:, None].to(work), yuv).add_(o[:, None, :, None].to(work))  # in place: one pass less
    if dtype == torch.uint8:
        rgb = rgb.round_().clamp_(0, 255).to(torch.uint8)
    else:
        rgb = rgb.div_(255.0).clamp_(0, 1).to(dtype)
    return rgb.reshape(*lead, 3, *x.shape[-2:])


def reverse_time(x: torch.Tensor, mask: torch.Tensor | bool) -> torch.Tensor:
    """Reverse the time axis (dim -4) of the samples whose ``mask`` is true."""
    if isinstance(mask, bool) or (isinstance(mask, torch.Tensor) and mask.ndim == 0):
        return x.flip(-4) if bool(mask) else x
    if not bool(mask.any()):
        return x
    m = mask.to(x.device, torch.bool).reshape(-1, *(1,) * (x.ndim - 1))
    return torch.where(m, x.flip(-4), x)


def select_frames(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Frames ``indices`` along dim -4: (T',) for all samples, or (B, T') one row per sample."""
    indices = indices.to(x.device, torch.int64)
    if indices.ndim == 1:
        return x.index_select(x.ndim - 4, indices)
    if indices.shape[0] != x.shape[0]:
        raise ValueError(f"select_frames: {indices.shape[0]} index rows for a batch of {x.shape[0]}")
    t_dim = x.ndim - 4
    shape = [x.shape[0]] + [1] * (x.ndim - 1)
    shape[t_dim] = indices.shape[1]
    index = indices.reshape(shape).expand(*x.shape[:t_dim], indices.shape[1], *x.shape[t_dim + 1 :])
    return torch.gather(x, t_dim, index)


def uniform_indices(length: int, num: int) -> torch.Tensor:
    """``num`` evenly spaced frame numbers in [0, length - 1] (PyTorchVideo's rounding)."""
    return torch.linspace(0, length - 1, num).round().to(torch.int64) if length > 0 else torch.zeros(num, dtype=torch.int64)


def held_frames(keep: torch.Tensor) -> torch.Tensor:
    """For a (..., T) keep mask, the index of the frame shown at each step when dropped frames
    repeat the last kept one (frame 0 is always kept)."""
    keep = keep.clone()
    keep[..., 0] = True
    steps = torch.arange(keep.shape[-1]).expand_as(keep)
    return torch.where(keep, steps, torch.zeros_like(steps)).cummax(dim=-1).values
