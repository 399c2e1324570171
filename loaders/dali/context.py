"""What a DALI lowering works on: the fields as DALI graph nodes (`FieldNode`), the context that
decodes them and feeds per-sample host inputs (`LoweringContext`), and the helpers every lowering shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from mediapipe.augment.base import Op
from mediapipe.augment.functional.spatial import sampling

# Values of a field as it flows through the DALI graph.
UINT8_UNITS, UNIT_FLOAT = 255.0, 1.0



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
