"""`tfrecord(paths)`: TFRecord files of ``tf.train.Example`` records, without TensorFlow.

Random access comes from an index of (offset, size) per record, the format of DALI's
``tfrecord2idx`` (one "offset size" line per record). A file without one is scanned once on
first open (each record's length field and its CRC, never its payload) and the index is
cached beside it, or in ``~/.cache/mediapipe/indices`` when that folder is read-only.

Reading record i checks its framing: the length field must equal the indexed size, and the
masked CRC-32C of the length and of the payload must match (the ``crc32c`` package computes
them; ``pip install mediapipe-loader[tfrecord]``).
"""

from __future__ import annotations

import glob
import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mediapipe.errors import SourceError
from mediapipe.loaders.protobuf import parse_example
from mediapipe.loaders.records import (
    FileRecords,
    advise,
    check_offsets,
    file_size,
    load_or_build,
    pread_exact,
    read_int_table,
    record_name,
)
from mediapipe.sample import Blob, SampleMeta, SampleRef, kind_of_bytes

IMAGENET_FEATURES: dict[str, str | tuple[str, ...]] = {"image": "image/encoded", "label": "image/class/label"}
"""The ImageNet convention (TensorFlow's build_imagenet_data, DALI's examples)."""
BOXES = ("image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax", "image/object/bbox/ymax")
"""The ImageNet box features: ``features={"boxes": BOXES, ...}`` gives (n, 4) xyxy boxes."""
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
                raise SourceError(where, f"truncated: its length field says {length} bytes at offset {pos}, "
                                  f"only {total - pos - HEADER} remain in the file")
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
        raise SourceError(where, f"wrong length: its length field says {length} bytes, the index {size - 16} "
                          f"(offset {offset}); the index is stale or the file corrupt")
    view = memoryview(raw)
    if verify:
        if masked_crc(view[:8]) != crc:
            raise SourceError(where, f"length CRC mismatch at offset {offset}")
        (data_crc,) = struct.unpack_from("<I", raw, size - FOOTER)
        if masked_crc(view[HEADER:size - FOOTER]) != data_crc:
            raise SourceError(where, f"data CRC mismatch at offset {offset}: the record is corrupt")
    return view[HEADER:size - FOOTER]


def input_files(paths: str | os.PathLike | Iterable[str | os.PathLike], patterns: tuple[str, ...]) -> list[str]:
    """The files of ``paths``: each a file, a glob, or a folder (its files matching ``patterns``,
    in sub-folders too), as real paths."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out: list[str] = []
    for item in items:
        text = str(item)
        if Path(text).is_dir():
            found = sorted({str(f) for pattern in patterns for f in Path(text).rglob(pattern) if f.is_file()})
        elif any(ch in text for ch in "*?["):
            found = sorted(f for f in glob.glob(text) if os.path.isfile(f))
        else:
            found = [text]
        if not found:
            raise SourceError(text, f"no files matching {' or '.join(patterns)}")
        out += found
    if not out:
        raise SourceError(str(paths), "no files given")
    return [os.path.realpath(p) for p in out]  # read through the real file (record files are opened O_NOFOLLOW)


def example_fields(features: Mapping[str, Any], wanted: Mapping[str, str | tuple[str, ...]], where: str,
                   ) -> tuple[dict[str, Blob], int | None, dict[str, Any]]:
    """(blobs, label, fields) of one parsed Example: each wanted name from its feature. Bytes
    holding media become blobs; other bytes are UTF-8 text; one number is a number, more
    are a 1-d tensor; a tuple of features stacks into an (n, k) float tensor (boxes)."""
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
            label = int(values[0])
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
    ``image/encoded`` and ``image/class/label``); a tuple of features (``BOXES``) stacks
    into an (n, k) tensor. ``index_paths`` gives each file's ``tfrecord2idx`` index (else it
    is found beside the file as ``<file>.idx``, or built). ``classes`` names the labels.
    ``ref(i)`` reads record i (one ``pread``), so a sample's label is known once its record is.
    """

    kind = "tfrecord"

    def __init__(self, paths: str | os.PathLike | Iterable[str | os.PathLike],
                 features: Mapping[str, str | tuple[str, ...]] | None = None,
                 index_paths: Iterable[str | os.PathLike] | None = None, classes: list[str] | None = None,
                 verify_crc: bool = True) -> None:
        self.paths = input_files(paths, ("*.tfrecord", "*.tfrecords", "*-of-*", "*.record"))
        wanted = dict(IMAGENET_FEATURES if features is None else features)
        self.features = {k: tuple(v) if isinstance(v, list) else v for k, v in wanted.items()}
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

    def ref(self, index: int) -> SampleRef:
        path, number = self.locate(index)
        payload = read_record(path, int(self._offsets[index]), int(self._sizes[index]), number, self.verify_crc)
        where = record_name(path, number)
        try:
            features = parse_example(payload)
        except ValueError as err:
            raise SourceError(where, f"not a tf.train.Example: {err}") from None
        blobs, label, fields = example_fields(features, self.features, where)
        return SampleRef(index, f"{os.path.basename(path)}:{number}", blobs, label, {}, fields)

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
        if not self.verify_crc:
            config["verify_crc"] = False
        return config


def tfrecord(paths: str | os.PathLike | Iterable[str | os.PathLike],
             features: Mapping[str, str | tuple[str, ...]] | None = None, *,
             index_paths: Iterable[str | os.PathLike] | None = None, classes: list[str] | None = None,
             verify_crc: bool = True) -> TFRecordSource:
    """TFRecord files (a path, a folder, a glob or a list) of ``tf.train.Example`` records."""
    return TFRecordSource(paths, features, index_paths, classes, verify_crc)
