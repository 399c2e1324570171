"""`parquet(paths, columns=...)`: Parquet files as a random-access source, row-group aware.

Opening reads each file's footer and the numeric columns (labels, durations), never the
media. A sample's media and text are read from its row group: the column chunk is read and
decompressed once and kept in a per-process cache bounded in bytes, so reading the rows of
a row group in turn costs one read. Parquet has no cheaper way to one row: a fully
shuffled epoch decompresses a row group per sample. `RowGroupWindowSampler` (or
``source.window_sampler(...)``) shuffles within a bounded window of row groups instead:
the row groups are permuted, taken ``window`` at a time, and the rows of each window
permuted, so each worker reads each row group of a window once.

Column types: binary, or a struct with a ``bytes`` child (the Hugging Face ``Image``,
``Audio`` and ``Video`` features, whose ``path`` child is read when ``bytes`` is null),
become media blobs; strings become ``str`` fields (``None`` where the value is null); integers
and floats become numbers (a null one is a `SourceError` naming the row: a batch needs the number
of every sample). The field ``label`` is the sample's class: an integer, never a float truncated
(`mediapipe.loaders.sources.labels.class_label`); a Hugging Face ``ClassLabel`` gives ``classes``.

A folder of Parquet files whose names or folders name several splits (a Hub snapshot's
``data/train-00000-of-00002.parquet`` beside ``data/test-00000-of-00001.parquet``, or
``default/<split>/0000.parquet``), or one split in the folders of several configs, is refused
rather than read as one dataset (`mediapipe.loaders.sources.parquet_splits`).
"""


from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mediapipe.errors import SourceError
from mediapipe.loaders.samplers import EpochBatchSampler, check_resume
from mediapipe.loaders.sources.folder import Source
from mediapipe.loaders.sources.parquet_columns import (
    Column,
    _pyarrow,
    class_names,
    external_path,
    hf_features,
    known_meta,
    plan_columns,
    row_numbers,
    text_value,
)
from mediapipe.loaders.sources.parquet_splits import check_one_split
from mediapipe.sample import Blob, SampleMeta, SampleRef

DEFAULT_CACHE_BYTES = 512 * 2**20


# -- the per-process cache of decoded row groups -----------------------------------------
class _RowGroupCache:
    """Column chunks of recently read row groups, at most ``limit`` bytes, per process."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._chunks: OrderedDict[tuple[str, int, str], tuple[Any, int]] = OrderedDict()
        self._files: OrderedDict[str, Any] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.reads = 0

    def column(self, path: str, row_group: int, column: str, limit: int) -> Any:
        key = (path, row_group, column)
        with self._lock:
            hit = self._chunks.get(key)
            if hit is not None:
                self._chunks.move_to_end(key)
                return hit[0]
        where = f"{path}: row group {row_group}"
        try:
            table = self._file(path).read_row_group(row_group, columns=[column])
            chunk = table.column(0).combine_chunks()
        except SourceError:
            raise
        except Exception as err:  # noqa: BLE001  pyarrow raises OSError, ArrowInvalid, ArrowException...
            raise SourceError(where, f"cannot read column {column!r}: {type(err).__name__}: {err}") from None
        size = int(chunk.nbytes)
        with self._lock:
            self.reads += 1
            self._chunks[key] = (chunk, size)
            self._bytes += size
            while self._bytes > limit and len(self._chunks) > 1:
                _, (_, dropped) = self._chunks.popitem(last=False)
                self._bytes -= dropped
        return chunk

    def _file(self, path: str) -> Any:
        pa = _pyarrow()
        with self._lock:
            f = self._files.get(path)
            if f is not None:
                self._files.move_to_end(path)
                return f
        try:
            f = pa.parquet.ParquetFile(path, memory_map=True)
        except Exception as err:  # noqa: BLE001
            raise SourceError(path, f"not a readable Parquet file: {type(err).__name__}: {err}") from None
        with self._lock:
            self._files[path] = f
            while len(self._files) > 64:
                self._files.popitem(last=False)
        return f


ROW_GROUPS = _RowGroupCache()


@dataclass(frozen=True)
class ParquetBlob(Blob):
    """One media value of a Parquet file: ``offset`` is the row group, ``size`` the row in it."""

    column: str = ""
    media_root: str | None = None
    cache_bytes: int = DEFAULT_CACHE_BYTES

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        chunk = ROW_GROUPS.column(self.path, self.offset, self.column, self.cache_bytes)  # type: ignore[arg-type]
        value = chunk[self.size]
        if not value.is_valid:
            raise SourceError(self.name, "the value is null")
        if not hasattr(value, "keys"):
            return value.as_py()
        data = value["bytes"].as_py()  # a struct: {"bytes": ..., "path": ...} (Hugging Face media)
        if data is not None:
            return data
        named = value["path"].as_py() if "path" in value.keys() else None
        if not named:
            raise SourceError(self.name, "the value has neither bytes nor a path")
        return Blob(named, path=external_path(named, self.media_root, self.name)).read()

    def nbytes(self) -> int:
        return len(self.read())


# -- the source ------------------------------------------------------------------------------
class ParquetSource(Source):
    """The rows of Parquet files (a file, a folder of ``*.parquet``, a glob or a list), in order.

    ``columns`` maps batch fields to columns (default: every readable column under its own
    name). ``media_root`` is where values that hold only a path are looked up.
    ``cache_bytes`` bounds each process's cache of decoded row groups.
    """

    kind = "parquet"

    def __init__(self, paths: str | os.PathLike | Iterable[str | os.PathLike], columns: Mapping[str, str] | None = None,
                 media_root: str | os.PathLike | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 classes: list[str] | None = None) -> None:
        from mediapipe.loaders.sources.tfrecord import input_files

        pa = _pyarrow()
        for item in [paths] if isinstance(paths, (str, os.PathLike)) else list(paths):
            if os.path.isdir(item):
                check_one_split(item)
        self.paths = input_files(paths, ("*.parquet",))
        self.column_map = dict(columns) if columns is not None else None
        self.media_root = str(media_root) if media_root is not None else None
        self.cache_bytes = int(cache_bytes)
        self._given_classes = list(classes) if classes is not None else None
        groups, numbers, files, rows_in_group = [], {}, [], []
        self.columns: list[Column] | None = None
        self._classes = self._given_classes
        for n, path in enumerate(self.paths):
            try:
                f = pa.parquet.ParquetFile(path)
                schema, meta = f.schema_arrow, f.metadata
            except Exception as err:  # noqa: BLE001  a bad footer, not Parquet, unreadable
                raise SourceError(path, f"not a readable Parquet file: {type(err).__name__}: {err}") from None
            cols = plan_columns(schema, self.column_map, path)
            if self.columns is None:
                self.columns = cols
            elif cols != self.columns:
                raise SourceError(path, f"its columns {cols} differ from the first file's {self.columns}")
            features = hf_features(schema.metadata)
            if self._classes is None:
                label = next((c for c in cols if c.field == "label"), None)
                self._classes = class_names(features, label.name) if label is not None else None
            counts = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            for g, count in enumerate(counts):
                groups.append(np.full(count, len(rows_in_group), dtype=np.int32))
                rows_in_group.append((n, g, count))
            files.append(sum(counts))
            wanted = [c for c in cols if c.kind == "number"]
            if wanted:
                try:
                    table = f.read(columns=[c.name for c in wanted])
                except Exception as err:  # noqa: BLE001
                    raise SourceError(path, f"cannot read its numeric columns: {type(err).__name__}: {err}") \
                        from None
                for c in wanted:
                    col = table.column(c.name)
                    values = np.asarray(col.to_pylist(), dtype=object) if col.null_count else col.to_numpy()
                    numbers.setdefault(c.field, []).append(values)
        if not groups or sum(files) == 0:
            raise SourceError(str(self.paths[0]), "no rows")
        self._group = np.concatenate(groups)
        self._groups = rows_in_group  # (file, row group, rows) per global row group
        starts = np.cumsum([0] + [r for _, _, r in rows_in_group])
        self._group_start = starts[:-1]
        self._numbers = {k: np.concatenate(v) for k, v in numbers.items()}

    def __len__(self) -> int:
        return len(self._group)

    @property
    def classes(self) -> list[str] | None:
        return None if self._classes is None else list(self._classes)

    def row_groups(self) -> np.ndarray:
        """The global row group of every sample (row groups numbered across files, in order)."""
        return self._group.copy()

    def locate(self, index: int) -> tuple[str, int, int, int]:
        """(file, row group in it, row in the group, row in the file) of sample ``index``."""
        g = int(self._group[index])
        n, rg, _ = self._groups[g]
        row = index - int(self._group_start[g])
        first_of_file = int(self._group_start[g - rg])
        return self.paths[n], rg, row, index - first_of_file

    def ref(self, index: int) -> SampleRef:
        path, rg, row, file_row = self.locate(index)
        where = f"{path}: row {file_row}"
        label, fields = row_numbers(self._numbers, self.columns or [], index, where, self._classes)
        blobs: dict[str, Blob] = {}
        for c in self.columns or []:
            if c.kind == "media":
                blobs[c.field] = ParquetBlob(f"{where}: {c.name}", path, rg, row, column=c.name,
                                             media_root=self.media_root, cache_bytes=self.cache_bytes)
            elif c.kind == "text":
                value = ROW_GROUPS.column(path, rg, c.name, self.cache_bytes)[row]
                fields[c.field] = text_value(value.as_buffer(), where, c.name) if value.is_valid else None
        return SampleRef(index, f"{os.path.basename(path)}:{file_row}", blobs, label, self.meta(index), fields)

    def meta(self, index: int) -> SampleMeta:
        return known_meta(self._numbers, index)

    def window_sampler(self, batch_size: int, window: int = 8, **kwargs: Any) -> RowGroupWindowSampler:
        """A `RowGroupWindowSampler` over this source's row groups (``kwargs``: seed, rank...)."""
        return RowGroupWindowSampler(self.row_groups(), batch_size, window=window, **kwargs)

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind, "paths": list(self.paths)}
        if self.column_map is not None:
            config["columns"] = dict(self.column_map)
        if self.media_root is not None:
            config["media_root"] = self.media_root
        if self.cache_bytes != DEFAULT_CACHE_BYTES:
            config["cache_bytes"] = self.cache_bytes
        if self._given_classes is not None:
            config["classes"] = list(self._given_classes)
        return config


class RowGroupWindowSampler(EpochBatchSampler):
    """An `EpochBatchSampler` whose shuffle stays within ``window`` row groups at a time.

    Each epoch permutes the row groups (keyed by seed and epoch), cuts them into windows of
    ``window`` row groups and permutes the samples within each window. Ranks take contiguous
    parts of that order (sizes differing by at most one), so each rank reads its own row
    groups. Everything else (``last_batch``, ``valid``, resume) is `EpochBatchSampler`'s.
    """

    def __init__(self, groups: np.ndarray, batch_size: int, *, window: int = 8, shuffle: bool = True,
                 seed: int = 0, rank: int | None = None, world_size: int | None = None,
                 last_batch: str = "partial") -> None:
        if window < 1:
            raise ValueError(f"window={window}: expected >= 1 row groups")
        groups = np.asarray(groups)
        super().__init__(len(groups), batch_size, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size,
                         last_batch=last_batch)
        self.window = window
        ids, self._starts, self._counts = np.unique(groups, return_index=True, return_counts=True)
        if not np.array_equal(np.repeat(ids, self._counts), groups):
            raise ValueError("groups: expected each group's samples to be contiguous")

    def order(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_samples)
        rng = np.random.default_rng([self.seed, self.epoch, 1])
        perm = rng.permutation(len(self._starts))
        pieces = []
        for w in range(0, len(perm), self.window):
            chosen = perm[w:w + self.window]
            rows = np.concatenate([np.arange(self._starts[g], self._starts[g] + self._counts[g]) for g in chosen])
            pieces.append(rng.permutation(rows))
        return np.concatenate(pieces)

    def rank_indices(self) -> np.ndarray:
        return np.array_split(self.order(), self.world_size)[self.rank]

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "window": self.window}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        check_resume({"version": self.STATE_VERSION, "window": state.pop("window", None)},
                     {"window": self.window}, self.STATE_VERSION)
        super().load_state_dict(state)


def parquet(paths: str | os.PathLike | Iterable[str | os.PathLike], columns: Mapping[str, str] | None = None, *,
            media_root: str | os.PathLike | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES,
            classes: list[str] | None = None) -> ParquetSource:
    """Parquet files as a source: media bytes columns, text, numbers (see `ParquetSource`)."""
    return ParquetSource(paths, columns, media_root, cache_bytes, classes)
