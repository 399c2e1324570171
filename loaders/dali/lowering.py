"""Op lowering for the DALI backend: each op of a pipeline spec to the DALI operators that
mean the same, found through a table (`LOWERINGS`) keyed by op class name.

A lowering ``lower(op, ctx)`` reads the op's dataclass fields (the arguments its table
entry declares it consumes: any other argument set away from its default is refused, see
`unsupported`) and rewrites ``ctx.fields`` with DALI data nodes (images stay HWC uint8 in
DALI until ``crop_mirror_normalize`` or the final transpose to this library's (C, H, W)). Parameters that depend on a sample's
size are computed on the host by the op's own code from the JPEG header and fed as
per-sample argument inputs: Resize's output size (torchvision's rounding), CenterCrop's
offset, and the keyed draws of random ops (`LoweringContext.drawn`), so the geometry and
the draws are exactly this library's.

Resampling: DALI's nearest samples pixel centres, which is torch's "nearest-exact";
torch's "nearest" (source pixel floor(dst * in / out)) is DALI's nearest over a region
shifted by half an output pixel (`nearest_roi`). A field resampled with either nearest (a
mask always is) takes the keyed crop window, whatever ``rng`` says.

Approximations, stated where they apply: ColorJitter follows each sample's drawn order of
brightness, contrast and saturation (``hue`` is refused: DALI turns hue in YIQ, not HSV);
RandomRotation and RandomAffine take the keyed inverse matrices (nearest differs at rounding
ties; bilinear also at the borders, where torchvision blends the fill by the interpolated
mask); nearest resizes differ where torch's float32 index rounds down at an exact pixel
edge; Resample uses DALI's windowed sinc, not torchaudio's; decoding is DALI's libjpeg-turbo /
nvJPEG (our decoder's reduced-size DCT decode is not used, so resized pixels differ by rounding).

The ops come bound to their fields (`Op.bind`), with each field's kind: the lowering applies
what the op does to each kind as the torch kernels do, asking the same place
(`mediapipe.augment.functional.spatial.sampling`: a mask is resampled with nearest, never
antialiased, and filled with 0). The lowerings handle images, masks, audio and features
(`LOWERED_KINDS`); an op given a field of another kind (boxes, keypoints, video) is refused
at build time, naming the op, the field and its kind.

An op whose class is not in the table, whose fields no longer match what its lowering
consumes, with an argument changed from its default that the lowering does not consume, or
whose settings have no counterpart (``Lowering.check``) is reported by `unsupported` before
anything is built. Nothing here imports DALI at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

import numpy as np

from mediapipe.augment.base import Op
from mediapipe.augment.functional.color import JITTER_ORDER
from mediapipe.augment.functional.spatial import sampling
from mediapipe.fields import AUDIO, FEATURES, IMAGE, MASK

# Values of a field as it flows through the DALI graph.
UINT8_UNITS, UNIT_FLOAT = 255.0, 1.0

# DALI's INTERP_NN samples pixel centres (torch's "nearest-exact"); "nearest" adds `nearest_roi`
INTERP = {"nearest": "INTERP_NN", "nearest-exact": "INTERP_NN", "bilinear": "INTERP_LINEAR",
          "bicubic": "INTERP_CUBIC"}
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
    channels: int = 3  # image: 1 for a grey decode (mode="L")
    pad_value: float = 0.0  # audio: what the host pads each sample's time axis with
    pad_to: int | None = None  # audio: the padded length at least this (PadTrim)
    window_of: Callable[[Any], tuple[int, int]] | None = None  # audio, host: a sample's (first, count) decoded


HostFn = Callable[[Any], np.ndarray]


class LoweringContext:
    """What a lowering function sees: DALI's modules, the fields, and per-sample host inputs."""

    def __init__(self, fn: Any, types: Any, device: str, host_input: Callable[[str, HostFn], Any]) -> None:
        self.fn, self.types, self.device = fn, types, device  # device: "cpu" or "gpu"
        self.fields: dict[str, FieldNode] = {}
        self.op_index = 0  # the op being lowered: its position in the spec, the key of its draws
        self.keyed = False  # True: crops and flips too take the torch backend's keyed draws
        self._host_input = host_input

    def params_of(self, op: Op, f: FieldNode) -> Callable[[Any], dict[str, Any]]:
        """sample -> the op's own ``sample_params`` for field ``f`` as it is now, keyed as the
        torch backend keys them (seed, epoch, sample index, op index)."""
        index, size_of = self.op_index, f.size_of

        def params(sample: Any) -> dict[str, Any]:
            return sample.params(index, op, size_of(sample) if size_of is not None else None)

        return params

    def drawn(self, op: Op, f: FieldNode, name: str, value: Callable[[dict[str, Any]], Any], dtype: Any) -> Any:
        """A per-sample input from the op's keyed draws (`params_of`): DALI then applies exactly
        the draws the torch backend applies."""
        params = self.params_of(op, f)
        return self.host_input(f"{type(op).__name__}.{name}",
                               lambda sample: np.asarray(value(params(sample)), dtype=dtype))

    def operand(self, node: Any) -> Any:
        """A host input used as a tensor operand (not as an argument) next to device data."""
        return node.gpu() if self.device == "gpu" else node

    def host_input(self, name: str, compute: HostFn) -> Any:
        """A per-sample argument input, ``compute(sample)`` evaluated on the host for each sample."""
        return self._host_input(name, compute)

    def decoded(self, name: str, fused: Callable[[FieldNode], Any] | None = None) -> FieldNode:
        """The field, decoded (with ``fused(field)`` as the decoder call, when given)."""
        f = self.fields[name]
        if f.decoded:
            return f
        decoder_device = "mixed" if self.device == "gpu" else "cpu"
        opts = f.options
        if f.kind == "audio":  # libsndfile on the CPU; mono (N,) float32 in [-1, 1]
            rate = opts.get("sample_rate") or 0.0
            f.node = self.fn.decoders.audio(f.node, downmix=True, dtype=self.types.FLOAT, sample_rate=float(rate))[0]
            if f.window_of is not None:  # a manifest's utterance within its file, on the output rate's grid
                first = self.host_input("audio.first", lambda s, w=f.window_of: np.array([w(s)[0]], np.int32))
                count = self.host_input("audio.count", lambda s, w=f.window_of: np.array([w(s)[1]], np.int32))
                f.node = self.fn.slice(f.node, first, count, axes=[0], normalized_anchor=False,
                                       normalized_shape=False, out_of_bounds_policy="trim_to_shape")
            f.layout, f.dtype, f.units = "N", "float32", UNIT_FLOAT
        elif fused is not None:
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


def decode_problem(kind: str, options: dict[str, Any]) -> str | None:
    """Why DALI cannot decode a field of this kind with these options, or None."""
    if options.get("from_field") is not None:
        return (f"from_field={options['from_field']!r} (a field decoded from another field's file and time spans "
                "is not lowered)")
    if kind == "image":
        return None
    if kind == "audio":
        if not options.get("mono"):
            return "mono=False (DALI's audio features take one channel: use mp.decoders.audio(mono=True))"
        if options.get("offset") or options.get("duration") is not None or options.get("random_crop") is not None:
            return "offset/duration/random_crop (decode windows are not lowered)"
        return None
    if kind == "video":  # DALI's CPU video decoder (2.4) takes neither AV1 nor H.264; NVDEC is untested here
        return "video decoding is not lowered to DALI yet"
    return f"{kind} decoding has no DALI counterpart"


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


def _sampling(op: Any, src: str, interpolation: str | None = None, antialias: bool = False,
              fill: Any = 0) -> tuple[str, bool, Any]:
    """What field ``src`` of the (bound) op is resampled with, by its kind: the torch kernels' rule."""
    return sampling(op.binding.type_of(src).kind, interpolation or "nearest", antialias, fill)


# -- geometry -------------------------------------------------------------------------------
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
    truncates after each step, as torchvision does."""
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


# -- audio (one channel: (N,) waveforms, (F, T) features in DALI; (1, ...) in our batches) -----
def _audio(ctx: LoweringContext, op: Any, layouts: tuple[str, ...] = ("N",)) -> FieldNode:
    (src,) = op.inputs  # an audio op reads one field (key=, or keys= of one)
    f = _copy(ctx.decoded(src))
    if f.kind != "audio" or f.layout not in layouts:
        raise NotImplementedError(f"{type(op).__name__}(key={src!r}) on a {f.kind} field laid out {f.layout}")
    return f


def _write_audio(ctx: LoweringContext, op: Any, f: FieldNode) -> None:
    ctx.fields[op.outputs[0]] = f


def lower_preemphasis(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    f.node = ctx.fn.preemphasis_filter(f.node, preemph_coeff=float(op.coef), border="zero")  # x[-1] = 0
    _write_audio(ctx, op, f)


def lower_resample(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    if op.orig_freq != op.new_freq:
        f.node = ctx.fn.audio_resample(f.node, in_rate=float(op.orig_freq), out_rate=float(op.new_freq))
    _write_audio(ctx, op, f)


def lower_nonsilent_region(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    begin, length = ctx.fn.nonsilent_region(f.node, cutoff_db=float(op.cutoff_db), window_length=int(op.window))
    f.node = ctx.fn.slice(f.node, begin, length, axes=[0])
    _write_audio(ctx, op, f)


def lower_pad_trim(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op, ("N", "FT"))
    axis = 0 if f.layout == "N" else 1  # the time axis, last in our layout
    f.node = ctx.fn.slice(f.node, start=[0], shape=[int(op.length)], axes=[axis],
                          out_of_bounds_policy="trim_to_shape")
    f.pad_to = int(op.length)  # the host pads to it; lengths keep the real sizes, as PadTrim's do
    _write_audio(ctx, op, f)


def lower_gain(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    factor = ctx.operand(ctx.drawn(op, f, "factor", lambda p: 10.0 ** (p["db"] / 20.0), np.float32))
    f.node = f.node * factor  # the torch backend's keyed gain
    _write_audio(ctx, op, f)


def lower_audio_normalize(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    # (x - mean) / sqrt(var + eps) over the utterance (population variance), as ours
    f.node = ctx.fn.normalize(f.node, axes=[0], epsilon=float(op.eps), ddof=0)
    _write_audio(ctx, op, f)


def lower_mfcc(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    _mel(op, ctx, f)
    _decibels(ctx, f, 10.0, op.amin, 0.0)
    f.node = ctx.fn.mfcc(f.node, axis=0, dct_type=2, n_mfcc=op.n_mfcc, normalize=op.dct_norm == "ortho")
    if op.dct_norm is None:  # torchaudio's unnormalised DCT-II is twice DALI's
        f.node = f.node * 2.0
    _write_audio(ctx, op, f)


def _window(op: Any) -> list[float]:
    import torch

    n = op.n_fft
    make = {"hann": torch.hann_window, "hamming": torch.hamming_window}.get(op.window)
    w = make(n, periodic=True) if make is not None else torch.ones(n)
    return [float(v) for v in w]


def _stft(op: Any, ctx: LoweringContext, f: FieldNode) -> None:
    f.node = ctx.fn.spectrogram(f.node, nfft=op.n_fft, window_length=op.n_fft, window_step=op.hop_length,
                                window_fn=_window(op), power=int(op.power), center_windows=bool(op.center),
                                reflect_padding=True, layout="ft")
    f.layout = "FT"


def _mel(op: Any, ctx: LoweringContext, f: FieldNode) -> None:
    _stft(op, ctx, f)
    f.node = ctx.fn.mel_filter_bank(f.node, sample_rate=float(op.sample_rate), nfilter=op.n_mels,
                                    freq_low=float(op.f_min), freq_high=float(op.f_max or op.sample_rate / 2),
                                    normalize=op.norm == "slaney", mel_formula=op.mel_scale)


def _decibels(ctx: LoweringContext, f: FieldNode, multiplier: float, amin: float, pad_value: float) -> None:
    # reference=1: absolute dB as torchaudio's (DALI's default, 0, would be each sample's peak)
    f.node = ctx.fn.to_decibels(f.node, multiplier=multiplier, reference=1.0,
                                cutoff_db=float(multiplier * np.log10(amin)))
    f.pad_value = pad_value


def lower_spectrogram(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    _stft(op, ctx, f)
    _write_audio(ctx, op, f)


def lower_mel_spectrogram(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    _mel(op, ctx, f)
    _write_audio(ctx, op, f)


def lower_log_mel_spectrogram(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    _mel(op, ctx, f)
    _decibels(ctx, f, 10.0, op.amin, op.pad_value)
    _write_audio(ctx, op, f)


def lower_amplitude_to_db(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op, ("FT",))
    _decibels(ctx, f, 10.0 if op.stype == "power" else 20.0, op.amin, op.pad_value)
    _write_audio(ctx, op, f)


def _stft_check(op: Any) -> str | None:
    if op.power not in (1, 2, 1.0, 2.0):
        return f"power={op.power} (DALI: 1 or 2)"
    if op.win_length not in (None, op.n_fft):
        return f"win_length={op.win_length} != n_fft (DALI's window spans the FFT)"
    if op.window not in ("hann", "hamming", "rectangular"):
        return f"window={op.window!r}"
    return None


def _mel_check(op: Any) -> str | None:
    if op.norm not in (None, "slaney") or op.mel_scale not in ("htk", "slaney"):
        return f"norm={op.norm!r}, mel_scale={op.mel_scale!r}"
    return _stft_check(op)


def _no_top_db(op: Any) -> str | None:
    return f"top_db={op.top_db} (DALI's to_decibels has no per-sample floor)" if op.top_db is not None else None


@dataclass(frozen=True)
class Lowering:
    """How one op class lowers: the function, and the op's arguments (dataclass fields) it
    consumes: reads, or honours through the op's own draws. Each must exist on the op (a
    changed op is reported as unsupported instead of misread), and an argument set away from
    its default that is not consumed is refused (`unconsumed`)."""

    lower: Callable[[Any, LoweringContext], None]
    consumes: frozenset[str]
    dali_ops: str  # for the docs and the error message
    check: Callable[[Any], str | None] = lambda op: None  # why this op's settings cannot lower, or None


FIELD_ARGS = "key keys out"  # every lowering reads ``op.inputs`` and writes ``op.outputs``


def _entry(lower: Callable, consumes: str, dali_ops: str, check: Callable[[Any], str | None] | None = None
           ) -> Lowering:
    return Lowering(lower, frozenset(f"{FIELD_ARGS} {consumes}".split()), dali_ops, check or (lambda op: None))


# The field kinds the lowerings handle: an op on boxes, keypoints or a video is refused.
LOWERED_KINDS = frozenset({IMAGE, MASK, AUDIO, FEATURES})


def _float_dtype(op: Any) -> str | None:
    return None if op.dtype in ("float32", "float16") else f"dtype={op.dtype!r} (DALI writes float32 or float16)"


STFT_ARGS = "n_fft hop_length win_length window power center"
MEL_ARGS = f"{STFT_ARGS} sample_rate n_mels f_min f_max norm mel_scale"

# op class name -> lowering. Ops added to the library later get an entry here once their
# DALI counterpart is written; until then they are reported by `unsupported`.
LOWERINGS: dict[str, Lowering] = {
    "RandomResizedCrop": _entry(lower_random_resized_crop, "size scale ratio interpolation antialias",
                                "decoders.image_random_crop + resize (fused), else random_resized_crop",
                                _cubic_check),
    "Resize": _entry(lower_resize, "size max_size interpolation antialias", "resize (per-sample size)",
                     _cubic_check),
    "CenterCrop": _entry(lower_center_crop, "size", "slice (per-sample start, pad out of bounds)"),
    "HorizontalFlip": _entry(lower_horizontal_flip, "p", "random.coin_flip -> crop_mirror_normalize(mirror) or flip"),
    "VerticalFlip": _entry(lower_vertical_flip, "p", "random.coin_flip -> flip(vertical)"),
    "Normalize": _entry(lower_normalize, "mean std dtype", "crop_mirror_normalize (HWC uint8 -> CHW float)",
                        _float_dtype),
    "ToDtype": _entry(lower_to_dtype, "dtype scale", "cast (+ multiply by 1/255)", _float_dtype),
    "RandomCrop": _entry(lower_random_crop, "size padding pad_if_needed fill padding_mode",
                         "slice (keyed start drawn on the host, pad out of bounds)", _constant_padding),
    "Pad": _entry(lower_pad, "padding fill padding_mode", "slice (negative start, pad out of bounds)",
                  _constant_padding),
    "ColorJitter": _entry(lower_color_jitter, "brightness contrast saturation hue",
                          "arithmetic blends, keyed factors and order (brightness, contrast, saturation)",
                          lambda op: "hue (DALI's hue turns in YIQ, not HSV: several grey levels off)"
                          if "hue" in op.ranges() else None),
    "RandomGrayscale": _entry(lower_random_grayscale, "p", "arithmetic blend with the luma"),
    "GaussianBlur": _entry(lower_gaussian_blur, "kernel_size sigma", "gaussian_blur (keyed sigma)"),
    "RandomErasing": _entry(lower_random_erasing, "p scale ratio value", "erase (keyed boxes)"),
    "RandomAffine": _entry(lower_random_affine, "degrees translate scale shear interpolation fill center",
                           "warp_affine (keyed matrices)",
                           lambda op: (f"center={op.center}" if op.center is not None else None) or _scalar_fill(op)),
    "RandomRotation": _entry(lower_random_rotation, "degrees interpolation expand center fill",
                             "warp_affine (keyed matrices)",
                             lambda op: ("expand=True" if op.expand else None) or
                             (f"center={op.center}" if op.center is not None else None) or _scalar_fill(op)),
    "PreEmphasis": _entry(lower_preemphasis, "coef", "preemphasis_filter(border='zero')"),
    "Resample": _entry(lower_resample, "orig_freq new_freq", "audio_resample"),
    "NonSilentRegion": _entry(lower_nonsilent_region, "cutoff_db window", "nonsilent_region + slice"),
    "PadTrim": _entry(lower_pad_trim, "length", "slice(trim_to_shape) + host padding to length"),
    "Spectrogram": _entry(lower_spectrogram, STFT_ARGS,
                          "spectrogram(layout='ft')", _stft_check),
    "MelSpectrogram": _entry(lower_mel_spectrogram, MEL_ARGS, "spectrogram + mel_filter_bank", _mel_check),
    "LogMelSpectrogram": _entry(lower_log_mel_spectrogram, f"{MEL_ARGS} amin top_db pad_value",
                                "spectrogram + mel_filter_bank + to_decibels(reference=1)",
                                lambda op: _no_top_db(op) or _mel_check(op)),
    "Gain": _entry(lower_gain, "db", "multiply (keyed gain)"),
    "AudioNormalize": _entry(lower_audio_normalize, "eps", "normalize(axes=[0], epsilon)"),
    "MFCC": _entry(lower_mfcc, f"{MEL_ARGS} n_mfcc top_db dct_norm amin",
                   "spectrogram + mel_filter_bank + to_decibels(reference=1) + mfcc",
                   lambda op: _no_top_db(op) or _mel_check(op) or
                   (f"dct_norm={op.dct_norm!r}" if op.dct_norm not in (None, "ortho") else None)),
    "AmplitudeToDB": _entry(lower_amplitude_to_db, "stype amin top_db pad_value", "to_decibels(reference=1)",
                            _no_top_db),
}


def changed_args(op: Op) -> list[str]:
    """The op's arguments (dataclass fields) whose value differs from its default: from the
    field's default, and from the op built without arguments where it can be (so a default
    the op normalises, 224 to (224, 224), is no change)."""
    try:
        reference: Op | None = type(op)()
    except Exception:  # an op with a required argument: compare with the declared defaults only
        reference = None
    changed = []
    for f in fields(op):
        value = getattr(op, f.name)
        defaults = [f.default] if f.default is not MISSING else []
        if f.default_factory is not MISSING:
            defaults.append(f.default_factory())
        if reference is not None:
            defaults.append(getattr(reference, f.name))
        if not any(_same(value, d) for d in defaults):
            changed.append(f.name)
    return changed


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # an array or tensor argument: compared element-wise, not as one truth
        return a is b


def unconsumed(op: Op) -> list[str]:
    """The op's arguments changed from their defaults that its lowering does not consume
    (every changed argument when the op has no lowering)."""
    entry = LOWERINGS.get(type(op).__name__)
    consumes = entry.consumes if entry is not None else frozenset()
    return [name for name in changed_args(op) if name not in consumes]


def unsupported(ops: list[Op]) -> list[str]:
    """``"augment[i] Name(why)"`` for each op that has no DALI lowering (or one that no longer
    fits), has arguments the lowering does not consume, or has settings without a counterpart;
    and ``"augment[i] Name(field 'boxes' of kind boxes ...)"`` for each field of a kind no
    lowering handles (the ops come bound to their fields, as the pipeline's plan holds them)."""
    out = []
    for i, op in enumerate(ops):
        name = type(op).__name__
        entry = LOWERINGS.get(name)
        if entry is None or not entry.consumes <= {f.name for f in fields(op)}:
            out.append(f"augment[{i}] {name}")
        elif left := unconsumed(op):
            args = ", ".join(f"{a}={getattr(op, a)!r}" for a in left)
            out.append(f"augment[{i}] {name}({args}: arguments the DALI lowering does not read)")
        elif (why := entry.check(op)) is not None:
            out.append(f"augment[{i}] {name}({why})")
        b = op.binding
        for field_name, t in zip(b.inputs, b.types):
            if t.kind not in LOWERED_KINDS:
                out.append(f"augment[{i}] {name}(field {field_name!r} of kind {t}: DALI lowers "
                           f"{sorted(LOWERED_KINDS)} fields)")
    return out


def lowering_table() -> dict[str, str]:
    """Op class name -> the DALI operators it lowers to (what ``mediapipe bench`` and docs print)."""
    return {name: entry.dali_ops for name, entry in LOWERINGS.items()}
