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
KINDS = (IMAGE, MASK, BOXES, KEYPOINTS, VIDEO, AUDIO, FEATURES, LABEL, OTHER)

RASTER = frozenset({IMAGE, MASK, VIDEO})  # pixels: their (H, W) is the canvas of a draw
GEOMETRIC = frozenset({IMAGE, MASK, BOXES, KEYPOINTS, VIDEO})  # what a geometric op moves together
OBJECTS = frozenset({BOXES, KEYPOINTS})  # one row per object: the count varies per sample

BOX_FORMATS = ("xyxy", "xywh", "cxcywh")
COLLATES = ("stack", "pad", "list")
_DEFAULT_COLLATE = {BOXES: "list", KEYPOINTS: "list", AUDIO: "pad", FEATURES: "pad"}
# which collate policies each kind can take ("pad" needs an axis that varies)
_ALLOWED_COLLATE = {IMAGE: ("stack", "list"), MASK: ("stack", "list"), VIDEO: ("stack", "list"),
                    AUDIO: ("pad", "stack", "list"), FEATURES: ("pad", "stack", "list")}


PER_OBJECT_KINDS = (MASK, LABEL, OTHER)  # kinds a source may declare one row per object of


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
        if self.per_object and self.kind not in PER_OBJECT_KINDS + tuple(OBJECTS):
            raise ValueError(f"per_object=True for a {self.kind} field: one row per object is for "
                             f"{sorted(PER_OBJECT_KINDS)} fields (boxes and keypoints always are)")
        if self.collate is not None:
            allowed = COLLATES if self.per_object else _ALLOWED_COLLATE.get(self.kind, COLLATES)
            if self.collate not in allowed:
                raise ValueError(f"collate={self.collate!r} for a {self.kind} field: expected one of {allowed}")

    @property
    def batching(self) -> str:
        """The collate policy in effect: the declared one, else the kind's default ("list" for
        per-object fields, whose number of rows varies per sample)."""
        return self.collate or ("list" if self.per_object else _DEFAULT_COLLATE.get(self.kind, "stack"))

    @property
    def rows_are_objects(self) -> bool:
        """Whether this field holds one row per object of its sample (boxes, keypoints, per-object fields)."""
        return self.per_object or self.kind in OBJECTS

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
    """The axis that "pad" pads: time (last) for audio and features, objects (first) otherwise."""
    return -1 if kind in (AUDIO, FEATURES) else 0


__all__ = [
    "AUDIO", "BOXES", "BOX_FORMATS", "COLLATES", "FEATURES", "GEOMETRIC", "IMAGE", "KEYPOINTS", "KINDS", "LABEL",
    "MASK", "OBJECTS", "OTHER", "PER_OBJECT_KINDS", "RASTER", "VIDEO", "FieldType", "boxes", "field_type", "keypoints",
    "pad_axis", "per_object",
]
