"""Reading and writing a dataset's files without trusting them: atomic fsynced writes, deterministic
JSON and gzip, strict JSON, regular files read within a bound, paths kept inside the dataset."""

from __future__ import annotations

import gzip
import io
import json
import os
import reprlib
import stat
from pathlib import Path
from typing import Any

from mediapipe.errors import SourceError


# -- atomic files -----------------------------------------------------------------------
def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename in ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial")


def write_error(err: OSError, path: str | os.PathLike) -> OSError:
    """``err`` naming the file being written: a failed write or fsync (ENOSPC, EIO) names none."""
    return OSError(err.errno, err.strerror or str(err), str(path))


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a fsynced temporary file and a rename."""
    path = Path(path)
    tmp = temp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        if err.filename is not None:  # (open's errors name the file)
            raise
        raise write_error(err, tmp) from err
    os.replace(tmp, path)
    fsync_dir(path.parent)


def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


def gzip_bytes(data: bytes) -> bytes:
    """gzip with no timestamp and no file name, so equal data gives equal bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as f:
        f.write(data)
    return buf.getvalue()


# -- reading what a dataset says: bounded, strict, confined ------------------------------
_show = reprlib.Repr()  # values in messages: short, whatever a hostile file holds
_show.maxstring = _show.maxother = 60
_show.maxlong, _show.maxlist, _show.maxdict, _show.maxlevel = 40, 6, 4, 3


def show(value: object) -> str:
    """A value read from a file, as an error message quotes it: cut short, whatever it holds."""
    return _show.repr(value)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


_JSON = json.JSONDecoder(parse_constant=_no_constant)  # strict JSON: no NaN or Infinity


def parse_json(text: str | bytes, where: str, line: int | None = None) -> Any:
    """Strict JSON (no NaN, Infinity, or ints past Python's digit limit), or a `SourceError`
    naming ``where`` (and ``line``). One value, decoded by json's own C scanner."""
    try:
        text = (text.decode("utf-8") if isinstance(text, bytes) else text).strip()
        value, end = _JSON.scan_once(text, 0)
        if end != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
        return value
    except StopIteration as stop:  # no value where one must start
        reason = f"invalid JSON: expecting a value at character {stop.value}"
    except RecursionError:
        reason = "invalid JSON: nested too deeply"
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, NaN, the int digit limit
        reason = f"invalid JSON: {err}"
    raise SourceError(where if line is None else f"{where}:{line}", reason)


def open_regular(path: str | os.PathLike, what: str) -> tuple[int, os.stat_result]:
    """A descriptor on ``path`` (a real path: a link in its place now is refused) and its
    stat, refusing anything but a regular file (reading a FIFO or a device would block or
    never end)."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise SourceError(str(path), f"cannot open {what}: {err.strerror or err}") from err
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise SourceError(str(path), f"{what} is not a regular file")
    return fd, st


def stat_regular(path: str | os.PathLike, what: str) -> os.stat_result:
    """The stat of a regular file at a real path (a link in its place now is refused)."""
    try:
        st = os.lstat(path)
    except OSError as err:
        raise SourceError(str(path), f"{what}: {err.strerror or err}") from err
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(str(path), f"{what} is not a regular file")
    return st


def read_bounded(path: str | os.PathLike, limit: int, what: str) -> bytes:
    """A small file's bytes, refused before anything is read when it holds more than ``limit``."""
    fd, st = open_regular(path, what)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > limit:
            raise SourceError(str(path), f"{what} has {st.st_size} bytes, more than the {limit} it can need")
        data = f.read(st.st_size + 1)  # (a read of n bytes allocates n first)
    if len(data) != st.st_size:
        raise SourceError(str(path), f"{what} changed size while it was read")
    return data


def dataset_path(folder: str, name: object, *, where: str, field: str) -> str:
    """The real path of a file a dataset names, refused unless it lies inside the dataset's
    folder once every link is resolved (``folder`` is itself a real path)."""
    if type(name) is not str or not name or "\0" in name:
        raise SourceError(where, f"{field}: expected a file name, got {_show.repr(name)}")
    if os.path.isabs(name):
        raise SourceError(where, f"{field}: {name!r} is an absolute path, outside the dataset folder {folder}")
    real = os.path.realpath(os.path.join(folder, name))
    if real == folder or os.path.commonpath([folder, real]) != folder:
        raise SourceError(where, f"{field}: {name!r} resolves to {real}, outside the dataset folder {folder}")
    return real
