"""DALI lowerings of the recipes' ops (issue 26) that DALI can run with this library's own draws:
RandomPerspective through ``experimental.warp_perspective`` with the keyed homographies, JPEG
through ``jpeg_compression_distortion`` with the keyed quality.

How close they come to the torch backend is checked by tests/test_ops_recipe_geometry.py and
test_ops_recipe_color.py on DALI's CPU operators: RandomPerspective differs by rounding ties only,
with torchvision's border: DALI fills each tap outside the image, where
torchvision blends the fill by the interpolated inside-mask, so bilinear with a fill warps the
image and a plane of ones together in float and blends them as torchvision does; masks and
nearest take DALI's constant border as it is. JPEG on the CPU is bit for bit ours (both are
libjpeg's encode and decode); DALI's GPU operator is its own approximation, unchecked here.

Not lowered, refused by `unsupported` naming the op: GaussianNoise (DALI's ``noise.gaussian``
draws its own noise and cannot take ours), ElasticTransform (no DALI counterpart),
RandomPhotometricDistort (its hue step: see ColorJitter's hue in `colour`), RandomChannelPermutation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mediapipe.loaders.dali.context import LoweringContext, _copy, _sampling, _write
from mediapipe.loaders.dali.geometry import INTERP

IDENTITY = np.eye(3, dtype=np.float32)


def perspective_matrix(params: dict[str, Any]) -> np.ndarray:
    """One sample's homography as DALI's 3x3 output-to-input matrix (pixel corners at the origin,
    as torchvision's coefficients are); the identity for a sample drawn not to warp."""
    if not params["apply"]:
        return IDENTITY
    return np.array([*params["coefficients"], 1.0], dtype=np.float32).reshape(3, 3)


def _channel(layout: str, start: int, stop: int) -> tuple[slice, ...]:
    """A subscript taking channels [start, stop) of a node in ``layout`` ("HWC" or "CHW")."""
    return tuple(slice(start, stop) if axis == "C" else slice(None) for axis in layout)


def lower_random_perspective(op: Any, ctx: LoweringContext) -> None:
    fn, types = ctx.fn, ctx.types
    for src in op.inputs:
        interpolation, _, fill = _sampling(op, src, op.interpolation, fill=op.fill)
        value = None if fill is None else float(fill[0] if isinstance(fill, tuple) else fill)
        f = _copy(ctx.decoded(src))
        ctx.flush_mirror(f)
        index, size_of = ctx.op_index, f.size_of

        def matrix(sample: Any, size_of: Any = size_of, index: int = index) -> np.ndarray:
            return perspective_matrix(sample.params(index, op, size_of(sample)))

        m = ctx.host_input("RandomPerspective.matrix", matrix)

        def warp(node: Any, border: float, m: Any = m, interp: str = INTERP[interpolation]) -> Any:
            return fn.experimental.warp_perspective(node, matrix=m, interp_type=getattr(types, interp),
                                                    fill_value=[border], pixel_origin="corner", inverse_map=True,
                                                    border_mode="constant")

        if interpolation == "nearest" or value is None:  # DALI's constant border is torchvision's here
            f.node = warp(f.node, 0.0 if value is None else value)
        else:  # torchvision's blend: (image - fill) * inside + fill, inside the warped plane of ones
            x = fn.cast(f.node, dtype=types.FLOAT)
            axis = f.layout.index("C")
            both = warp(fn.cat(x, x[_channel(f.layout, 0, 1)] * 0.0 + 1.0, axis=axis), 0.0)
            image, inside = both[_channel(f.layout, 0, f.channels)], both[_channel(f.layout, f.channels, f.channels + 1)]
            blended = (image - value) * inside + value
            f.node = fn.cast(blended, dtype=types.UINT8) if f.dtype == "uint8" else blended
        _write(ctx, op, src, f)


def lower_jpeg(op: Any, ctx: LoweringContext) -> None:
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        ctx.flush_mirror(f)  # JPEG's 8x8 blocks do not commute with a mirror
        if f.channels != 3 or f.dtype != "uint8" or f.layout != "HWC":
            raise NotImplementedError(f"JPEG on a {f.channels}-channel {f.dtype} {f.layout} field {src!r} (DALI's "
                                      "jpeg_compression_distortion takes RGB uint8 images)")
        quality = ctx.drawn(op, f, "quality", lambda p: p["quality"], np.int32)
        f.node = ctx.fn.jpeg_compression_distortion(f.node, quality=quality)
        _write(ctx, op, src, f)


def gaussian_noise_refusal(op: Any) -> str:
    """Why GaussianNoise is not lowered (`Lowering.check`: every setting)."""
    return ("DALI's noise.gaussian draws its own noise and cannot take this library's keyed draws: the "
            "batches would differ from the torch backend's")


def refuse_gaussian_noise(op: Any, ctx: LoweringContext) -> None:
    raise NotImplementedError(f"GaussianNoise({gaussian_noise_refusal(op)})")
