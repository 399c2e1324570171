"""DALI lowerings of the effects (`mediapipe.augment.effects`).

GridMask lowers to DALI's ``grid_mask`` with the torch backend's keyed draws as per-sample
arguments (a sample not drawn gets ratio 0, which keeps every pixel). The noises are refused by
name: DALI's ``noise.salt_and_pepper`` and ``noise.shot`` draw their own noise from one seed per
operator, so they cannot take this library's keyed per-sample draws, and a DALI pipeline would
give other pixels than the torch backend. The other effects have no DALI operator and are not in
the table (`unsupported` names them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mediapipe.loaders.dali.context import LoweringContext, _copy, _write

DALI_NOISE = {"SaltAndPepperNoise": "noise.salt_and_pepper", "ShotNoise": "noise.shot"}


def draws_its_own(op: Any) -> str:
    """Why a noise op does not lower: DALI's operator draws its own noise."""
    return (f"DALI's {DALI_NOISE[type(op).__name__]} draws its own noise from one seed per operator, not this "
            "library's keyed per-sample draws")


def refuse_noise(op: Any, ctx: LoweringContext) -> None:
    raise NotImplementedError(f"{type(op).__name__}: {draws_its_own(op)}")


def lower_grid_mask(op: Any, ctx: LoweringContext) -> None:
    """DALI's grid_mask with each sample's keyed tile, ratio, angle and shifts; a (C, H, W) field is
    turned to (H, W, C) for it and back."""
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        ctx.flush_mirror(f)  # the grid is not symmetric: a pending flip goes first

        def drawn(name: str, dtype: Any, f: Any = f) -> Any:
            return ctx.drawn(op, f, name, lambda p: p[name] if name == "tile" or p["on"] else 0.0, dtype)

        node = f.node if f.layout == "HWC" else ctx.fn.transpose(f.node, perm=[1, 2, 0])
        node = ctx.fn.grid_mask(node, tile=drawn("tile", np.int32), ratio=drawn("ratio", np.float32),
                                angle=drawn("angle", np.float32), shift_x=drawn("shift_x", np.float32),
                                shift_y=drawn("shift_y", np.float32))
        f.node = node if f.layout == "HWC" else ctx.fn.transpose(node, perm=[2, 0, 1])
        _write(ctx, op, src, f)
