"""DALI lowerings of the colour, dtype and pixel-value image ops (Normalize, ToDtype, ColorJitter,
RandomGrayscale, GaussianBlur, RandomErasing), as torchvision computes them."""

from __future__ import annotations

from typing import Any

import numpy as np

from mediapipe.augment.functional.color import JITTER_ORDER
from mediapipe.loaders.dali.context import UNIT_FLOAT, FieldNode, LoweringContext, _copy, _write

DTYPES = {"float32": "FLOAT", "float16": "FLOAT16", "uint8": "UINT8"}


def lower_normalize(op: Any, ctx: LoweringContext) -> None:
    types = ctx.types
    if op.dtype not in DTYPES or op.dtype == "uint8":
        raise NotImplementedError(f"Normalize(dtype={op.dtype!r}): DALI's crop_mirror_normalize writes "
                                  "float32 or float16")
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        mean = [m * f.units for m in op.mean]
        std = [s * f.units for s in op.std]
        f.node = ctx.fn.crop_mirror_normalize(
            f.node, mean=mean, std=std, mirror=f.mirror if f.mirror is not None else 0,
            output_layout="CHW", dtype=getattr(types, DTYPES[op.dtype]))
        f.mirror, f.layout, f.dtype, f.units = None, "CHW", op.dtype, UNIT_FLOAT
        _write(ctx, op, src, f)


def lower_to_dtype(op: Any, ctx: LoweringContext) -> None:
    types = ctx.types
    if op.dtype not in ("float32", "float16"):
        raise NotImplementedError(f"ToDtype(dtype={op.dtype!r}): only float32 and float16 are lowered")
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        x = ctx.fn.cast(f.node, dtype=types.FLOAT)
        if op.scale and f.dtype == "uint8":
            x = x * (1.0 / 255.0)
            f.units = UNIT_FLOAT
        f.node = ctx.fn.cast(x, dtype=getattr(types, DTYPES[op.dtype])) if op.dtype != "float32" else x
        f.dtype = op.dtype
        _write(ctx, op, src, f)


def _gray(ctx: LoweringContext, x: Any, f: FieldNode) -> Any:
    """torchvision's luma, 0.2989 R + 0.587 G + 0.114 B, (H, W) floats; a grey field's own values."""
    planes = [x[:, :, c] for c in range(f.channels)] if f.layout == "HWC" else [x[c] for c in range(f.channels)]
    if f.channels == 1:
        return planes[0]
    r, g, b = planes
    return r * 0.2989 + g * 0.587 + b * 0.114


def _expand_gray(ctx: LoweringContext, gray: Any, layout: str) -> Any:
    return ctx.fn.expand_dims(gray, axes=[2] if layout == "HWC" else [0])


def _floor(ctx: LoweringContext, x: Any, f: FieldNode) -> Any:
    from nvidia.dali import math as dmath

    return dmath.floor(x) if f.dtype == "uint8" else x


def lower_color_jitter(op: Any, ctx: LoweringContext) -> None:
    """Each sample's adjustments in the order it drew (torchvision's), one step per active
    adjustment: step k applies, per sample, the adjustment that sample drew k-th. Every step is
    one blend, x * a + other * (1 - a), whose ``other`` is 0 (brightness), the mean grey
    (contrast) or the grey image (saturation), picked per sample by 0/1 weights; uint8 input
    truncates after each step, as torchvision does.

    ``hue`` is refused (`LOWERINGS`' check): DALI's ``hsv`` (and ``hue``, ``color_twist``) turn the
    hue by a linear map of RGB in YIQ, torchvision through HSV: even a small shift gives a different
    colour, not a rounding difference (tests/test_ops_recipe_color.py measures how far apart)."""
    from nvidia.dali import math as dmath

    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        params = ctx.params_of(op, f)
        # hue is refused (Lowering.check); saturation leaves a grey field as it is, as torch's does
        names = [name for name in JITTER_ORDER if name in op.ranges() and (name != "saturation" or f.channels == 3)]

        def kth(sample: Any, step: int, params: Any = params, names: list[str] = names) -> tuple[str, float]:
            """The adjustment the sample drew ``step``-th among the active ones, and its factor."""
            p = params(sample)
            name = [JITTER_ORDER[i] for i in p["order"] if JITTER_ORDER[i] in names][step]
            return name, p[name]

        def weight(name: str, step: int, names: list[str] = names) -> Any:
            if len(names) == 1:
                return None
            return ctx.operand(ctx.host_input(f"ColorJitter.{name}{step}",
                                              lambda s: np.float32(kth(s, step)[0] == name)))

        x = ctx.fn.cast(f.node, dtype=ctx.types.FLOAT)
        for step in range(len(names)):
            factor = ctx.operand(ctx.host_input(f"ColorJitter.factor{step}",
                                                lambda s, step=step: np.float32(kth(s, step)[1])))
            others = []
            if "contrast" in names:
                others.append(_weighted(ctx.fn.reductions.mean(_floor(ctx, _gray(ctx, x, f), f)),
                                        weight("contrast", step)))
            if "saturation" in names:
                gray = _expand_gray(ctx, _floor(ctx, _gray(ctx, x, f), f), f.layout)
                others.append(_weighted(gray, weight("saturation", step)))
            y = x * factor
            if others:
                y = y + (others[0] if len(others) == 1 else others[0] + others[1]) * (1.0 - factor)
            x = _floor(ctx, dmath.clamp(y, 0.0, f.units), f)
        f.node = ctx.fn.cast(x, dtype=getattr(ctx.types, DTYPES[f.dtype]))
        _write(ctx, op, src, f)


def _weighted(x: Any, weight: Any) -> Any:
    return x if weight is None else x * weight


def lower_random_grayscale(op: Any, ctx: LoweringContext) -> None:
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        if f.channels == 1:  # already grey: torch's leaves it as it is
            _write(ctx, op, src, f)
            continue
        on = ctx.operand(ctx.drawn(op, f, "gray", lambda p: float(p["gray"]), np.float32))
        x = ctx.fn.cast(f.node, dtype=ctx.types.FLOAT)
        gray = _expand_gray(ctx, _floor(ctx, _gray(ctx, x, f), f), f.layout)
        f.node = ctx.fn.cast(x + (gray - x) * on, dtype=getattr(ctx.types, DTYPES[f.dtype]))
        _write(ctx, op, src, f)


def lower_gaussian_blur(op: Any, ctx: LoweringContext) -> None:
    kx, ky = op.kernel_size
    for src in op.inputs:
        f = _copy(ctx.decoded(src))  # a symmetric kernel with reflected borders commutes with a pending flip
        sigma = ctx.drawn(op, f, "sigma", lambda p: (p["sigma"], p["sigma"]), np.float32)
        f.node = ctx.fn.gaussian_blur(f.node, window_size=[ky, kx], sigma=sigma)
        _write(ctx, op, src, f)


def lower_random_erasing(op: Any, ctx: LoweringContext) -> None:
    values = list(op.value) if isinstance(op.value, tuple) else [op.value]
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        ctx.flush_mirror(f)
        anchor = ctx.drawn(op, f, "anchor", lambda p: (p["top"], p["left"]), np.float32)
        shape = ctx.drawn(op, f, "shape", lambda p: (p["height"], p["width"]), np.float32)
        f.node = ctx.fn.erase(f.node, anchor=anchor, shape=shape, axis_names="HW",
                              fill_value=[float(v) for v in values])
        _write(ctx, op, src, f)
