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
rather than read as one dataset (`split_place`).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.errors import SourceError
from mediapipe.loaders.samplers import EpochBatchSampler, check_resume
from mediapipe.loaders.sources.folder import Source
from mediapipe.loaders.sources.labels import class_label
from mediapipe.sample import Blob, SampleMeta, SampleRef

DEFAULT_CACHE_BYTES = 512 * 2**20
META_KEYS = ("width", "height", "duration", "frames", "fps", "sample_rate", "num_samples", "channels")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as err:
        raise ImportError("reading Parquet and Hugging Face datasets needs pyarrow: "
                          "pip install mediapipe-loader[hf]") from err
    return pyarrow


# -- what each column is -------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """A column as a source reads it: ``kind`` "media" (bytes, or a struct with bytes and
    path), "text" or "number"; ``field`` is its name in the batch."""

    field: str
    name: str
    kind: str


def column_kind(arrow_type: Any) -> str | None:
    """"media", "text", "number" or None (not read) for an Arrow type."""
    pa = _pyarrow()
    t = pa.types
    if t.is_struct(arrow_type):
        names = {arrow_type.field(i).name for i in range(arrow_type.num_fields)}
        if "bytes" in names and t.is_binary(arrow_type.field("bytes").type) or (
                "bytes" in names and t.is_large_binary(arrow_type.field("bytes").type)):
            return "media"
        return None
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type):
        return "media"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "text"
    if t.is_integer(arrow_type) or t.is_floating(arrow_type) or t.is_boolean(arrow_type):
        return "number"
    return None


def hf_features(metadata: Mapping[bytes, bytes] | None) -> dict[str, Any]:
    """The Hugging Face features recorded in an Arrow schema's metadata (empty when none)."""
    raw = (metadata or {}).get(b"huggingface")
    if not raw:
        return {}
    try:
        info = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    features = info.get("info", {}).get("features", {}) if isinstance(info, dict) else {}
    return features if isinstance(features, dict) else {}


def class_names(features: Mapping[str, Any], column: str) -> list[str] | None:
    """A ``ClassLabel`` column's names."""
    spec = features.get(column)
    if isinstance(spec, dict) and spec.get("_type") == "ClassLabel" and isinstance(spec.get("names"), list):
        return [str(n) for n in spec["names"]]
    return None


def plan_columns(schema: Any, columns: Mapping[str, str] | None, where: str) -> list[Column]:
    """Each wanted column (``columns``: batch field -> column; None: every readable column
    under its own name) with its kind; an unknown or unreadable column asked for is an error."""
    names = {schema.field(i).name: schema.field(i).type for i in range(len(schema.names))}
    wanted = dict(columns) if columns is not None else {n: n for n in names if column_kind(names[n])}
    out = []
    for field, name in wanted.items():
        if name not in names:
            raise SourceError(where, f"no column {name!r}; it has {sorted(names)}")
        kind = column_kind(names[name])
        if kind is None:
            raise SourceError(where, f"column {name!r} has type {names[name]}, which is not media bytes, text "
                              "or a number")
        if field == "label" and kind != "number":
            raise SourceError(where, f"label column {name!r} has type {names[name]}, expected integers")
        out.append(Column(field, name, kind))
    if not out:
        raise SourceError(where, "no column to read")
    return out


def external_path(value: str, root: str | None, where: str) -> str:
    """The file a media value names by path only (no bytes stored): it must resolve inside
    ``media_root`` (relative paths are taken from there)."""
    if root is None:
        raise SourceError(where, f"the value has no bytes, only the path {value!r}; pass media_root= (the folder "
                          "that holds such files) to read them")
    base = os.path.realpath(root)
    path = os.path.realpath(os.path.join(base, value))
    if os.path.commonpath([base, path]) != base:
        raise SourceError(where, f"path {value!r} leaves media_root {root}")
    return path


def text_value(raw: Any, where: str, field: str) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as err:
        raise SourceError(where, f"{field!r} is not UTF-8 text (at byte {err.start})") from None


def null_number(where: str, column: str) -> SourceError:
    """The error of a null in a number column: a batch needs the number of every sample."""
    return SourceError(where, f"number column {column!r} is null here; a batch needs it in every sample: fill the "
                              "nulls, or leave the column out with columns=")


# -- the splits of a Hub-style snapshot --------------------------------------------------------
SPLIT_WORDS = ("train", "training", "validation", "valid", "val", "dev", "test", "testing", "eval", "evaluation")
_SHARD_NAME = re.compile(r"(?P<split>.+?)-\d+-of-\d+(?:-[^.]*)?\.parquet")  # an older push_to_hub's -<hash> too
_NUMBERED_NAME = re.compile(r"\d+\.parquet")
_SPLIT_TOKEN = re.compile(rf"(?:^|[-._ ])(?:{'|'.join(SPLIT_WORDS)})(?=$|[-._ 0-9])", re.IGNORECASE)
_WORD_AND_NUMBER = re.compile(rf"(?P<split>{'|'.join(SPLIT_WORDS)})[-._ ]?\d+", re.IGNORECASE)


def split_place(relative: Path) -> tuple[str, tuple[str, ...]] | None:
    """(the split, the folders above the part of the path that names it) of a Parquet file of a
    Hub-style snapshot, from its path below the snapshot: ``<split>-00000-of-00002[-<hash>].parquet``,
    ``<config>/<split>/0000.parquet``, or a file or folder whose name holds a usual split word
    (``train``, ``validation``, ``test``...) as a word: ``test.parquet``, ``train_3.parquet`` (split
    ``train``), ``validation_matched.parquet`` (split ``validation_matched``: a name that says more
    than the word is its own split, never merged into the word's), ``imdb-train.parquet``."""
    name, folders = relative.name, relative.parts[:-1]
    if shard := _SHARD_NAME.fullmatch(name):
        return shard["split"], folders
    if folders and _NUMBERED_NAME.fullmatch(name):
        return folders[-1], folders[:-1]
    for depth, part in ((len(folders), name.removesuffix(".parquet")), *reversed(list(enumerate(folders)))):
        if _SPLIT_TOKEN.search(part):
            numbered = _WORD_AND_NUMBER.fullmatch(part)
            return (numbered["split"] if numbered else part), folders[:depth]
    return None


def split_of(relative: Path) -> str | None:
    """The split a Parquet file of a Hub-style snapshot belongs to (`split_place`), or None."""
    place = split_place(relative)
    return None if place is None else place[0]


def parquet_splits(root: Path, files: Iterable[Path]) -> dict[str, list[Path]]:
    """The files of each split named below ``root`` (files that name no split are left out). A
    split named in several folders (one per config of a snapshot: ``en/train/0000.parquet`` and
    ``fr/train/0000.parquet``) is refused rather than merged."""
    splits: dict[str, list[Path]] = {}
    places: dict[str, set[tuple[str, ...]]] = {}
    for f in files:
        place = split_place(f.relative_to(root))
        if place is not None:
            splits.setdefault(place[0], []).append(f)
            places.setdefault(place[0], set()).add(place[1])
    for split, folders in places.items():
        if len(folders) > 1:
            shown = sorted(str(Path(*p)) if p else "." for p in folders)
            raise SourceError(str(root), f"split {split!r} is in several folders {shown} (configs of a snapshot?), "
                                         "which reading them together would merge: pass the folder of one (or its "
                                         "files, to mp.loaders.parquet)")
    return splits


def _split_files_hint(split: str, files: list[Path]) -> str:
    """A path that gives one split's files to `parquet` or ``mediapipe convert``: their folder
    when it holds only them, else a glob of their names."""
    folder = files[0].parent
    if all(f.parent == folder for f in files):
        if sorted(folder.rglob("*.parquet")) == sorted(files):
            return str(folder)
        if len(files) == 1:
            return str(files[0])
        return str(folder / f"{split}-*.parquet")
    return " ".join(str(f) for f in files[:3]) + (" ..." if len(files) > 3 else "")


def several_splits(root: Path, splits: Mapping[str, list[Path]]) -> str:
    """Why a folder of several splits is not read whole, and how to read one of them."""
    names = sorted(splits)
    example = "train" if "train" in names else names[0]
    hints = "; ".join(f"{name}: {_split_files_hint(name, sorted(splits[name]))}" for name in names)
    return (f"its Parquet files are of splits {names}, which reading them together would merge: pass split= "
            f"(mp.loaders.huggingface({str(root)!r}, split={example!r}); mediapipe convert --split {example}), "
            f"or give one split's files (to mp.loaders.parquet or mediapipe convert): {hints}")


def check_one_split(folder: str | os.PathLike) -> None:
    """Refuse a folder whose Parquet files are of several splits (see `split_of`)."""
    root = Path(folder)
    splits = parquet_splits(root, root.rglob("*.parquet"))
    if len(splits) > 1:
        raise SourceError(str(root), several_splits(root, splits))


def _python_number(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def row_numbers(numbers: Mapping[str, np.ndarray], columns: Iterable[Column], index: int, where: str,
                classes: list[str] | None = None) -> tuple[int | None, dict[str, Any]]:
    """(label, other numbers) of row ``index``: the label an integer class (one of ``classes``
    when they are named), every number present (a null, or a label that is not a class, is a
    `SourceError` naming ``where``)."""
    names = {c.field: c.name for c in columns}
    label, out = None, {}
    for field, values in numbers.items():
        value = values[index]
        if field == "label":
            label = class_label(value, where, None if classes is None else len(classes))
        elif value is None:
            raise null_number(where, names.get(field, field))
        else:
            out[field] = _python_number(value)
    return label, out


def known_meta(numbers: Mapping[str, np.ndarray], index: int) -> SampleMeta:
    """The metadata numbers of row ``index`` that are not null."""
    return {k: _python_number(numbers[k][index]) for k in META_KEYS
            if k in numbers and numbers[k][index] is not None}


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
