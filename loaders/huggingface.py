"""`huggingface(path, split=..., columns=...)`: a dataset saved by Hugging Face ``datasets``.

Three layouts, all read from local files (nothing is downloaded):

- ``save_to_disk`` (``state.json`` and ``data-*.arrow``, or a ``DatasetDict`` with one folder
  per split): Arrow IPC files, uncompressed. Opening maps each file and records where every
  media value and string lies in it, so a sample's bytes are one ``os.pread`` of a byte
  range: true random access, no table in memory;
- Parquet files (``to_parquet``, a Hub snapshot: ``data/train-00000-of-00002.parquet``, or a
  folder per split): read by `ParquetSource`, row-group aware;
- a ``datasets.Dataset`` object backed by its cache files.

Columns and ``ClassLabel`` names come from the dataset's features (see `mediapipe.loaders.parquet`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.errors import SourceError
from mediapipe.loaders.parquet import (
    DEFAULT_CACHE_BYTES,
    META_KEYS,
    Column,
    ParquetSource,
    _pyarrow,
    class_names,
    external_path,
    hf_features,
    plan_columns,
    text_value,
)
from mediapipe.loaders.records import FileRecords, RangeBlob, advise, file_size, pread_exact
from mediapipe.sample import Blob, SampleMeta, SampleRef


def _value_ranges(array: Any, base: int, total: int, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(file offsets, sizes, valid) of each value of a binary or string Arrow array whose
    buffers lie in a memory map starting at address ``base`` (``total`` bytes)."""
    pa = _pyarrow()
    large = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    _, offsets_buf, data_buf = array.buffers()[:3]
    n = len(array)
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if large else np.int32, count=n + 1 + array.offset,
                            )[array.offset:].astype(np.int64)
    valid = ~np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if data_buf is None or data_buf.size == 0:  # no bytes at all (every value empty or null)
        start = 0
    else:
        start = data_buf.address - base
        if not 0 <= start <= total or start + data_buf.size > total:
            raise SourceError(where, "its buffers are not in the file (a compressed Arrow file?): save the dataset "
                              "without compression")
    sizes = np.diff(offsets)
    if (sizes < 0).any() or (data_buf is not None and offsets[-1] > data_buf.size):
        raise SourceError(where, "corrupt Arrow offsets")
    return start + offsets[:-1], sizes, valid


class ArrowSource(FileRecords):
    """The rows of a ``save_to_disk`` dataset's Arrow files: media and text as byte ranges.

    ``columns`` maps batch fields to columns (default: every readable column); ``media_root``
    is where values holding only a path are looked up (must contain them).
    """

    kind = "hf_arrow"

    def __init__(self, paths: Iterable[str | os.PathLike], columns: Mapping[str, str] | None = None,
                 features: Mapping[str, Any] | None = None, media_root: str | os.PathLike | None = None) -> None:
        pa = _pyarrow()
        self.paths = [os.path.realpath(p) for p in paths]  # byte ranges are read O_NOFOLLOW
        if not self.paths:
            raise SourceError("huggingface", "no Arrow files")
        self.column_map = dict(columns) if columns is not None else None
        self.media_root = str(media_root) if media_root is not None else None
        self.features = dict(features or {})
        self.columns: list[Column] = []
        media: dict[str, list] = {}
        numbers: dict[str, list] = {}
        counts = []
        for path in self.paths:
            total = file_size(path)
            try:
                whole = pa.memory_map(path).read_buffer()
                reader = pa.ipc.open_stream(whole)
                schema = reader.schema
                batches = list(reader)
            except Exception as err:  # noqa: BLE001  truncated, not Arrow, corrupt
                raise SourceError(path, f"not a readable Arrow stream: {type(err).__name__}: {err}") from None
            self.features = self.features or hf_features(schema.metadata)
            cols = plan_columns(schema, self.column_map, path)
            if not self.columns:
                self.columns = cols
            elif cols != self.columns:
                raise SourceError(path, f"its columns {cols} differ from the first file's {self.columns}")
            rows = sum(b.num_rows for b in batches)
            counts.append(rows)
            for c in cols:
                if c.kind == "number":
                    values = [b.column(c.name) for b in batches]
                    arr = pa.chunked_array(values, type=schema.field(c.name).type)
                    numbers.setdefault(c.field, []).append(
                        np.asarray(arr.to_pylist(), dtype=object) if arr.null_count else arr.to_numpy())
                    continue
                parts = {"bytes": [], "path": []}
                for b in batches:
                    col = b.column(c.name)
                    if pa.types.is_struct(col.type):
                        kids = {col.type.field(i).name: child for i, child in enumerate(col.flatten())}
                        parts["bytes"].append(_value_ranges(kids["bytes"], whole.address, total, path))
                        if "path" in kids:
                            parts["path"].append(_value_ranges(kids["path"], whole.address, total, path))
                    else:
                        parts["bytes"].append(_value_ranges(col, whole.address, total, path))
                entry = media.setdefault(c.field, {"bytes": [], "path": []})
                for side in ("bytes", "path"):
                    if parts[side]:
                        entry[side].append(tuple(np.concatenate(x) for x in zip(*parts[side])))
                    elif side == "path":
                        entry[side].append((np.zeros(rows, np.int64), np.zeros(rows, np.int64),
                                            np.zeros(rows, bool)))
        if sum(counts) == 0:
            raise SourceError(self.paths[0], "no rows")
        self._number_records(counts)
        self._ranges = {field: {side: tuple(np.concatenate(x) for x in zip(*entry[side])) for side in entry}
                        for field, entry in media.items()}
        self._numbers = {k: np.concatenate(v) for k, v in numbers.items()}
        self._kinds = {c.field: c for c in self.columns}
        label = self._kinds.get("label")
        self._classes = class_names(self.features, label.name) if label is not None else None

    def _numbers_of(self, index: int) -> dict[str, Any]:
        out = {}
        for field, values in self._numbers.items():
            v = values[index]
            if v is not None:
                out[field] = v.item() if hasattr(v, "item") else v
        return out

    def ref(self, index: int) -> SampleRef:
        path, row = self.locate(index)
        where = f"{path}: row {row}"
        fields: dict[str, Any] = self._numbers_of(index)
        label = fields.pop("label", None)
        blobs: dict[str, Blob] = {}
        for field, sides in self._ranges.items():
            column = self._kinds[field]
            offsets, sizes, valid = sides["bytes"]
            name = f"{where}: {column.name}"
            if column.kind == "text":
                if valid[index]:
                    raw = pread_exact(path, int(offsets[index]), int(sizes[index]), name)
                    fields[field] = text_value(raw, where, column.name)
                continue
            if valid[index]:
                blobs[field] = RangeBlob(name, path, int(offsets[index]), int(sizes[index]))
                continue
            p_off, p_size, p_valid = sides["path"]
            if not p_valid[index] or not p_size[index]:
                raise SourceError(name, "the value has neither bytes nor a path")
            named = text_value(pread_exact(path, int(p_off[index]), int(p_size[index]), name), where, column.name)
            blobs[field] = Blob(named, path=external_path(named, self.media_root, name))
        return SampleRef(index, f"{os.path.basename(path)}:{row}", blobs, None if label is None else int(label),
                         self.meta(index), fields)

    def meta(self, index: int) -> SampleMeta:
        numbers = self._numbers_of(index)
        return {k: numbers[k] for k in META_KEYS if k in numbers}

    def prefetch(self, indices: Iterable[int]) -> None:
        for index in indices:
            path = self.paths[int(self._file[index])]
            for sides in self._ranges.values():
                offsets, sizes, valid = sides["bytes"]
                if valid[index]:
                    advise(path, int(offsets[index]), int(sizes[index]))

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind, "paths": list(self.paths)}
        if self.column_map is not None:
            config["columns"] = dict(self.column_map)
        if self.features:
            config["features"] = self.features
        if self.media_root is not None:
            config["media_root"] = self.media_root
        return config


def _split_dir(root: Path, split: str | None) -> Path:
    """The folder of one split of a ``DatasetDict`` saved to disk."""
    splits = json.loads((root / "dataset_dict.json").read_text()).get("splits", [])
    if split is None:
        if len(splits) != 1:
            raise SourceError(str(root), f"a DatasetDict with splits {splits}: pass split=")
        split = splits[0]
    if split not in splits:
        raise SourceError(str(root), f"no split {split!r}; it has {splits}")
    return root / split


def _saved(root: Path, columns: Mapping[str, str] | None, media_root: str | os.PathLike | None) -> ArrowSource:
    state = json.loads((root / "state.json").read_text())
    files = []
    for entry in state.get("_data_files", []):
        name = str(entry.get("filename", ""))
        path = (root / name).resolve()
        if not name or path.parent != root.resolve():
            raise SourceError(str(root / "state.json"), f"data file {name!r} is not a file of this folder")
        files.append(path)
    features = {}
    info = root / "dataset_info.json"
    if info.exists():
        features = json.loads(info.read_text()).get("features") or {}
    return ArrowSource(files, columns, features, media_root)


def _parquet_files(root: Path, split: str | None) -> list[str]:
    files = sorted(root.rglob("*.parquet"))
    if split is not None:
        files = [f for f in files if f.name.startswith(f"{split}-") or f.name.startswith(f"{split}.")
                 or split in f.relative_to(root).parts[:-1]]
        if not files:
            raise SourceError(str(root), f"no Parquet files of split {split!r}")
    return [str(f) for f in files]


def huggingface(name_or_path: Any, split: str | None = None, columns: Mapping[str, str] | None = None, *,
                media_root: str | os.PathLike | None = None,
                cache_bytes: int = DEFAULT_CACHE_BYTES) -> ArrowSource | ParquetSource:
    """A Hugging Face dataset on this machine: a ``save_to_disk`` folder, Parquet files (one
    file, or a folder such as a Hub snapshot, its files of ``split``), or a ``datasets.Dataset``
    backed by Arrow files. ``columns`` maps batch fields to columns."""
    if hasattr(name_or_path, "cache_files") and hasattr(name_or_path, "features"):
        dataset = name_or_path
        if getattr(dataset, "_indices", None) is not None:
            raise SourceError(str(dataset), "the dataset has an indices mapping (after select, shuffle or "
                              "filter): call .flatten_indices() first")
        files = [f["filename"] for f in dataset.cache_files]
        if not files:
            raise SourceError(str(dataset), "an in-memory dataset has no files: save_to_disk() it first")
        return ArrowSource(files, columns, dataset.features.to_dict(), media_root)
    root = Path(name_or_path)
    if not root.exists():
        raise SourceError(str(name_or_path), "no such dataset on this machine (nothing is downloaded at run time): "
                          "save it with datasets' save_to_disk, or pass the folder of its Parquet files")
    if root.is_file():
        return ParquetSource([str(root)], columns, media_root, cache_bytes)
    if (root / "dataset_dict.json").exists():
        root = _split_dir(root, split)
    if (root / "state.json").exists():
        return _saved(root, columns, media_root)
    files = _parquet_files(root, split)
    if not files:
        raise SourceError(str(root), "neither a save_to_disk folder (state.json) nor a folder of Parquet files")
    return ParquetSource(files, columns, media_root, cache_bytes)
