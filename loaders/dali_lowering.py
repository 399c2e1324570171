"""Op lowering for the DALI backend: each op of a pipeline spec to the DALI operators that
mean the same, found through a table keyed by op class name.

An op is lowered by a function ``lower(op, ctx)`` that reads the op's dataclass fields
and rewrites ``ctx.fields`` with DALI data nodes. Deterministic parameters that depend on
a sample's size (Resize's output size, CenterCrop's offset) are computed on the host by
the op's own ``output_size`` / ``sample_params`` from the JPEG header and fed to DALI as
per-sample argument inputs, so the geometry is exactly this library's. Random
parameters are drawn by DALI's own generators (same distributions, other numbers).

An op whose class is not in `LOWERINGS` (or whose fields do not match what its lowering
reads, e.g. an op that changed since this table was written) is reported by `unsupported`
before anything is built. Nothing here imports DALI at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from mediapipe.augment.base import Op

# Values of a field as it flows through the DALI graph.
UINT8_UNITS, UNIT_FLOAT = 255.0, 1.0

INTERP = {"nearest": "INTERP_NN", "bilinear": "INTERP_LINEAR", "bicubic": "INTERP_CUBIC"}
DTYPES = {"float32": "FLOAT", "float16": "FLOAT16", "uint8": "UINT8"}


@dataclass
class FieldNode:
    """A field in the DALI graph: its node (or the encoded bytes before decoding), layout, units."""

    node: Any
    kind: str  # "image"
    layout: str = "HWC"
    dtype: str = "uint8"
    units: float = UINT8_UNITS  # 255 for uint8 pixels, 1 for float in [0, 1] or normalised
    decoded: bool = True
    options: dict[str, Any] = field(default_factory=dict)  # decoder options, while not decoded
    size_of: Callable[[Any], tuple[int, int]] | None = None  # host: a sample's (height, width) here
    mirror: Any = None  # a pending per-sample horizontal flip, fused into crop_mirror_normalize


HostFn = Callable[[Any], np.ndarray]


class LoweringContext:
    """What a lowering function sees: DALI's modules, the fields, and per-sample host inputs."""

    def __init__(self, fn: Any, types: Any, device: str, host_input: Callable[[str, HostFn], Any]) -> None:
        self.fn, self.types, self.device = fn, types, device  # device: "cpu" or "gpu"
        self.fields: dict[str, FieldNode] = {}
        self._host_input = host_input

    def host_input(self, name: str, compute: HostFn) -> Any:
        """A per-sample argument input, ``compute(sample)`` evaluated on the host for each sample."""
        return self._host_input(name, compute)

    def decoded(self, name: str, fused: Callable[[FieldNode], Any] | None = None) -> FieldNode:
        """The field, decoded (with ``fused(field)`` as the decoder call, when given)."""
        f = self.fields[name]
        if f.decoded:
            return f
        if f.kind != "image":
            raise NotImplementedError(f"decoding {f.kind} with DALI")
        decoder_device = "mixed" if self.device == "gpu" else "cpu"
        opts = f.options
        if fused is not None:
            f.node = fused(f)
        else:
            f.node = self.fn.decoders.image(f.node, device=decoder_device, **image_decoder_args(opts, self.types))
        f.decoded = True
        return f

    def flush_mirror(self, f: FieldNode) -> None:
        """Apply a pending horizontal flip now (the next op does not commute with it)."""
        if f.mirror is not None:
            f.node = self.fn.flip(f.node, horizontal=f.mirror, vertical=0)
            f.mirror = None


def image_decoder_args(options: dict[str, Any], types: Any) -> dict[str, Any]:
    return {
        "output_type": types.GRAY if options.get("mode") == "L" else types.RGB,
        "adjust_orientation": bool(options.get("exif_transpose", False)),
        "jpeg_fancy_upsampling": True,  # libjpeg-turbo's default, which the CPU decoders use
    }


def _write(ctx: LoweringContext, op: Op, src: str, f: FieldNode) -> None:
    """Store the lowered field under the op's output name; an ``out=`` op leaves ``src`` as it was."""
    ctx.fields[op.outputs[op.inputs.index(src)]] = f


def _copy(f: FieldNode) -> FieldNode:
    return FieldNode(**{k.name: getattr(f, k.name) for k in fields(f)})


# -- geometry -------------------------------------------------------------------------------
def lower_random_resized_crop(op: Any, ctx: LoweringContext) -> None:
    fn, types = ctx.fn, ctx.types
    height, width = op.size
    interp = getattr(types, INTERP[op.interpolation])
    for src in op.inputs:
        in_place = op.outputs[op.inputs.index(src)] == src
        if not ctx.fields[src].decoded and in_place:
            # fused: decode only the random region (nvJPEG ROI decode on a GPU)
            def fused(f: FieldNode) -> Any:
                return fn.decoders.image_random_crop(
                    f.node, device="mixed" if ctx.device == "gpu" else "cpu",
                    random_area=list(op.scale), random_aspect_ratio=list(op.ratio), num_attempts=10,
                    **image_decoder_args(f.options, types))
            f = _copy(ctx.decoded(src, fused))
            f.node = fn.resize(f.node, size=[height, width], interp_type=interp, antialias=op.antialias)
        else:
            f = _copy(ctx.decoded(src))
            ctx.flush_mirror(f)
            f.node = fn.random_resized_crop(f.node, size=[height, width], random_area=list(op.scale),
                                            random_aspect_ratio=list(op.ratio), num_attempts=10,
                                            interp_type=interp, antialias=op.antialias)
        f.size_of = lambda sample, s=(height, width): s
        _write(ctx, op, src, f)


def lower_resize(op: Any, ctx: LoweringContext) -> None:
    fn, types = ctx.fn, ctx.types
    interp = getattr(types, INTERP[op.interpolation])
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        ctx.flush_mirror(f)
        before = f.size_of

        def size_of(sample: Any, before: Any = before) -> tuple[int, int]:
            return op.output_size(*before(sample))

        size = ctx.host_input(f"{type(op).__name__}.size", lambda s, g=size_of: np.array(g(s), np.float32))
        f.node = fn.resize(f.node, size=size, interp_type=interp, antialias=op.antialias,
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


def lower_horizontal_flip(op: Any, ctx: LoweringContext) -> None:
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        coin = ctx.fn.random.coin_flip(probability=float(op.p), dtype=ctx.types.INT32)
        if f.mirror is not None:  # two flips: their parities add
            f.mirror = (f.mirror + coin) % 2
        else:
            f.mirror = coin
        _write(ctx, op, src, f)


def lower_vertical_flip(op: Any, ctx: LoweringContext) -> None:
    for src in op.inputs:
        f = _copy(ctx.decoded(src))
        coin = ctx.fn.random.coin_flip(probability=float(op.p), dtype=ctx.types.INT32)
        f.node = ctx.fn.flip(f.node, horizontal=0, vertical=coin)  # commutes with a pending mirror
        _write(ctx, op, src, f)


# -- colour and dtype -----------------------------------------------------------------------
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


@dataclass(frozen=True)
class Lowering:
    """How one op class lowers: the function, and the dataclass fields it reads (all of them
    must exist on the op, so a changed op is reported as unsupported instead of misread)."""

    lower: Callable[[Any, LoweringContext], None]
    reads: frozenset[str]
    dali_ops: str  # for the docs and the error message
    check: Callable[[Any], str | None] = lambda op: None  # why this op's settings cannot lower, or None


def _entry(lower: Callable, reads: str, dali_ops: str, check: Callable[[Any], str | None] | None = None) -> Lowering:
    return Lowering(lower, frozenset(reads.split()), dali_ops, check or (lambda op: None))


def _float_dtype(op: Any) -> str | None:
    return None if op.dtype in ("float32", "float16") else f"dtype={op.dtype!r} (DALI writes float32 or float16)"


# op class name -> lowering. Ops added to the library later get an entry here once their
# DALI counterpart is written; until then they are reported by `unsupported`.
LOWERINGS: dict[str, Lowering] = {
    "RandomResizedCrop": _entry(lower_random_resized_crop, "size scale ratio interpolation antialias",
                                "decoders.image_random_crop + resize (fused), else random_resized_crop"),
    "Resize": _entry(lower_resize, "size max_size interpolation antialias", "resize (per-sample size)"),
    "CenterCrop": _entry(lower_center_crop, "size", "slice (per-sample start, pad out of bounds)"),
    "HorizontalFlip": _entry(lower_horizontal_flip, "p", "random.coin_flip -> crop_mirror_normalize(mirror) or flip"),
    "VerticalFlip": _entry(lower_vertical_flip, "p", "random.coin_flip -> flip(vertical)"),
    "Normalize": _entry(lower_normalize, "mean std dtype", "crop_mirror_normalize (HWC uint8 -> CHW float)",
                        _float_dtype),
    "ToDtype": _entry(lower_to_dtype, "dtype scale", "cast (+ multiply by 1/255)", _float_dtype),
}


def unsupported(ops: list[Op]) -> list[str]:
    """``"augment[i] Name"`` for each op that has no DALI lowering (or one that no longer fits)."""
    out = []
    for i, op in enumerate(ops):
        entry = LOWERINGS.get(type(op).__name__)
        have = {f.name for f in fields(op)}
        if entry is None or not entry.reads <= have:
            out.append(f"augment[{i}] {type(op).__name__}")
        elif (why := entry.check(op)) is not None:
            out.append(f"augment[{i}] {type(op).__name__}({why})")
    return out


def lowering_table() -> dict[str, str]:
    """Op class name -> the DALI operators it lowers to (what ``mediapipe bench`` and docs print)."""
    return {name: entry.dali_ops for name, entry in LOWERINGS.items()}
