"""Field kinds: what a field of a sample is (an image, a mask, boxes...), so ops pick the right kernel.

Every field of a pipeline has a `FieldType`, known when the pipeline is built: a decoder
declares the kind of what it decodes (``mp.decoders.image()`` an image, ``mp.decoders.mask()``
a mask, ``mp.decoders.video()`` a video...), a source declares the kinds of the fields it
gives (``label``; boxes and keypoints for detection sources, through a ``field_types()``
method), and each op declares the kind of what it writes (a spectrogram turns audio into
features). Ops dispatch on the kind, as torchvision v2 dispatches on the tensor's type:
a mask is resampled with nearest because it is a mask, boxes move with the pixels.

Shapes in the sample stage (one sample):
    image (C, H, W); video (T, C, H, W) or clips (N, T, C, H, W); mask (1, H, W) or (H, W) class
    ids; boxes float32 (N, 4) in ``format``; keypoints float32 (N, ..., 2) as (x, y); audio
    (C, N) samples; features (C, F, T); label an int; other anything (passed through).
Boxes and keypoints are in pixels of the *canvas*: the size of the image (mask, video) they
are transformed with. An op takes the canvas from the raster fields it transforms under the
same draw (they must share one size, as torchvision requires), so it is right after every op
without being carried along.

Batches (`collate`): "stack" (one tensor, equal shapes), "pad" (the varying axis padded with
zeros, and ``<field>_lengths`` int64 (B,): the time axis of audio and features, the object axis
of boxes, keypoints and per-object values, e.g. boxes (B, N_max, 4)), or "list" (a list of the
samples' tensors). Boxes, keypoints and per-object fields default to "list", audio and features
to "pad", everything else to "stack"; ``Pipeline(collate={"boxes": "pad"})`` chooses per field.

`KIND_SPECS` holds one `KindSpec` per kind: its family (raster, objects, signal, value), the axis
"pad" pads, its default and allowed collates, and what its kernels branch on (a mask's nearest
resampling, the canvas and format a boxes kernel takes). Code reads the table instead of
branching on the kind.

Per-object fields: a sample's boxes and keypoints have one row per object, and so may other
fields a source declares with ``per_object(kind)``: the objects' class ids (``per_object()``,
int64 (N,)), one mask per object (``per_object("mask")``, (N, H, W)), or any value per object
(``per_object("other")``: COCO's ``iscrowd``, ``area``). Ops that drop objects
(`SanitizeBoundingBoxes`) drop the same rows of every per-object field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

IMAGE, MASK, BOXES, KEYPOINTS, VIDEO = "image", "mask", "boxes", "keypoints", "video"
AUDIO, FEATURES, LABEL, OTHER = "audio", "features", "label", "other"

BOX_FORMATS = ("xyxy", "xywh", "cxcywh")
COLLATES = ("stack", "pad", "list")

# The families of kinds: pixels whose (H, W) is the canvas of a draw; rows of objects in pixels
# of a canvas; signals with a time axis; values passed along (labels, anything else).
RASTER_FAMILY, OBJECTS_FAMILY, SIGNAL_FAMILY, VALUE_FAMILY = "raster", "objects", "signal", "value"
FAMILIES = (RASTER_FAMILY, OBJECTS_FAMILY, SIGNAL_FAMILY, VALUE_FAMILY)


@dataclass(frozen=True)
class KindSpec:
    """What every part of the library needs to know about a field kind, in one row: collate,
    padding, and the arguments its kernels branch on, so that no code branches on the kind.

    family: one of `FAMILIES`. pad_axis: the axis "pad" pads (time, last, for signals; objects,
    first, otherwise). default_collate / collates: how its samples batch unless told, and the
    policies it can take ("pad" needs an axis that varies). resampling: the interpolation a
    geometric op resamples it with whatever the op is set to for images, never antialiased and
    new pixels 0 ("nearest" for a mask: class ids are never blended); None: the op's own.
    kernel_args: what its kernels take besides the op's options (boxes: their canvas and format).
    per_object: whether a source may declare a field of it with one row per object (`per_object`).
    """

    kind: str
    family: str
    pad_axis: int = 0
    default_collate: str = "stack"
    collates: tuple[str, ...] = COLLATES
    resampling: str | None = None
    kernel_args: tuple[str, ...] = ()
    per_object: bool = False

    @property
    def has_canvas(self) -> bool:
        """Whether its (H, W) is the canvas of a draw: the pixels boxes and keypoints are in."""
        return self.family == RASTER_FAMILY

    @property
    def is_objects(self) -> bool:
        """Whether it holds one row per object in pixels of a canvas (boxes, keypoints)."""
        return self.family == OBJECTS_FAMILY

    @property
    def decoder_fuses(self) -> bool:
        """Whether its decoder may do a geometric op's crop and resize: pixels resampled as the op
        says (a mask never is: a reduced-scale decode would smooth its class ids)."""
        return self.has_canvas and self.resampling is None


_PIXELS = ("stack", "list")  # equal sizes stack; nothing to pad along
_SIGNAL = ("pad", "stack", "list")
KIND_SPECS: dict[str, KindSpec] = {spec.kind: spec for spec in (
    KindSpec(IMAGE, RASTER_FAMILY, collates=_PIXELS),
    KindSpec(MASK, RASTER_FAMILY, collates=_PIXELS, resampling="nearest", per_object=True),
    KindSpec(BOXES, OBJECTS_FAMILY, default_collate="list", kernel_args=("canvas_size", "format")),
    KindSpec(KEYPOINTS, OBJECTS_FAMILY, default_collate="list", kernel_args=("canvas_size",)),
    KindSpec(VIDEO, RASTER_FAMILY, collates=_PIXELS),
    KindSpec(AUDIO, SIGNAL_FAMILY, pad_axis=-1, default_collate="pad", collates=_SIGNAL),
    KindSpec(FEATURES, SIGNAL_FAMILY, pad_axis=-1, default_collate="pad", collates=_SIGNAL),
    KindSpec(LABEL, VALUE_FAMILY, per_object=True),
    KindSpec(OTHER, VALUE_FAMILY, per_object=True),
)}
KINDS = tuple(KIND_SPECS)


def _of_families(*families: str) -> frozenset[str]:
    return frozenset(k for k, spec in KIND_SPECS.items() if spec.family in families)


RASTER = _of_families(RASTER_FAMILY)  # pixels: their (H, W) is the canvas of a draw
OBJECTS = _of_families(OBJECTS_FAMILY)  # one row per object: the count varies per sample
GEOMETRIC = _of_families(RASTER_FAMILY, OBJECTS_FAMILY)  # what a geometric op moves together

PER_OBJECT_KINDS = tuple(k for k, spec in KIND_SPECS.items() if spec.per_object)  # mask, label, other


@dataclass(frozen=True)
class FieldType:
    """A field's kind and what its kernels need to know about it.

    kind: one of `KINDS`. format: boxes only, "xyxy" (corners), "xywh" (top-left corner and
    size) or "cxcywh" (centre and size), in pixels. collate: how samples of this field batch
    ("stack", "pad", "list"); None for the kind's default. per_object: one row per object of
    the sample (a mask, label or other field; boxes and keypoints always are), see `per_object`.
    """

    kind: str
    format: str | None = None
    collate: str | None = None
    per_object: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"field kind {self.kind!r}: expected one of {KINDS}")
        if self.kind == BOXES:
            fmt = (self.format or "xyxy").lower()
            if fmt not in BOX_FORMATS:
                raise ValueError(f"boxes format {self.format!r}: expected one of {BOX_FORMATS}")
            object.__setattr__(self, "format", fmt)
        elif self.format is not None:
            raise ValueError(f"format={self.format!r} is for boxes, not a {self.kind} field")
        if self.per_object and not (self.spec.per_object or self.spec.is_objects):
            raise ValueError(f"per_object=True for a {self.kind} field: one row per object is for "
                             f"{sorted(PER_OBJECT_KINDS)} fields (boxes and keypoints always are)")
        if self.collate is not None:
            allowed = COLLATES if self.per_object else self.spec.collates
            if self.collate not in allowed:
                raise ValueError(f"collate={self.collate!r} for a {self.kind} field: expected one of {allowed}")

    @property
    def batching(self) -> str:
        """The collate policy in effect: the declared one, else the kind's default ("list" for
        per-object fields, whose number of rows varies per sample)."""
        return self.collate or ("list" if self.per_object else self.spec.default_collate)

    @property
    def rows_are_objects(self) -> bool:
        """Whether this field holds one row per object of its sample (boxes, keypoints, per-object fields)."""
        return self.per_object or self.spec.is_objects

    @property
    def spec(self) -> KindSpec:
        """The row of `KIND_SPECS` for this field's kind."""
        return KIND_SPECS[self.kind]

    def with_collate(self, collate: str | None) -> FieldType:
        return self if collate is None else replace(self, collate=collate)

    def to_config(self) -> dict[str, str]:
        config = {"kind": self.kind}
        if self.format is not None:
            config["format"] = self.format
        if self.collate is not None:
            config["collate"] = self.collate
        if self.per_object:
            config["per_object"] = True
        return config

    def __str__(self) -> str:
        text = f"{self.kind} ({self.format})" if self.format else self.kind
        return f"{text} per object" if self.per_object else text


def field_type(value: FieldType | str | dict) -> FieldType:
    """A `FieldType` from itself, a kind name, or its config dict."""
    if isinstance(value, FieldType):
        return value
    if isinstance(value, str):
        return FieldType(value)
    if isinstance(value, dict):
        return FieldType(**value)
    raise TypeError(f"a field type is a kind name, a FieldType or its config dict, got {value!r}")


def boxes(format: str = "xyxy", collate: str | None = None) -> FieldType:
    """The type of a boxes field: float32 (N, 4) per sample, in pixels of its image."""
    return FieldType(BOXES, format=format, collate=collate)


def keypoints(collate: str | None = None) -> FieldType:
    """The type of a keypoints field: float32 (N, ..., 2) as (x, y) per sample, in pixels."""
    return FieldType(KEYPOINTS, collate=collate)


def per_object(kind: str = LABEL, collate: str | None = None) -> FieldType:
    """The type of a field with one row per object of its sample, in the order of its boxes:
    class ids int64 (N,) (``kind="label"``, the default), masks (N, H, W) (``"mask"``: moved by
    every geometric op as masks are), or other values (``"other"``: iscrowd, area)."""
    return FieldType(kind, collate=collate, per_object=True)


def pad_axis(kind: str) -> int:
    """The axis that "pad" pads: time (last) for audio and features, objects (first) otherwise
    (`KindSpec.pad_axis`)."""
    return KIND_SPECS[kind].pad_axis


__all__ = [
    "AUDIO", "BOXES", "BOX_FORMATS", "COLLATES", "FAMILIES", "FEATURES", "GEOMETRIC", "IMAGE", "KEYPOINTS", "KINDS",
    "KIND_SPECS", "LABEL", "MASK", "OBJECTS", "OTHER", "PER_OBJECT_KINDS", "RASTER", "VIDEO", "FieldType", "KindSpec",
    "boxes", "field_type", "keypoints", "pad_axis", "per_object",
]
