"""`tfrecord(paths)`: TFRecord files of ``tf.train.Example`` records, without TensorFlow.

Random access comes from an index of (offset, size) per record, the format of DALI's
``tfrecord2idx`` (one "offset size" line per record). A file without one is scanned once on
first open (each record's length field and its CRC, never its payload) and the index is
cached beside it as ``<file>.idx``, or, when that folder is read-only, in
``$MEDIAPIPE_INDEX_CACHE`` (default ``~/.cache/mediapipe/indices``). A folder or a glob never
lists an ``.idx`` file or a hidden one as a record file (`records.input_files`), so
``train-00000-of-01024`` names open the same way once their indices are cached.

Reading record i checks its framing: the length field must equal the indexed size, and the
masked CRC-32C of the length and of the payload must match (the ``crc32c`` package computes
them; ``pip install mediapipe-loader[tfrecord]``).

Objects follow the TF Object Detection API (and ImageNet's ``build_imagenet_data``): features
under ``image/object/`` hold one value per object. The four ``BOXES`` features (normalised
corners) become pixel boxes of the image, read from its header, typed as boxes
(``field_types``), so every geometric op moves them with the pixels; ``.../label`` features
are per-object class ids, other numeric ones per-object values. They batch as lists, or
padded with ``collate="pad"``, as the COCO and YOLO sources' do.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mediapipe.errors import SourceError
from mediapipe.fields import BOXES as BOX_KIND
from mediapipe.fields import LABEL, OTHER, FieldType, boxes, per_object
from mediapipe.loaders.sources.labels import class_label
from mediapipe.loaders.sources.protobuf import Feature, parse_example
from mediapipe.loaders.sources.records import (
    FileRecords,
    advise,
    check_offsets,
    file_size,
    input_files,
    load_or_build,
    pread_exact,
    read_int_table,
    record_name,
)
from mediapipe.loaders.sources.targets import BAD_ANNOTATION, OBJECT_COLLATES, clamped_boxes
from mediapipe.sample import Blob, SampleMeta, SampleRef, kind_of_bytes

IMAGENET_FEATURES: dict[str, str | tuple[str, ...]] = {"image": "image/encoded", "label": "image/class/label"}
"""The ImageNet convention (TensorFlow's build_imagenet_data, DALI's examples)."""
BOXES = ("image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax", "image/object/bbox/ymax")
"""The box features (normalised corners): ``features={"boxes": BOXES, ...}`` gives pixel boxes (N, 4)."""
DETECTION_FEATURES: dict[str, str | tuple[str, ...]] = {
    "image": "image/encoded", "boxes": BOXES, "labels": "image/object/class/label"}
"""The TF Object Detection API convention: the image, its boxes and their class ids."""
OBJECT_PREFIX = "image/object/"  # features of one value per object
OBJECT_TEXTS = ("image/object/class/text", "image/object/view")  # per-object bytes: no per-object type holds them
COORD_TOLERANCE = 1e-3  # a normalised box may pass the image's edge by this much (then clamped)
HEADER = 12  # uint64 length, uint32 masked CRC of the length
FOOTER = 4  # uint32 masked CRC of the payload
_MASK_DELTA = 0xA282EAD8


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE: list[int] | None = None


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``: the ``crc32c`` package's, else a slow pure-Python one."""
    try:
        import crc32c as fast
    except ImportError:
        global _TABLE
        _TABLE = _TABLE or _crc32c_table()
        c = 0xFFFFFFFF
        for byte in bytes(data):
            c = _TABLE[(c ^ byte) & 0xFF] ^ (c >> 8)
        return c ^ 0xFFFFFFFF
    return fast.crc32c(data)


def masked_crc(data: bytes | memoryview) -> int:
    """TFRecord's masked CRC: rotate right by 15, add a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def scan_records(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, sizes) of every record of a TFRecord file, reading only the 12-byte headers;
    a length field past the end of the file, or a length CRC that does not match, is an error
    naming the record."""
    total = file_size(path)
    offsets, sizes = [], []
    pos = 0
    with open(path, "rb") as f:
        while pos < total:
            where = record_name(path, len(offsets))
            f.seek(pos)
            head = f.read(HEADER)
            if len(head) < HEADER:
                raise SourceError(where, f"truncated: {len(head)} header bytes at offset {pos}, expected {HEADER}")
            length, crc = struct.unpack("<QI", head)
            if masked_crc(head[:8]) != crc:
                raise SourceError(where, f"length CRC mismatch at offset {pos}: not a TFRecord file, compressed, "
                                  "or corrupt")
            size = HEADER + length + FOOTER
            if size > total - pos:
                raise SourceError(where, f"truncated: the record at offset {pos} needs {size} bytes (its length "
                                  f"field says {length} bytes of payload, plus the {HEADER}-byte header and the "
                                  f"{FOOTER}-byte data CRC); the file has {total - pos} from there")
            offsets.append(pos)
            sizes.append(size)
            pos += size
    if not offsets:
        raise SourceError(path, "empty TFRecord file")
    return np.asarray(offsets, dtype=np.int64), np.asarray(sizes, dtype=np.int64)


def read_index(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A ``tfrecord2idx`` index: "offset size" per line."""
    table = read_int_table(path, 2)
    return table[:, 0].copy(), table[:, 1].copy()


def write_index(path: Path, offsets: np.ndarray, sizes: np.ndarray) -> bytes:
    return "".join(f"{o} {s}\n" for o, s in zip(offsets.tolist(), sizes.tolist())).encode()


def read_record(path: str, offset: int, size: int, number: int, verify: bool = True) -> memoryview:
    """The payload of one record, its framing and CRCs checked; errors name the record."""
    where = record_name(path, number)
    raw = pread_exact(path, offset, size, where)
    length, crc = struct.unpack_from("<QI", raw)
    if length != size - HEADER - FOOTER:
        raise SourceError(where, f"wrong length: its length field says {length} bytes, the index {size - HEADER - FOOTER} "
                          f"(offset {offset}); the index is stale or the file corrupt")
    view = memoryview(raw)
    if verify:
        if masked_crc(view[:8]) != crc:
            raise SourceError(where, f"length CRC mismatch at offset {offset}")
        (data_crc,) = struct.unpack_from("<I", raw, size - FOOTER)
        if masked_crc(view[HEADER:size - FOOTER]) != data_crc:
            raise SourceError(where, f"data CRC mismatch at offset {offset}: the record is corrupt")
    return view[HEADER:size - FOOTER]


def example_fields(features: Mapping[str, Any], wanted: Mapping[str, str | tuple[str, ...]], where: str,
                   num_classes: int | None = None) -> tuple[dict[str, Blob], int | None, dict[str, Any]]:
    """(blobs, label, fields) of one parsed Example: each wanted name from its feature. Bytes
    holding media become blobs; other bytes are UTF-8 text; one number is a number, more
    are a 1-d tensor; a tuple of features stacks into an (n, k) float tensor. The class
    ``label`` is a whole number (`class_label`: 2.9 is refused, not class 2), one of the
    ``num_classes`` classes when the source names them. Objects are
    `object_fields`' job."""
    blobs: dict[str, Blob] = {}
    label, fields = None, {}
    for name, feature in wanted.items():
        if isinstance(feature, tuple):
            columns = []
            for part in feature:
                kind, values = features.get(part, ("float", []))
                if kind == "bytes":
                    raise SourceError(where, f"feature {part!r} holds bytes, expected numbers")
                columns.append(values)
            if len({len(c) for c in columns}) > 1:
                raise SourceError(where, f"features {feature} have different lengths {[len(c) for c in columns]}")
            fields[name] = torch.tensor(list(zip(*columns)), dtype=torch.float32).reshape(-1, len(feature))
            continue
        if feature not in features:
            raise SourceError(where, f"no feature {feature!r}; it has {sorted(features)[:12]}")
        kind, values = features[feature]
        if name == "label":
            if kind == "bytes" or len(values) != 1:
                raise SourceError(where, f"label feature {feature!r}: expected one number, got {len(values)} {kind}")
            label = class_label(values[0], f"{where}: {feature}", num_classes)
        elif kind == "bytes":
            if len(values) == 1 and (name in ("image", "video", "audio") or kind_of_bytes(bytes(values[0][:16]))):
                blobs[name] = Blob(f"{where}: {feature}", data=bytes(values[0]))
            else:
                texts = [text_of(v, where, feature) for v in values]
                fields[name] = texts[0] if len(texts) == 1 else texts
        elif len(values) == 1:
            fields[name] = values[0]
        else:
            fields[name] = torch.tensor(values, dtype=torch.int64 if kind == "int64" else torch.float32)
    return blobs, label, fields


# -- objects (the TF Object Detection API's image/object/ features) ---------------------------------
def object_types(features: Mapping[str, str | tuple[str, ...]], box_format: str, collate: str) -> dict[str, FieldType]:
    """The typed fields of a features mapping: the four `BOXES` features (in any order) as boxes,
    every other numeric ``image/object/`` feature one value per object (class ids for a
    ``.../label`` one); ``label`` stays the sample's one class. A mapping the objects cannot
    follow is a ValueError saying why."""
    if collate not in OBJECT_COLLATES:
        raise ValueError(f"collate={collate!r}: expected one of {OBJECT_COLLATES}")
    box_type = boxes(box_format, collate=collate)
    types: dict[str, FieldType] = {}
    for name, feature in features.items():
        parts = feature if isinstance(feature, tuple) else (feature,)
        if name == "label":
            continue
        if isinstance(feature, tuple) and set(parts) & set(BOXES):
            if sorted(parts) != sorted(BOXES):
                raise ValueError(f"features[{name!r}] = {feature}: boxes are the four features {BOXES}")
            types[name] = box_type
        elif all(p.startswith(OBJECT_PREFIX) for p in parts) and not set(parts) & set(OBJECT_TEXTS):
            kind = LABEL if not isinstance(feature, tuple) and feature.endswith("/label") else OTHER
            types[name] = per_object(kind, collate=collate)
    if any(t.kind == box_type.kind for t in types.values()):
        texts = {n: f for n, f in features.items() if f in OBJECT_TEXTS}
        if texts:
            raise ValueError(f"features {texts}: per-object texts cannot follow the boxes (SanitizeBoundingBoxes "
                             "drops rows of numbers only); read 'image/object/class/label' and name the classes "
                             "with classes=")
        if not isinstance(features.get("image"), str):
            raise ValueError("boxes are drawn on an image: map 'image' to its feature (e.g. 'image/encoded')")
    return types


def numbers_of(parsed: Mapping[str, Feature], feature: str, where: str) -> np.ndarray:
    """The values of a numeric feature (int64 or float64, 1-d); a missing feature has none."""
    kind, values = parsed.get(feature, ("float", []))
    if kind == "bytes" and values:
        raise SourceError(where, f"{feature!r} holds bytes; a per-object value is a number", category=BAD_ANNOTATION)
    return np.asarray(values, dtype=np.int64 if kind == "int64" else np.float64)


def normalised_boxes(parsed: Mapping[str, Feature], where: str) -> np.ndarray:
    """(N, 4) float64 xmin, ymin, xmax, ymax in 0..1 (`COORD_TOLERANCE` past an edge allowed):
    a box that is not is a `SourceError` naming the record and the box."""
    columns = [numbers_of(parsed, feature, where) for feature in BOXES]
    if len({len(c) for c in columns}) > 1:
        raise SourceError(where, f"features {BOXES} have different lengths {[len(c) for c in columns]}",
                          category=BAD_ANNOTATION)
    xyxy = np.stack(columns, axis=1).astype(np.float64).reshape(-1, 4)
    t = COORD_TOLERANCE
    problems = (("a coordinate is not a finite number", ~np.isfinite(xyxy).all(axis=1)),
                ("has a negative size (xmax < xmin or ymax < ymin)", (xyxy[:, 2] < xyxy[:, 0]) | (xyxy[:, 3] < xyxy[:, 1])),
                ("lies outside the image (boxes are normalised to 0..1)", ((xyxy < -t) | (xyxy > 1 + t)).any(axis=1)))
    for why, bad in problems:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SourceError(where, f"box {i} {xyxy[i].tolist()} {why}", category=BAD_ANNOTATION)
    return xyxy


def pixel_boxes(normalised: np.ndarray, canvas: tuple[int, int], box_format: str) -> np.ndarray:
    """(N, 4) float32 boxes in ``box_format``, in pixels of a ``canvas`` (height, width), from
    normalised corners (one within `COORD_TOLERANCE` past an edge clamped onto it)."""
    height, width = canvas
    x0, y0, x1, y1 = normalised.T * np.array([[width], [height], [width], [height]])
    return clamped_boxes(x0, y0, x1, y1, width, height, box_format)


def class_ids(parsed: Mapping[str, Feature], feature: str, where: str, num_classes: int | None) -> np.ndarray:
    """int64 (N,) class ids of a per-object label feature: whole numbers from 0 (below
    ``num_classes`` when the classes are named), else a `SourceError` naming the object."""
    values = numbers_of(parsed, feature, where)
    if values.dtype != np.int64:
        whole = np.isfinite(values) & (values == np.floor(values)) & (np.abs(values) < 2.0**63)
        for i in np.flatnonzero(~whole)[:1]:
            class_label(float(values[i]), f"{where}: {feature}[{i}]")  # raises, saying why
        values = values.astype(np.int64)
    bad = np.flatnonzero((values < 0) | (values >= (num_classes if num_classes is not None else 2**63 - 1)))
    if len(bad):
        i = int(bad[0])
        known = (f" to {num_classes - 1} (the {num_classes} classes; a label map numbered from 1 needs a name "
                 "for 0 in classes=)") if num_classes is not None else ""
        raise SourceError(f"{where}: {feature}[{i}]", f"class id {int(values[i])}: class ids are integers from 0{known}",
                          category=BAD_ANNOTATION)
    return values


def image_size(data: bytes, where: str) -> tuple[int, int]:
    """(height, width) of an encoded image, from its header (the frame as stored)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            width, height = im.size
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as err:
        raise SourceError(where, f"cannot read the image header: {err}") from None
    return height, width


def check_declared_size(parsed: Mapping[str, Feature], height: int, width: int, where: str) -> None:
    """``image/height`` and ``image/width``, where the record has them, are the image's."""
    for feature, actual, what in (("image/height", height, "high"), ("image/width", width, "wide")):
        if feature in parsed and parsed[feature][1] != [actual]:
            raise SourceError(where, f"{feature} is {parsed[feature][1][:4]}, but the encoded image is {actual} "
                              f"pixels {what}: the boxes would be scaled to another size", category=BAD_ANNOTATION)


def object_fields(parsed: Mapping[str, Feature], features: Mapping[str, str | tuple[str, ...]],
                  types: Mapping[str, FieldType], canvas: tuple[int, int] | None, where: str,
                  num_classes: int | None) -> dict[str, torch.Tensor]:
    """The typed fields of one record: pixel boxes of the ``canvas`` (height, width), class ids
    and other per-object values, each with one row per object (the same number in each)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in types.items():
        feature = features[name]
        if t.kind == BOX_KIND:
            if canvas is None:
                raise SourceError(where, "boxes without the size of the image they are drawn on")
            out[name] = torch.from_numpy(pixel_boxes(normalised_boxes(parsed, where), canvas, t.format or "xyxy"))
        elif t.kind == LABEL:
            out[name] = torch.from_numpy(class_ids(parsed, feature, where, num_classes))  # type: ignore[arg-type]
        else:
            columns = [numbers_of(parsed, f, where) for f in (feature if isinstance(feature, tuple) else (feature,))]
            if len({len(c) for c in columns}) > 1:
                raise SourceError(where, f"features {feature} have different lengths {[len(c) for c in columns]}",
                                  category=BAD_ANNOTATION)
            value = np.stack(columns, axis=1) if isinstance(feature, tuple) else columns[0]
            out[name] = torch.from_numpy(value if value.dtype == np.int64 else value.astype(np.float32))
    check_object_counts(out, types, features, where)
    return out


def check_object_counts(fields: Mapping[str, torch.Tensor], types: Mapping[str, FieldType],
                        features: Mapping[str, Any], where: str) -> None:
    """Every per-object field of a record holds as many rows as it has objects."""
    counts = {name: int(value.shape[0]) for name, value in fields.items()}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{n} {'boxes' if types[name].kind == BOX_KIND else 'values'} in {name!r} "
                          f"({features[name]})" for name, n in counts.items())
        raise SourceError(where, f"objects disagree: {shown}; every image/object/ feature holds one value per object",
                          category=BAD_ANNOTATION)


def text_of(raw: bytes | memoryview, where: str, field: str) -> str:
    """UTF-8 text, or a `SourceError` naming the record and the field."""
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as err:
        raise SourceError(where, f"{field!r} is not UTF-8 text (byte {err.start}: {bytes(raw)[err.start:err.start + 4]!r})") \
            from None


class TFRecordSource(FileRecords):
    """The ``tf.train.Example`` records of TFRecord files, in file order.

    ``features`` maps a batch field to a feature name (default: the ImageNet convention,
    ``image/encoded`` and ``image/class/label``); a tuple of features stacks into an (n, k)
    tensor, except ``BOXES``: pixel boxes in ``box_format``, typed as boxes, with the other
    ``image/object/`` features one value per object (`object_types`; `DETECTION_FEATURES` is
    the TF Object Detection API's mapping), batched as lists or, with ``collate="pad"``, padded.
    ``index_paths`` gives each file's ``tfrecord2idx`` index (else it is found beside the file
    as ``<file>.idx``, or built). ``classes`` names the labels. ``ref(i)`` reads record i (one
    ``pread``), so a sample's label is known once its record is.
    """

    kind = "tfrecord"

    def __init__(self, paths: str | os.PathLike | Iterable[str | os.PathLike],
                 features: Mapping[str, str | tuple[str, ...]] | None = None,
                 index_paths: Iterable[str | os.PathLike] | None = None, classes: list[str] | None = None,
                 verify_crc: bool = True, box_format: str = "xyxy", collate: str = "list") -> None:
        wanted = dict(IMAGENET_FEATURES if features is None else features)
        self.features = {k: tuple(v) if isinstance(v, list) else v for k, v in wanted.items()}
        self.box_format = box_format
        self.collate_objects = collate  # not `collate`: a source's `collate` maps fields to policies
        self._types = object_types(self.features, box_format, collate)
        self.paths = input_files(paths, ("*.tfrecord", "*.tfrecords", "*-of-*", "*.record"))
        self.index_paths = [str(p) for p in index_paths] if index_paths is not None else None
        if self.index_paths is not None and len(self.index_paths) != len(self.paths):
            raise ValueError(f"{len(self.index_paths)} index paths for {len(self.paths)} TFRecord files")
        self._classes = list(classes) if classes is not None else None
        self.verify_crc = verify_crc
        offsets, sizes = [], []
        for n, path in enumerate(self.paths):
            given = self.index_paths[n] if self.index_paths is not None else None
            o, s, index = load_or_build(path, given, ".idx", read_index, scan_records, write_index)
            check_offsets(o, s, file_size(path), index)
            offsets.append(o)
            sizes.append(s)
        self._offsets, self._sizes = np.concatenate(offsets), np.concatenate(sizes)
        self._number_records([len(o) for o in offsets])

    def field_types(self) -> dict[str, FieldType]:
        """The boxes and per-object fields (`object_types`); {} when the features name none."""
        return dict(self._types)

    def ref(self, index: int) -> SampleRef:
        path, number = self.locate(index)
        payload = read_record(path, int(self._offsets[index]), int(self._sizes[index]), number, self.verify_crc)
        where = record_name(path, number)
        try:
            features = parse_example(payload)
        except ValueError as err:
            raise SourceError(where, f"not a tf.train.Example: {err}") from None
        untyped = {k: v for k, v in self.features.items() if k not in self._types}
        blobs, label, fields = example_fields(features, untyped, where,
                                              None if self._classes is None else len(self._classes))
        meta: SampleMeta = {}
        if any(t.kind == BOX_KIND for t in self._types.values()):
            if "image" not in blobs:
                raise SourceError(where, f"the image the boxes are drawn on: {self.features['image']!r} holds no "
                                  "encoded image")
            height, width = image_size(blobs["image"].read(), where)
            check_declared_size(features, height, width, where)
            meta = {"width": width, "height": height}
        if self._types:
            canvas = (meta["height"], meta["width"]) if meta else None
            fields.update(object_fields(features, self.features, self._types, canvas, where,
                                        None if self._classes is None else len(self._classes)))
        return SampleRef(index, f"{os.path.basename(path)}:{number}", blobs, label, meta, fields)

    def meta(self, index: int) -> SampleMeta:
        return {}

    def prefetch(self, indices: Iterable[int]) -> None:
        for index in indices:
            advise(self.paths[int(self._file[index])], int(self._offsets[index]), int(self._sizes[index]))

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind, "paths": list(self.paths),
                                  "features": {k: list(v) if isinstance(v, tuple) else v
                                               for k, v in self.features.items()}}
        if self.index_paths is not None:
            config["index_paths"] = list(self.index_paths)
        if self._classes is not None:
            config["classes"] = list(self._classes)
        for name, value, default in (("verify_crc", self.verify_crc, True), ("box_format", self.box_format, "xyxy"),
                                     ("collate", self.collate_objects, "list")):
            if value != default:
                config[name] = value
        return config


def tfrecord(paths: str | os.PathLike | Iterable[str | os.PathLike],
             features: Mapping[str, str | tuple[str, ...]] | None = None, *,
             index_paths: Iterable[str | os.PathLike] | None = None, classes: list[str] | None = None,
             verify_crc: bool = True, box_format: str = "xyxy", collate: str = "list") -> TFRecordSource:
    """TFRecord files (a path, a folder, a glob or a list) of ``tf.train.Example`` records; with
    ``BOXES`` among the features, pixel boxes in ``box_format`` ("xyxy", "xywh", "cxcywh") and
    per-object fields batched as lists (``collate="pad"``: padded, with ``<field>_lengths``)."""
    return TFRecordSource(paths, features, index_paths, classes, verify_crc, box_format, collate)
