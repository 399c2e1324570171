"""`recordio(path)`: MXNet RecordIO files (``.rec`` + ``.idx``, the ``im2rec`` layout), without MXNet.

A ``.rec`` file is a run of records, each ``uint32 magic 0xced7230a``, ``uint32 lrecord``
(the top 3 bits a continuation flag, the low 29 the length) and the payload padded to 4
bytes; dmlc's writer splits a payload where the magic number appears at an aligned
position, and the reader joins the parts with the magic in between. The ``.idx`` file has
a "key<TAB>offset" line per record. An ``im2rec`` payload is an ``IRHeader`` (``uint32
flag``, ``float32 label``, ``uint64 id``, ``uint64 id2``), then ``flag`` float32 labels
when flag > 0, then the image's bytes.

A record is read as the bytes from its offset to the next record's (or the end of the
file), so every length field is checked against bytes already read.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mediapipe.errors import SourceError
from mediapipe.loaders.sources.labels import class_label
from mediapipe.loaders.sources.records import (
    FileRecords,
    advise,
    file_size,
    load_or_build,
    pread_exact,
    read_int_table,
    record_name,
)
from mediapipe.sample import Blob, SampleMeta, SampleRef

MAGIC = 0xCED7230A
IR_HEADER = struct.Struct("<IfQQ")  # flag, label, id, id2
LENGTH_MASK = (1 << 29) - 1


def scan_records(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, keys) of the records of a ``.rec`` file (a multi-part record counts once),
    keys numbered from 0; reads only the 8-byte part headers."""
    total = file_size(path)
    offsets, pos, cont = [], 0, False
    with open(path, "rb") as f:
        while pos < total:
            where = record_name(path, len(offsets))
            f.seek(pos)
            head = f.read(8)
            if len(head) < 8:
                raise SourceError(where, f"truncated: {len(head)} header bytes at offset {pos}")
            magic, lrec = struct.unpack("<II", head)
            if magic != MAGIC:
                raise SourceError(where, f"bad magic {magic:#010x} at offset {pos}: not a RecordIO file, or corrupt")
            flag, length = lrec >> 29, lrec & LENGTH_MASK
            if 8 + length > total - pos:
                raise SourceError(where, f"truncated: its length field says {length} bytes at offset {pos}, "
                                  f"only {total - pos - 8} remain")
            if not cont:
                offsets.append(pos)
            cont = flag in (1, 2)
            pos += 8 + ((length + 3) & ~3)
    if not offsets:
        raise SourceError(path, "empty RecordIO file")
    return np.asarray(offsets, dtype=np.int64), np.arange(len(offsets), dtype=np.int64)


def read_idx(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """An MXNet ``.idx``: "key<TAB>offset" per line; returns (offsets, keys)."""
    table = read_int_table(path, 2)
    return table[:, 1].copy(), table[:, 0].copy()


def write_idx(path: Path, offsets: np.ndarray, keys: np.ndarray) -> bytes:
    return "".join(f"{k}\t{o}\n" for k, o in zip(keys.tolist(), offsets.tolist())).encode()


def read_parts(path: str, start: int, end: int, where: str) -> bytes:
    """The payload of the record at ``start`` (its parts joined); nothing past ``end`` (the next
    record's offset, or the end of the file) is read, and each length field is checked
    against it before its bytes are."""
    out, pos = [], start
    while True:
        if end - pos < 8:
            raise SourceError(where, f"truncated: no record header at offset {pos}")
        magic, lrec = struct.unpack("<II", pread_exact(path, pos, 8, where))
        if magic != MAGIC:
            raise SourceError(where, f"bad magic {magic:#010x} at offset {pos}")
        flag, length = lrec >> 29, lrec & LENGTH_MASK
        if length > end - pos - 8:
            raise SourceError(where, f"wrong length: its length field says {length} bytes at offset {pos}, "
                              f"{end - pos - 8} remain before the next record")
        if flag > 3 or (flag in (2, 3)) != bool(out):
            raise SourceError(where, f"continuation flag {flag} out of order at offset {pos}")
        out.append(pread_exact(path, pos + 8, length, where))
        pos += 8 + ((length + 3) & ~3)
        if flag in (0, 3):
            return struct.pack("<I", MAGIC).join(out)


def unpack_im2rec(payload: bytes, where: str) -> tuple[float | list[float], int, bytes]:
    """(label or labels, id, image bytes) of an ``im2rec`` payload."""
    if len(payload) < IR_HEADER.size:
        raise SourceError(where, f"record of {len(payload)} bytes is shorter than its {IR_HEADER.size}-byte header")
    flag, label, ident, _ = IR_HEADER.unpack_from(payload)
    start = IR_HEADER.size
    if flag > 0:
        if flag * 4 > len(payload) - start:
            raise SourceError(where, f"header says {flag} labels, the record holds {len(payload) - start} more bytes")
        labels = np.frombuffer(payload, dtype="<f4", count=flag, offset=start).tolist()
        return labels, ident, payload[start + 4 * flag:]
    return label, ident, payload[start:]


class RecordIOSource(FileRecords):
    """The images of MXNet RecordIO files in the ``im2rec`` layout, in ``.idx`` order.

    Each ``.rec`` needs its ``.idx`` (``<name>.idx`` beside it; built by a scan and cached when
    missing). A scalar label becomes the sample's integer label; a label array (``flag > 0``)
    becomes the float tensor field ``labels``. ``classes`` names the labels.
    """

    kind = "recordio"

    def __init__(self, paths: str | os.PathLike | Iterable[str | os.PathLike],
                 index_paths: Iterable[str | os.PathLike] | None = None, classes: list[str] | None = None) -> None:
        from mediapipe.loaders.sources.tfrecord import input_files

        self.paths = input_files(paths, ("*.rec",))
        self.index_paths = [str(p) for p in index_paths] if index_paths is not None else None
        if self.index_paths is not None and len(self.index_paths) != len(self.paths):
            raise ValueError(f"{len(self.index_paths)} index paths for {len(self.paths)} RecordIO files")
        self._classes = list(classes) if classes is not None else None
        starts, ends, keys = [], [], []
        for n, path in enumerate(self.paths):
            given = self.index_paths[n] if self.index_paths is not None else None
            if given is None and Path(path).with_suffix(".idx").exists():
                given = str(Path(path).with_suffix(".idx"))  # im2rec's name: train.rec, train.idx
            offsets, k, index = load_or_build(path, given, ".idx", read_idx, scan_records, write_idx)
            total = file_size(path)
            bad = np.flatnonzero((offsets < 0) | (offsets + 8 > total))
            if len(bad):
                i = int(bad[0])
                raise SourceError(f"{index}:{i + 1}", f"offset {offsets[i]} is outside the {total}-byte file "
                                  f"{path}: the index is stale or corrupt")
            if len(np.unique(offsets)) != len(offsets):
                raise SourceError(index, "the index lists one offset twice")
            order = np.sort(offsets)  # a record ends where the next one starts
            nxt = np.append(order[1:], total)[np.searchsorted(order, offsets)]
            starts.append(offsets)
            ends.append(nxt)
            keys.append(k)
        self._starts, self._ends = np.concatenate(starts), np.concatenate(ends)
        self._keys = np.concatenate(keys)
        self._number_records([len(s) for s in starts])

    def read_payload(self, index: int) -> bytes:
        path, number = self.locate(index)
        return read_parts(path, int(self._starts[index]), int(self._ends[index]), record_name(path, number))

    def ref(self, index: int) -> SampleRef:
        path, number = self.locate(index)
        where = record_name(path, number)
        label, ident, image = unpack_im2rec(self.read_payload(index), where)
        fields: dict[str, Any] = {"id": ident}
        if isinstance(label, list):
            fields["labels"] = torch.tensor(label, dtype=torch.float32)
            label_value = None
        else:
            label_value = class_label(label, where, None if self._classes is None else len(self._classes))
        key = f"{os.path.basename(path)}:{int(self._keys[index])}"
        return SampleRef(index, key, {"image": Blob(f"{where}: image", data=image)}, label_value, {}, fields)

    def meta(self, index: int) -> SampleMeta:
        return {}

    def prefetch(self, indices: Iterable[int]) -> None:
        for index in indices:
            start = int(self._starts[index])
            advise(self.paths[int(self._file[index])], start, int(self._ends[index]) - start)

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind, "paths": list(self.paths)}
        if self.index_paths is not None:
            config["index_paths"] = list(self.index_paths)
        if self._classes is not None:
            config["classes"] = list(self._classes)
        return config


def recordio(paths: str | os.PathLike | Iterable[str | os.PathLike], *,
             index_paths: Iterable[str | os.PathLike] | None = None,
             classes: list[str] | None = None) -> RecordIOSource:
    """MXNet RecordIO ``.rec`` files (with their ``.idx``) of ``im2rec`` images and labels."""
    return RecordIOSource(paths, index_paths, classes)
