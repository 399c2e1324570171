"""DALI lowerings of the auto-augment colour ops, each sample's coin (``apply``) taken from the op's
keyed draws, so DALI applies exactly the torch backend's choices:

* RandomPosterize: ``x & mask`` (uint8), ``floor(x * 2^bits) / 2^bits`` (float): exact.
* RandomSolarize, RandomInvert: arithmetic, ``x + (top - 2 * x) * on`` where inverted: exact.
* RandomAutocontrast: per-channel ``reductions.min/max`` over HW and torchvision's float32 steps
  (subtract, scale by ``(max - min) / 255``, divide, truncate): exact.
* RandomEqualize: DALI's ``equalize`` (HWC uint8 only), OpenCV's lookup table where torchvision
  uses Pillow's: an approximation, a few levels apart in parts of the range.

RandomAdjustSharpness is refused (DALI's ``experimental.filter`` blends in one convolution, without
torchvision's intermediate rounding or its kept border), and so are the policies (DALI's auto_aug
draws with its own random operators): their table entries' checks say why, for
`mediapipe.loaders.dali.lowering.unsupported` to name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mediapipe.loaders.dali.colour import DTYPES, _floor
from mediapipe.loaders.dali.context import FieldNode, LoweringContext, _copy, _write

POLICY_ARGS = {"AutoAugment": "policy interpolation fill",
               "RandAugment": "num_ops magnitude num_magnitude_bins interpolation fill",
               "TrivialAugmentWide": "num_magnitude_bins interpolation fill",
               "AugMix": "severity mixture_width chain_depth alpha all_ops interpolation fill"}


def policy_refusal(op: Any) -> str:
    """Why a policy does not lower: nvidia.dali.auto_aug draws otherwise."""
    return ("nvidia.dali.auto_aug draws its ops, magnitudes and signs with DALI's own random operators and "
            "defines several ops otherwise (equalize as OpenCV, contrast about an unfloored luma, a plain shear "
            "matrix), so it cannot give this library's per-sample draws: use backend='torch' for it")


def sharpness_refusal(op: Any) -> str:
    return ("DALI's experimental.filter blends the smoothing in one convolution, without torchvision's rounding of "
            "the smoothed image or its kept one-pixel border")


def refuse(op: Any, ctx: LoweringContext) -> None:
    why = sharpness_refusal(op) if type(op).__name__ == "RandomAdjustSharpness" else policy_refusal(op)
    raise NotImplementedError(f"{type(op).__name__}: {why}")


def _on(op: Any, ctx: LoweringContext, f: FieldNode) -> Any:
    """Each sample's keyed coin, 1.0 where the op applies, as a tensor operand."""
    return ctx.operand(ctx.drawn(op, f, "apply", lambda p: float(p["apply"]), np.float32))


def _as_float(ctx: LoweringContext, f: FieldNode) -> Any:
    return ctx.fn.cast(f.node, dtype=ctx.types.FLOAT)


def _back(ctx: LoweringContext, x: Any, f: FieldNode) -> Any:
    return ctx.fn.cast(x, dtype=getattr(ctx.types, DTYPES[f.dtype]))


def lower_random_posterize(op: Any, ctx: LoweringContext) -> None:
    from nvidia.dali import math as dmath

    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        if f.dtype == "uint8":
            keep = ((1 << op.bits) - 1) << (8 - op.bits)
            mask = ctx.drawn(op, f, "mask", lambda p, keep=keep: keep if p["apply"] else 255, np.uint8)
            f.node = f.node & ctx.operand(mask)
        else:
            levels = float(1 << op.bits)
            x = _as_float(ctx, f)
            posterized = dmath.clamp(dmath.floor(x * levels), 0.0, levels - 1.0) * (1.0 / levels)
            f.node = _back(ctx, x + (posterized - x) * _on(op, ctx, f), f)
        _write(ctx, op, src, f)


def _check_threshold(op: Any, f: FieldNode) -> None:
    if op.threshold > f.units:
        raise NotImplementedError(f"RandomSolarize(threshold={op.threshold}) is above the largest value of "
                                  f"{f.dtype} images ({f.units:g}): give it in the images' units")


def lower_random_solarize(op: Any, ctx: LoweringContext) -> None:
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        _check_threshold(op, f)
        never = 2.0 * f.units + 1.0  # above every value: the sample is left as it is
        threshold = ctx.operand(ctx.drawn(op, f, "threshold",
                                          lambda p, never=never: op.threshold if p["apply"] else never, np.float32))
        x = _as_float(ctx, f)
        f.node = _back(ctx, x + (f.units - 2.0 * x) * (x >= threshold), f)
        _write(ctx, op, src, f)


def lower_random_invert(op: Any, ctx: LoweringContext) -> None:
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        x = _as_float(ctx, f)
        f.node = _back(ctx, x + (f.units - 2.0 * x) * _on(op, ctx, f), f)
        _write(ctx, op, src, f)


def _channels_reduced(ctx: LoweringContext, f: FieldNode) -> str:
    return "HW" if f.layout in ("HWC", "CHW") else "".join(a for a in f.layout if a in "HW")


def lower_random_autocontrast(op: Any, ctx: LoweringContext) -> None:
    from nvidia.dali import math as dmath

    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        x = _as_float(ctx, f)
        axes = _channels_reduced(ctx, f)
        low = ctx.fn.reductions.min(x, axis_names=axes, keep_dims=True)
        high = ctx.fn.reductions.max(x, axis_names=axes, keep_dims=True)
        flat = high == low  # torchvision leaves a flat channel as it is: minimum 0, scale 1
        inv_scale = (high - low) * np.float32(1.0 / f.units) + flat
        stretched = _floor(ctx, dmath.clamp((x - low * (flat ^ True)) / inv_scale, 0.0, f.units), f)
        f.node = _back(ctx, x + (stretched - x) * _on(op, ctx, f), f)
        _write(ctx, op, src, f)


def lower_random_equalize(op: Any, ctx: LoweringContext) -> None:
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        if f.dtype != "uint8" or f.layout != "HWC":
            raise NotImplementedError(f"RandomEqualize on {f.dtype} {f.layout} images: DALI's equalize takes HWC "
                                      "uint8 images (place it before Normalize and ToDtype)")
        x = _as_float(ctx, f)
        equalized = ctx.fn.cast(ctx.fn.equalize(f.node), dtype=ctx.types.FLOAT)
        f.node = _back(ctx, x + (equalized - x) * _on(op, ctx, f), f)
        _write(ctx, op, src, f)
