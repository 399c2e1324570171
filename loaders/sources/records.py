"""Record files (TFRecord, RecordIO): byte ranges of big files, read with ``os.pread``,
and the offset index that gives random access to them.

Nothing read from such a file is trusted: an index entry must lie inside the file, and a
length field is checked against the bytes that are there before anything is allocated for
it, so a corrupt or hostile file costs at most its own size in memory. Errors name the
file and the record number (``train.tfrecord: record 17``).
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mediapipe.errors import SourceError
from mediapipe.loaders.sources.folder import Source
from mediapipe.loaders.sources.shards import _CAN_ADVISE, _OPEN_SHARDS
from mediapipe.sample import Blob

CACHE_ENV = "MEDIAPIPE_INDEX_CACHE"
"""Where indices built for read-only datasets go (default ``~/.cache/mediapipe/indices``)."""
INDEX_SUFFIXES = (".idx",)
"""What index files end with (the built ones, ``<file>.idx``, and im2rec's): never listed as data."""


def record_name(path: str, number: int) -> str:
    """How errors name a record: its file and its number (from 0, in file order)."""
    return f"{path}: record {number}"


def pread_exact(path: str, offset: int, size: int, where: str) -> bytes:
    """``size`` bytes at ``offset`` of ``path`` (through the per-process cache of open files),
    or a `SourceError` naming ``where`` when fewer are there."""
    if offset < 0 or size < 0:
        raise SourceError(where, f"invalid byte range: offset {offset}, size {size}")
    try:
        with _OPEN_SHARDS.open(path) as fd:
            data = os.pread(fd, size, offset)
    except OSError as err:
        raise SourceError(where, f"{err.strerror or err} (offset {offset})") from err
    if len(data) != size:
        raise SourceError(where, f"truncated: expected {size} bytes at offset {offset}, got {len(data)}")
    return data


def advise(path: str, offset: int, size: int) -> None:
    """Ask the kernel to start reading a byte range now (a hint; errors are ignored)."""
    if not _CAN_ADVISE:
        return
    try:
        with _OPEN_SHARDS.open(path) as fd:
            os.posix_fadvise(fd, offset, size, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass


@dataclass(frozen=True)
class RangeBlob(Blob):
    """A byte range of a big file (a value in an Arrow file), read with one ``os.pread``."""

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        return pread_exact(self.path, self.offset, self.size or 0, self.name)  # type: ignore[arg-type]


class FileRecords(Source):
    """A source over the records of several files, numbered across them in file order:
    which file and which record of it a sample is, for reading and for error messages."""

    paths: list[str]
    _classes: list[str] | None = None

    def _number_records(self, counts: list[int]) -> None:
        self._file = np.concatenate([np.full(c, n, dtype=np.int32) for n, c in enumerate(counts)])
        self._first = np.cumsum([0, *counts])  # the global index of each file's record 0

    def __len__(self) -> int:
        return len(self._file)

    @property
    def classes(self) -> list[str] | None:
        return None if self._classes is None else list(self._classes)

    def locate(self, index: int) -> tuple[str, int]:
        """(file, record number in it) of sample ``index``."""
        n = int(self._file[index])
        return self.paths[n], index - int(self._first[n])


def input_files(paths: str | os.PathLike | Iterable[str | os.PathLike], patterns: tuple[str, ...]) -> list[str]:
    """The files of ``paths``: each a file, a glob, or a folder (its files matching ``patterns``,
    in sub-folders too), as real paths. A folder or a glob never lists an index (`INDEX_SUFFIXES`:
    the ones this module caches beside their data) or a hidden file (an interrupted write's
    ``.<name>.partial``), so a dataset opens the same way after its indices are cached."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out: list[str] = []
    for item in items:
        text = str(item)
        if Path(text).is_dir():
            found = sorted({str(f) for pattern in patterns for f in Path(text).rglob(pattern)
                            if f.is_file() and is_data_name(f.relative_to(text))})
        elif any(ch in text for ch in "*?["):
            found = sorted(f for f in glob.glob(text) if os.path.isfile(f) and is_data_name(Path(f).name))
        else:
            found = [text]
        if not found:
            raise SourceError(text, f"no files matching {' or '.join(patterns)}")
        out += found
    if not out:
        raise SourceError(str(paths), "no files given")
    return [os.path.realpath(p) for p in out]  # read through the real file (record files are opened O_NOFOLLOW)


def is_data_name(relative: str | os.PathLike) -> bool:
    """Whether a listed file may be a data file: not an index, and no hidden part in its path."""
    parts = Path(relative).parts
    return not parts[-1].endswith(INDEX_SUFFIXES) and not any(part.startswith(".") for part in parts)


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError as err:
        raise SourceError(path, err.strerror or str(err)) from err


def check_offsets(offsets: np.ndarray, sizes: np.ndarray, total: int, where: str) -> None:
    """Refuse an index whose records leave the file, overlap or run backwards."""
    if len(offsets) == 0:
        raise SourceError(where, "the index lists no records")
    bad = np.flatnonzero((offsets < 0) | (sizes <= 0) | (offsets + sizes > total))
    if len(bad):
        i = int(bad[0])
        raise SourceError(where, f"index entry {i} (offset {offsets[i]}, size {sizes[i]}) is outside the "
                          f"{total}-byte file: the index is stale or corrupt (delete it to rebuild)")
    overlap = np.flatnonzero(offsets[1:] < offsets[:-1] + sizes[:-1])
    if len(overlap):
        i = int(overlap[0]) + 1
        raise SourceError(where, f"index entry {i} (offset {offsets[i]}) overlaps record {i - 1}: "
                          "the index is stale or corrupt (delete it to rebuild)")


def cached_index_path(data_path: str, suffix: str) -> Path:
    """Where to keep a built index: beside the data file (``<file><suffix>``, which `input_files`
    never lists as data) when that folder is writable, else in the user's cache
    (`CACHE_ENV`), under a name tied to the file's path, size and mtime."""
    beside = Path(data_path + suffix)
    if os.access(beside.parent, os.W_OK):
        return beside
    stat = os.stat(data_path)
    digest = hashlib.sha256(f"{os.path.abspath(data_path)}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "mediapipe" / "indices")
    return root / f"{digest.hexdigest()[:24]}{suffix}"


def load_or_build(data_path: str, index_path: str | None, suffix: str,
                  read: Callable[[Path], tuple[np.ndarray, np.ndarray]],
                  build: Callable[[str], tuple[np.ndarray, np.ndarray]],
                  write: Callable[[Path, np.ndarray, np.ndarray], bytes]) -> tuple[np.ndarray, np.ndarray, str]:
    """(offsets, sizes, index path) of ``data_path``'s records: read from ``index_path`` (or the
    cached one), else built by scanning the file once and cached for the next open. A cached
    index older than its data file is rebuilt."""
    from mediapipe.dataset.safe_io import write_atomic

    given = index_path is not None
    path = Path(index_path) if given else cached_index_path(data_path, suffix)
    if path.exists() and (given or path.stat().st_mtime_ns >= os.stat(data_path).st_mtime_ns):
        offsets, sizes = read(path)
        return offsets, sizes, str(path)
    if given:
        raise SourceError(str(path), "index file not found")
    offsets, sizes = build(data_path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, write(path, offsets, sizes))
    except OSError:
        pass  # an index that cannot be cached is built again next time
    return offsets, sizes, str(path)


def read_int_table(path: Path, columns: int) -> np.ndarray:
    """An index of whitespace-separated integers, ``columns`` per line, as int64 rows; a line
    that is not that is an error naming the index file and the line."""
    rows = []
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.split()
                if not parts:
                    continue
                try:
                    row = [int(p) for p in parts]
                    if len(row) != columns or any(abs(v) >= 2**62 for v in row):
                        raise ValueError
                    rows.append(row)
                except ValueError:
                    raise SourceError(f"{path}:{lineno}", f"expected {columns} integers, got {line.strip()[:80]!r}") \
                        from None
    except SourceError:
        raise
    except OSError as err:
        raise SourceError(str(path), err.strerror or str(err)) from err
    return np.asarray(rows, dtype=np.int64).reshape(-1, columns)
