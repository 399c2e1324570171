"""`huggingface(path, split=..., columns=...)`: a dataset saved by Hugging Face ``datasets``.

Three layouts, all read from local files (nothing is downloaded):

- ``save_to_disk`` (``state.json`` and ``data-*.arrow``, or a ``DatasetDict`` with one folder
  per split): Arrow IPC files, uncompressed. Opening maps each file and records where every
  media value and string lies in it, so a sample's bytes are one ``os.pread`` of a byte
  range: true random access, no table in memory;
- Parquet files (``to_parquet``, a Hub snapshot: ``data/train-00000-of-00002.parquet``, or a
  folder per split): read by `ParquetSource`, row-group aware; the files of several splits
  are never merged (``split=`` picks one);
- a ``datasets.Dataset`` object backed by its cache files, read as ``dataset[i]`` gives it:
  the file rows its slices and indices mapping (select, shard, filter, shuffle, sort) keep,
  and its columns under their current names. What cannot be mapped onto its files (a column
  held in memory, a cast or flatten the files do not hold) is refused by name.

Columns and ``ClassLabel`` names come from the dataset's features (see `mediapipe.loaders.sources.parquet`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as default
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.errors import SourceError
from mediapipe.loaders.sources.parquet import DEFAULT_CACHE_BYTES, ParquetSource
from mediapipe.loaders.sources.parquet_columns import (
    Column,
    _pyarrow,
    class_names,
    column_kind,
    external_path,
    hf_features,
    known_meta,
    plan_columns,
    row_numbers,
    text_value,
)
from mediapipe.loaders.sources.parquet_splits import parquet_splits, several_splits
from mediapipe.loaders.sources.records import FileRecords, RangeBlob, advise, file_size, pread_exact
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
    is where values holding only a path are looked up (must contain them). ``rows`` (row
    numbers across the files, or ``[start, stop)`` runs of them) keeps only those rows, in
    that order: a ``datasets.Dataset`` that is a view of its cache files.
    """

    kind = "hf_arrow"

    def __init__(self, paths: Iterable[str | os.PathLike], columns: Mapping[str, str] | None = None,
                 features: Mapping[str, Any] | None = None, media_root: str | os.PathLike | None = None,
                 rows: np.ndarray | list[list[int]] | None = None) -> None:
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
            count = sum(b.num_rows for b in batches)
            counts.append(count)
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
                        entry[side].append((np.zeros(count, np.int64), np.zeros(count, np.int64),
                                            np.zeros(count, bool)))
        if sum(counts) == 0:
            raise SourceError(self.paths[0], "no rows")
        self._number_records(counts)
        self._ranges = {field: {side: tuple(np.concatenate(x) for x in zip(*entry[side])) for side in entry}
                        for field, entry in media.items()}
        self._numbers = {k: np.concatenate(v) for k, v in numbers.items()}
        self._row = np.arange(len(self._file)) - self._first[self._file]
        self._rows = None if rows is None else rows_of(rows)
        if self._rows is not None:
            self._view(self._rows)
        self._kinds = {c.field: c for c in self.columns}
        label = self._kinds.get("label")
        self._classes = class_names(self.features, label.name) if label is not None else None

    def _view(self, rows: np.ndarray) -> None:
        """Keep only ``rows`` (numbers across the files, in the order given) as the samples."""
        if len(rows) == 0:
            raise SourceError(self.paths[0], "no rows")
        if rows.min() < 0 or rows.max() >= len(self._file):
            raise SourceError(self.paths[0], f"rows= names rows from {int(rows.min())} to {int(rows.max())}; its "
                                             f"files hold rows 0 to {len(self._file) - 1}")
        self._ranges = {field: {side: tuple(a[rows] for a in arrays) for side, arrays in entry.items()}
                        for field, entry in self._ranges.items()}
        self._numbers = {k: v[rows] for k, v in self._numbers.items()}
        self._file = self._file[rows]
        self._row = rows - self._first[self._file]

    def locate(self, index: int) -> tuple[str, int]:
        """(file, row in it) of sample ``index``."""
        return self.paths[int(self._file[index])], int(self._row[index])

    def ref(self, index: int) -> SampleRef:
        path, row = self.locate(index)
        where = f"{path}: row {row}"
        label, fields = row_numbers(self._numbers, self.columns, index, where, self._classes)
        blobs: dict[str, Blob] = {}
        for field, sides in self._ranges.items():
            column = self._kinds[field]
            offsets, sizes, valid = sides["bytes"]
            name = f"{where}: {column.name}"
            if column.kind == "text":
                fields[field] = None
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
        return SampleRef(index, f"{os.path.basename(path)}:{row}", blobs, label, self.meta(index), fields)

    def meta(self, index: int) -> SampleMeta:
        return known_meta(self._numbers, index)

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
        if self._rows is not None:  # [start, stop) runs, or the row numbers where runs would be longer
            runs = row_runs(self._rows)
            config["rows"] = runs if 2 * len(runs) <= len(self._rows) else self._rows.tolist()
        return config


def row_runs(rows: np.ndarray) -> list[list[int]]:
    """``rows`` as ``[start, stop)`` runs of consecutive row numbers (a view's rows in a config)."""
    if len(rows) == 0:
        return []
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts, ends = rows[np.r_[0, breaks]], rows[np.r_[breaks - 1, len(rows) - 1]] + 1
    return [[int(a), int(b)] for a, b in zip(starts, ends)]


def rows_of(rows: np.ndarray | list[list[int]]) -> np.ndarray:
    """Row numbers from an array of them or from ``[start, stop)`` runs."""
    array = np.asarray(rows, dtype=np.int64)
    if array.ndim == 1:
        return array
    if array.ndim != 2 or array.shape[1] != 2:
        raise ValueError(f"rows: expected row numbers or [start, stop) runs, got an array of shape {array.shape}")
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in array])


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
    """The Parquet files below ``root`` of ``split``; without one, every file, unless their
    names or folders name several splits (a Hub snapshot), which are not merged."""
    files = sorted(root.rglob("*.parquet"))
    splits = parquet_splits(root, files)
    if split is None:
        if len(splits) > 1:
            raise SourceError(str(root), several_splits(root, splits))
        return [str(f) for f in files]
    if split not in splits:
        found = f"it has {sorted(splits)}" if splits else "no file or folder of it is named by a split"
        raise SourceError(str(root), f"no split {split!r}: {found}")
    return [str(f) for f in splits[split]]


# -- a datasets.Dataset: the rows and columns of its cache files it holds ----------------------
REPLAYS_KEPT = ("replace_schema_metadata", "combine_chunks", "cast")  # a cast is checked on the types
FLATTEN_HINT = ("call .flatten_indices() first (it writes the dataset as it is to a new cache file), or "
                "save_to_disk() it and open that folder")


@dataclass
class _CacheTable:
    """One table of a dataset as it lies in its cache file (``path`` None: held in memory): the
    file's rows it holds, in order, the file column of each of its columns, the file's row
    count, and the columns whose type it changed (a cast the file does not hold)."""

    path: str | None
    rows: np.ndarray
    columns: dict[str, str]
    file_rows: int = 0
    cast: dict[str, str] = default(default_factory=dict)


def _arguments(args: tuple, kwargs: dict, names: tuple[str, ...]) -> dict[str, Any]:
    return {**dict(zip(names, args)), **kwargs}


def _replay_columns(op: str, args: tuple, kwargs: dict, columns: dict[str, str]) -> dict[str, str]:
    """The dataset-to-file column names after one column operation a table records."""
    order = list(columns)
    if op == "select":
        wanted = _arguments(args, kwargs, ("columns",))["columns"]
        names = [order[c] if isinstance(c, (int, np.integer)) else c for c in wanted]
        return {n: columns[n] for n in names}
    if op in ("drop", "drop_columns"):
        dropped = _arguments(args, kwargs, ("columns",))["columns"]
        dropped = {dropped} if isinstance(dropped, str) else set(dropped)
        return {n: f for n, f in columns.items() if n not in dropped}
    if op == "remove_column":
        gone = order[int(_arguments(args, kwargs, ("i",))["i"])]
        return {n: f for n, f in columns.items() if n != gone}
    names = _arguments(args, kwargs, ("names",))["names"]  # rename_columns: a list, or old -> new
    new = [names.get(n, n) for n in order] if isinstance(names, Mapping) else list(names)
    return {n: columns[old] for old, n in zip(order, new)}


def _cache_table(table: Any, where: str) -> _CacheTable:
    """Where a table of a dataset's ``_data`` lies in its cache file, from the operations it
    records (``replays``); an operation that is not a row slice or a column selection, rename
    or cast is refused."""
    path = getattr(table, "path", None)
    if path is None or not hasattr(table, "replays"):  # an InMemoryTable
        return _CacheTable(None, np.arange(table.num_rows, dtype=np.int64), {n: n for n in table.column_names})
    pa = _pyarrow()
    try:
        stored = pa.ipc.open_stream(pa.memory_map(path)).read_all()
    except Exception as err:  # noqa: BLE001  gone, truncated, not Arrow
        raise SourceError(path, f"not a readable Arrow stream: {type(err).__name__}: {err}") from None
    rows = np.arange(stored.num_rows, dtype=np.int64)
    columns = {n: n for n in stored.column_names}
    for op, args, kwargs in table.replays or []:
        if op == "slice":
            given = _arguments(args, kwargs, ("offset", "length"))
            offset, length = int(given.get("offset") or 0), given.get("length")
            rows = rows[offset:] if length is None else rows[offset:offset + int(length)]
        elif op in ("select", "drop", "drop_columns", "remove_column", "rename_columns"):
            columns = _replay_columns(op, args, kwargs, columns)
        elif op not in REPLAYS_KEPT:
            raise SourceError(where, f"its table was changed by {op!r}, which mediapipe does not map onto the cache "
                                     f"file {path}: {FLATTEN_HINT}")
    if len(rows) != table.num_rows or list(columns) != table.column_names:
        raise SourceError(where, f"its table does not match what its cache file {path} holds after the operations "
                                 f"it records: {FLATTEN_HINT}")
    cast = {n: f"the dataset casts it to {table.schema.field(n).type}; the file holds {stored.schema.field(f).type}"
            for n, f in columns.items() if table.schema.field(n).type != stored.schema.field(f).type}
    return _CacheTable(os.path.realpath(path), rows, columns, stored.num_rows, cast)


def _row_blocks(data: Any, where: str) -> list[list[_CacheTable]]:
    """A dataset's ``_data`` as row blocks (concatenated in order), each a list of tables whose
    columns are side by side."""
    blocks = getattr(data, "blocks", None)  # a ConcatenationTable
    if blocks is None:
        return [[_cache_table(data, where)]]
    return [[_cache_table(t, where) for t in row] for row in blocks]


def _holder(row: list[_CacheTable], wanted: list[str], start: int, where: str) -> _CacheTable:
    """The one cache-file table of a row block (its first row: ``start``) that holds every
    wanted column."""
    if all(t.path is None for t in row):
        raise SourceError(where, f"its rows {start} to {start + len(row[0].rows) - 1} (before any indices mapping) "
                                 "are held in memory, not in a cache file (concatenated with an in-memory dataset): "
                                 f"{FLATTEN_HINT}")
    holders: dict[int, _CacheTable] = {}
    for name in wanted:
        table = next(t for t in row if name in t.columns)
        if table.path is None:
            raise SourceError(where, f"column {name!r} is held in memory (add_column, a map kept in memory, "
                                     f"from_dict), not in a cache file: leave it out with columns=, or {FLATTEN_HINT}")
        if name in table.cast:
            raise SourceError(where, f"column {name!r}: {table.cast[name]}: leave it out with columns=, or "
                                     f"{FLATTEN_HINT}")
        holders[id(table)] = table
    if len(holders) > 1:
        raise SourceError(where, f"columns {sorted(wanted)} lie in different cache files (add_column, "
                                 f"concatenate_datasets(axis=1)): read them with separate sources, or {FLATTEN_HINT}")
    return next(iter(holders.values()))


def _dataset_where(dataset: Any) -> str:
    files = [f["filename"] for f in dataset.cache_files]
    more = f" (and {len(files) - 1} more files)" if len(files) > 1 else ""
    return f"datasets.Dataset of {len(dataset)} rows in {files[0]}{more}" if files else "in-memory datasets.Dataset"


def _dataset_columns(dataset: Any, columns: Mapping[str, str] | None, where: str) -> dict[str, str]:
    """Batch field -> dataset column: ``columns`` (each one the dataset holds), or every column
    ``dataset[i]`` gives whose type is read (its format's columns, when it has some)."""
    names = list(dataset.column_names)
    if columns is not None:
        for name in columns.values():
            if name not in names:
                raise SourceError(where, f"no column {name!r}; it has {names}")
        return dict(columns)
    shown = getattr(dataset, "_format_columns", None)
    if shown is not None and not getattr(dataset, "_output_all_columns", False):
        names = [n for n in names if n in shown]
    schema = dataset.data.schema
    return {n: n for n in names if column_kind(schema.field(n).type)}


def _dataset_source(dataset: Any, columns: Mapping[str, str] | None,
                    media_root: str | os.PathLike | None) -> ArrowSource:
    """An `ArrowSource` of exactly the rows (its slices and indices mapping) and columns (removed,
    selected, renamed) a ``datasets.Dataset`` holds, read from its cache files."""
    where = _dataset_where(dataset)
    if not dataset.cache_files:
        raise SourceError(where, "the dataset is held in memory, with no cache file: save_to_disk() it and open "
                                 "that folder")
    wanted = _dataset_columns(dataset, columns, where)
    if not wanted:
        raise SourceError(where, "no column to read")
    paths: list[str] = []
    pieces: list[tuple[int, np.ndarray]] = []
    counts: list[int] = []
    file_columns: dict[str, str] | None = None
    start = 0
    for row in _row_blocks(dataset.data, where):
        table = _holder(row, list(dict.fromkeys(wanted.values())), start, where)
        start += len(table.rows)
        names = {f: table.columns[c] for f, c in wanted.items()}
        if file_columns is not None and names != file_columns:
            raise SourceError(where, f"its cache files name its columns differently ({file_columns} and {names}): "
                                     f"{FLATTEN_HINT}")
        file_columns = names
        if table.path not in paths:
            paths.append(table.path)
            counts.append(table.file_rows)
        pieces.append((paths.index(table.path), table.rows))
    first = np.cumsum([0, *counts])
    rows = np.concatenate([first[n] + r for n, r in pieces])
    indices = getattr(dataset, "_indices", None)
    if indices is not None:  # select in any order, filter, shuffle, sort
        mapping = np.asarray(indices.column(0).to_numpy(), dtype=np.int64)
        if len(mapping) and (mapping.min() < 0 or mapping.max() >= len(rows)):
            raise SourceError(where, f"its indices mapping points past its {len(rows)} rows: {FLATTEN_HINT}")
        rows = rows[mapping]
    if len(rows) != len(dataset):
        raise SourceError(where, f"{len(rows)} rows found in its cache files for its {len(dataset)}: {FLATTEN_HINT}")
    spec = dataset.features.to_dict()
    features = {file_columns[f]: spec[c] for f, c in wanted.items() if c in spec}
    return ArrowSource(paths, file_columns, features, media_root, rows=rows)


def _one_split(splits: Any, split: str | None) -> Any:
    """The dataset of ``split`` of a ``DatasetDict`` object (its only one when not given)."""
    names = list(splits.keys())
    if split is None:
        if len(names) != 1:
            raise SourceError("datasets.DatasetDict", f"a DatasetDict with splits {names}: pass split= (or one "
                                                      f"split, dataset[{names[0]!r}])")
        split = names[0]
    if split not in names:
        raise SourceError("datasets.DatasetDict", f"no split {split!r}; it has {names}")
    return splits[split]


def huggingface(name_or_path: Any, split: str | None = None, columns: Mapping[str, str] | None = None, *,
                media_root: str | os.PathLike | None = None,
                cache_bytes: int = DEFAULT_CACHE_BYTES) -> ArrowSource | ParquetSource:
    """A Hugging Face dataset on this machine: a ``save_to_disk`` folder, Parquet files (one
    file, or a folder such as a Hub snapshot, its files of ``split``), or a ``datasets.Dataset``
    (or ``DatasetDict``) backed by Arrow files, read as ``dataset[i]`` gives it. ``columns``
    maps batch fields to columns."""
    if hasattr(name_or_path, "cache_files") and hasattr(name_or_path, "keys"):  # a DatasetDict
        name_or_path = _one_split(name_or_path, split)
    if hasattr(name_or_path, "cache_files") and hasattr(name_or_path, "features"):
        return _dataset_source(name_or_path, columns, media_root)
    if not isinstance(name_or_path, (str, os.PathLike)):
        kind = type(name_or_path).__name__
        if kind.startswith("Iterable"):  # datasets' IterableDataset(Dict): a stream, no rows to index
            raise SourceError(f"datasets.{kind}", "a streamed dataset has no random access (no row can be read "
                              "by its number): load it without streaming=True (a Dataset backed by its cache "
                              "files), or save the rows you need with save_to_disk() and open that folder")
        raise TypeError(f"huggingface(): expected a path, a datasets.Dataset or a DatasetDict, got {kind}")
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
