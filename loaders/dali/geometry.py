"""DALI lowerings of the geometric image ops (resize, crops, flips, pad, affine warps), with torch's
resampling and the keyed windows and matrices computed on the host by the ops' own code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mediapipe.loaders.dali.context import (
    FieldNode,
    LoweringContext,
    _copy,
    _sampling,
    _write,
    image_decoder_args,
)

# DALI's INTERP_NN samples pixel centres (torch's "nearest-exact"); "nearest" adds `nearest_roi`
INTERP = {"nearest": "INTERP_NN", "nearest-exact": "INTERP_NN", "bilinear": "INTERP_LINEAR",
          "bicubic": "INTERP_CUBIC"}


def nearest_roi(interpolation: str, in_size: tuple[int, int], out_size: tuple[int, int]
                ) -> tuple[np.ndarray, np.ndarray]:
    """(roi_start, roi_end) that make DALI's nearest, which samples at pixel centres
    (floor((dst + 0.5) * in / out)), pick torch's source pixel: the same for "nearest-exact",
    floor(dst * in / out) for "nearest" (the region moved back by half an output pixel's span).
    Both move on by a quarter of 1 / out (source positions fall on multiples of 1 / (2 out),
    so no other position crosses a pixel edge): a position exactly on an edge lands past it,
    as torch's arithmetic puts it, where DALI's float rounding put some before it."""
    start = [0.25 / o - (i / o / 2 if interpolation == "nearest" else 0.0) for i, o in zip(in_size, out_size)]
    return np.array(start, np.float32), np.array([a + i for a, i in zip(start, in_size)], np.float32)


def _resize(ctx: LoweringContext, node: Any, size: Any, interpolation: str, antialias: bool,
            in_size_of: Callable[[Any], tuple[int, int]] | None = None,
            out_size_of: Callable[[Any], tuple[int, int]] | None = None, **args: Any) -> Any:
    """``fn.resize`` as torch's ``interpolation`` means it; nearest needs each sample's input
    and output size on the host (``in_size_of``, ``out_size_of``) for its region."""
    args.update(_interp(ctx, interpolation, antialias))
    if interpolation.startswith("nearest"):
        def roi(sample: Any, end: int) -> np.ndarray:
            return nearest_roi(interpolation, in_size_of(sample), out_size_of(sample))[end]

        args.update(roi_start=ctx.host_input("nearest.roi_start", lambda s: roi(s, 0)),
                    roi_end=ctx.host_input("nearest.roi_end", lambda s: roi(s, 1)), roi_relative=False)
    return ctx.fn.resize(node, size=size, **args)


def _interp(ctx: LoweringContext, interpolation: str, antialias: bool) -> dict[str, Any]:
    nearest = interpolation.startswith("nearest")  # torch never antialiases nearest
    return dict(interp_type=getattr(ctx.types, INTERP[interpolation]), antialias=antialias and not nearest)


def lower_random_resized_crop(op: Any, ctx: LoweringContext) -> None:
    fn, types = ctx.fn, ctx.types
    height, width = op.size
    sampled = {src: _sampling(op, src, op.interpolation, op.antialias)[:2] for src in op.inputs}
    # the torch backend's window, drawn on the host from the header's size: with rng="keyed",
    # for several fields (one window for all), and for nearest (its region needs the window)
    keyed = ctx.keyed or len(op.inputs) > 1 or any(i.startswith("nearest") for i, _ in sampled.values())
    for src in op.inputs:
        interpolation, antialias = sampled[src]
        in_place = op.outputs[op.inputs.index(src)] == src
        fuse = (not ctx.fields[src].decoded and in_place  # decode only the region (nvJPEG ROI on a GPU)
                and op.fusable(op.binding.type_of(src)))
        decoder = dict(device="mixed" if ctx.device == "gpu" else "cpu")
        if keyed:
            f = ctx.fields[src]
            window = ctx.params_of(op, f)
            anchor = ctx.drawn(op, f, "anchor", lambda p: (p["top"], p["left"]), np.int32)
            shape = ctx.drawn(op, f, "shape", lambda p: (p["height"], p["width"]), np.int32)
            if fuse:
                f = _copy(ctx.decoded(src, lambda f, a=anchor, s=shape, d=decoder: fn.decoders.image_slice(
                    f.node, a, s, axis_names="HW", normalized_anchor=False, normalized_shape=False,
                    **d, **image_decoder_args(f.options, types))))
            else:
                f = _copy(ctx.decoded(src))
                ctx.flush_mirror(f)
                f.node = fn.slice(f.node, anchor, shape, axis_names="HW", normalized_anchor=False,
                                  normalized_shape=False)
            f.node = _resize(ctx, f.node, [height, width], interpolation, antialias,
                             lambda s, w=window: (w(s)["height"], w(s)["width"]), lambda s: (height, width))
        elif fuse:
            f = _copy(ctx.decoded(src, lambda f, d=decoder: fn.decoders.image_random_crop(
                f.node, random_area=list(op.scale), random_aspect_ratio=list(op.ratio), num_attempts=10,
                **d, **image_decoder_args(f.options, types))))
            f.node = _resize(ctx, f.node, [height, width], interpolation, antialias)
        else:
            f = _copy(ctx.decoded(src))
            ctx.flush_mirror(f)
            f.node = fn.random_resized_crop(f.node, random_area=list(op.scale), random_aspect_ratio=list(op.ratio),
                                            num_attempts=10, size=[height, width],
                                            **_interp(ctx, interpolation, antialias))
        f.size_of = lambda sample, s=(height, width): s
        _write(ctx, op, src, f)


def lower_resize(op: Any, ctx: LoweringContext) -> None:
    for src in op.inputs:
        interpolation, antialias, _ = _sampling(op, src, op.interpolation, op.antialias)
        f = _copy(ctx.decoded(src))
        ctx.flush_mirror(f)
        before = f.size_of

        def size_of(sample: Any, before: Any = before) -> tuple[int, int]:
            return op.output_size(*before(sample))

        size = ctx.host_input(f"{type(op).__name__}.size", lambda s, g=size_of: np.array(g(s), np.float32))
        f.node = _resize(ctx, f.node, size, interpolation, antialias, before, size_of,
                         mode="default", subpixel_scale=False)
        f.size_of = size_of
        _write(ctx, op, src, f)


def lower_center_crop(op: Any, ctx: LoweringContext) -> None:
    fn = ctx.fn
    height, width = op.size
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        before = f.size_of

        def anchor(sample: Any, before: Any = before) -> np.ndarray:
            p = op.sample_params(None, {"size": before(sample)})  # deterministic: no draws
            return np.array([p["top"], p["left"]], np.int32)

        start = ctx.host_input(f"{type(op).__name__}.start", anchor)
        # a crop commutes with a pending flip only when centred exactly; flip first to be safe
        ctx.flush_mirror(f)
        f.node = fn.slice(f.node, start=start, shape=[height, width], axis_names="HW",
                          out_of_bounds_policy="pad", fill_values=[0.0])
        f.size_of = lambda sample, s=(height, width): s
        _write(ctx, op, src, f)


def _coin(op: Any, ctx: LoweringContext, f: FieldNode) -> Any:
    if ctx.keyed:
        return ctx.drawn(op, f, "flip", lambda p: int(p["flip"]), np.int32)
    return ctx.fn.random.coin_flip(probability=float(op.p), dtype=ctx.types.INT32)


def lower_horizontal_flip(op: Any, ctx: LoweringContext) -> None:
    coin = None
    for src in op.inputs:  # every field of the op flips together
        f = _copy(ctx.decoded(src))
        coin = _coin(op, ctx, f) if coin is None else coin
        if f.mirror is not None:  # two flips: their parities add
            f.mirror = (f.mirror + coin) % 2
        else:
            f.mirror = coin
        _write(ctx, op, src, f)


def lower_vertical_flip(op: Any, ctx: LoweringContext) -> None:
    coin = None
    for src in op.inputs:  # every field of the op flips together
        f = _copy(ctx.decoded(src))
        coin = _coin(op, ctx, f) if coin is None else coin
        f.node = ctx.fn.flip(f.node, horizontal=0, vertical=coin)  # commutes with a pending mirror
        _write(ctx, op, src, f)


def lower_random_crop(op: Any, ctx: LoweringContext) -> None:
    height, width = op.size
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        ctx.flush_mirror(f)
        # the padded image's (top, left) is the source's (top - pad_top, left - pad_left); slice pads
        start = ctx.drawn(op, f, "start", lambda p: (p["top"] - p["padding"][1], p["left"] - p["padding"][0]),
                          np.int32)
        fill = _sampling(op, src, fill=op.fill)[2]
        f.node = ctx.fn.slice(f.node, start=start, shape=[height, width], axis_names="HW",
                              out_of_bounds_policy="pad", fill_values=[float(fill)])
        f.size_of = lambda sample, s=(height, width): s
        _write(ctx, op, src, f)


def lower_pad(op: Any, ctx: LoweringContext) -> None:
    left, top, right, bottom = op.padding
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        ctx.flush_mirror(f)
        before = f.size_of

        def size_of(sample: Any, before: Any = before) -> tuple[int, int]:
            h, w = before(sample)
            return h + top + bottom, w + left + right

        shape = ctx.host_input("Pad.shape", lambda s, g=size_of: np.array(g(s), np.int32))
        fill = _sampling(op, src, fill=op.fill)[2]
        f.node = ctx.fn.slice(f.node, start=[-top, -left], shape=shape, axis_names="HW",
                              out_of_bounds_policy="pad", fill_values=[float(fill)])
        f.size_of = size_of
        _write(ctx, op, src, f)


def dali_affine(inverse: Any, size: tuple[int, int]) -> np.ndarray:
    """Our inverse matrix (output to input, pixel coordinates from the image centre, as
    torchvision's) as DALI's warp_affine matrix (output to input, pixel centres at +0.5)."""
    m = np.asarray(inverse, dtype=np.float64).reshape(2, 3)
    height, width = size
    half = np.array([width / 2.0, height / 2.0])
    t = m[:, 2] + half - m[:, :2] @ half
    return np.concatenate([m[:, :2], t[:, None]], axis=1).astype(np.float32)


def _warp(op: Any, ctx: LoweringContext, matrix_of: Callable[[dict[str, Any], tuple[int, int]], Any]) -> None:
    for src in op.inputs:
        interpolation, _, fill = _sampling(op, src, op.interpolation, fill=op.fill if op.fill is not None else 0.0)
        f = _copy(ctx.decoded(src))
        ctx.flush_mirror(f)
        index, size_of = ctx.op_index, f.size_of

        def matrix(sample: Any, size_of: Any = size_of, index: int = index) -> np.ndarray:
            size = size_of(sample)
            return dali_affine(matrix_of(sample.params(index, op, size), size), size)

        m = ctx.host_input(f"{type(op).__name__}.matrix", matrix)
        f.node = ctx.fn.warp_affine(f.node, matrix=m, interp_type=getattr(ctx.types, INTERP[interpolation]),
                                    fill_value=float(fill if not isinstance(fill, tuple) else fill[0]))
        _write(ctx, op, src, f)


def _inverse(op: Any, p: dict[str, Any], size: tuple[int, int]) -> np.ndarray:
    """The op's own inverse matrix for one sample's draw (the torch kernels use the same)."""
    from mediapipe.augment.base import promote

    return op.inverse_matrices(promote(None, p)[1], size)[0].numpy()


def lower_random_rotation(op: Any, ctx: LoweringContext) -> None:
    _warp(op, ctx, lambda p, size: _inverse(op, p, size))


def lower_random_affine(op: Any, ctx: LoweringContext) -> None:
    _warp(op, ctx, lambda p, size: _inverse(op, p, size))


def _cubic_check(op: Any) -> str | None:
    if op.interpolation == "bicubic" and not op.antialias:
        return ("interpolation='bicubic', antialias=False (torch's cubic kernel is then a=-0.75; DALI's is "
                "a=-0.5, torch's with antialias=True: about a grey level on average, ten at edges)")
    return None


def _scalar_fill(op: Any) -> str | None:
    fill = getattr(op, "fill", None)
    return f"fill={fill!r} (one number per channel)" if isinstance(fill, tuple) and len(set(fill)) > 1 else None


def _constant_padding(op: Any) -> str | None:
    if getattr(op, "padding_mode", "constant") != "constant":
        return f"padding_mode={op.padding_mode!r} (DALI pads with a constant)"
    return None
