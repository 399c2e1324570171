"""The epoch cache's key folders: made, recorded, held by their live loaders, and removed when none is.

Each key's folder records the entry format that made it (`RECORD`), and each loader holds a shared
``flock`` on its `USERS` file while it lives (taken under the cache folder's `ROOT_LOCK`, which a pruner
takes exclusively: a folder is never removed between being made and being held; a forked child closes
its copies of its parent's descriptors). Binding a cache removes the folders of another entry format
that no live loader holds (those from before records: when untouched for `STALE_UNRECORDED` seconds),
so a library upgrade does not leave its old entries in RAM; `EpochCache.prune` removes every folder no
live loader holds. Lock files are opened without blocking and only when regular (a FIFO is not waited on).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mediapipe.errors import PipelineError

__all__ = ["KEY", "RECORD", "USERS", "ROOT_LOCK", "HOLD_WAIT", "STALE_UNRECORDED", "close_owned", "hold_folder",
           "key_folders", "other_format", "own_folder", "owned", "remove_unheld"]

KEY = re.compile(r"^[0-9a-f]{32}$")  # a key folder's name
RECORD = "format"  # in a key's folder: {"format": FORMAT} of the library that made it
USERS = "users"  # in a key's folder: each live loader holds a shared flock on it
STALE_UNRECORDED = 600.0  # a folder with no record (made before records) untouched this long: another format's
ROOT_LOCK = ".lock"  # in the cache folder: binders take it shared to make and hold a key's folder, pruners
# exclusive to remove one, so a folder is never removed between being made and being held
HOLD_WAIT = 1.0  # seconds a bind or a prune waits for the other's lock: then a bind goes on unheld, a prune
# leaves the folder
_HOLDING = threading.Lock()  # one hold at a time in a process (thread workers remaking a cleared folder)


def hold_folder(folder: Path, fmt: int, parents: bool = True) -> int | None:
    """Make a key's ``folder`` (`own_folder`), record ``fmt`` in it and take the shared lock on its
    `USERS` file: the descriptor holding it, or None where the folder is used unheld (a ``users`` that
    cannot be locked: read-only, not a regular file; or held exclusively past `HOLD_WAIT`: a pruner)."""
    with _HOLDING, root_locked(folder.parent, fcntl.LOCK_SH):
        deadline = time.monotonic() + HOLD_WAIT
        while True:
            try:
                own_folder(folder, parents=parents)
            except PipelineError:  # removed by a pruner between making and looking at it: made again
                if os.path.lexists(folder) or not folder.parent.is_dir() or time.monotonic() >= deadline:
                    raise
                continue
            try:
                fd = lock_file(folder / USERS)
            except FileNotFoundError:  # removed by a pruner since it was made: made again
                if time.monotonic() >= deadline:
                    return None
                continue
            if fd is None:
                return None
            if not flock_by(fd, fcntl.LOCK_SH, deadline):
                os.close(fd)
                return None
            with contextlib.suppress(OSError):
                if os.stat(folder / USERS, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                    break  # the lock is on the folder's file, not on one a pruner removed meanwhile
            os.close(fd)
            if time.monotonic() >= deadline:
                return None
    with contextlib.suppress(OSError):  # FileExistsError: recorded already
        record = os.open(folder / RECORD, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(record, json.dumps({"format": fmt}).encode())
        finally:
            os.close(record)
    return fd


def key_folders(root: Path) -> list[Path]:
    """The key folders under a cache folder (none when it was removed)."""
    try:
        children = list(root.iterdir())
    except FileNotFoundError:
        return []
    return [c for c in children if KEY.match(c.name) and c.is_dir() and not c.is_symlink()]


def remove_unheld(root: Path, chosen: Callable[[Path], bool]) -> list[str]:
    """Remove the key folders under ``root`` that ``chosen(folder)`` picks and no live loader holds (their
    `USERS` lock taken without waiting, under `ROOT_LOCK`, and kept while they are removed); the keys removed."""
    removed = []
    for folder in key_folders(root):
        if not chosen(folder):
            continue
        with root_locked(root, fcntl.LOCK_EX) as locked:
            if locked is False:  # a binder past `HOLD_WAIT` (stopped): left for another time
                continue
            try:
                fd = lock_file(folder / USERS)
            except OSError:  # gone already
                continue
            if fd is None:  # not a file a lock can be taken on: left as it is
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # a live loader holds it
                os.close(fd)
                continue
            try:
                shutil.rmtree(folder, ignore_errors=True)
                if not os.path.lexists(folder):
                    removed.append(folder.name)
            finally:
                os.close(fd)
    return removed


@contextlib.contextmanager
def root_locked(root: Path, operation: int) -> Iterator[bool | None]:
    """The cache folder's `ROOT_LOCK` taken (``operation``) for the block, waiting `HOLD_WAIT` at most:
    True when taken, False when another process kept it that long, None when the folder has no such
    lock file to take (read-only, not a regular file, removed)."""
    try:
        fd = lock_file(root / ROOT_LOCK)
    except OSError:
        fd = None
    if fd is None:
        yield None
        return
    try:
        taken = flock_by(fd, operation, time.monotonic() + HOLD_WAIT)
        yield taken
    finally:
        os.close(fd)


def lock_file(path: Path) -> int | None:
    """A descriptor on the regular file ``path`` (made when missing), opened without blocking (a FIFO
    there would block an open), or None when it is not a regular file or cannot be opened; raises
    FileNotFoundError when its folder is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY,
                     0o600)
    except FileNotFoundError:
        raise
    except OSError:  # a link, a folder, a read-only folder
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def flock_by(fd: int, operation: int, deadline: float) -> bool:
    """Take ``operation`` (LOCK_SH or LOCK_EX) on ``fd``, waiting until ``deadline`` (monotonic) at most."""
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)


# Descriptors this process opened for bindings (ledgers, ``users`` holds). A forked child closes its
# copies at once: they are its parent's (a copy would keep the parent's dropped loaders' folders held),
# and the child opens its own where it uses a binding.
_OWNED: set[int] = set()


def owned(fd: int, owner: Any) -> int:
    """Track ``fd``, closed when ``owner`` is collected (or at exit) in this process only."""
    _OWNED.add(fd)
    weakref.finalize(owner, close_owned, os.getpid(), fd)
    return fd


def close_owned(pid: int, fd: int) -> None:
    if os.getpid() == pid and fd in _OWNED:
        _OWNED.discard(fd)
        with contextlib.suppress(OSError):
            os.close(fd)


def _forget_owned() -> None:
    for fd in _OWNED:
        with contextlib.suppress(OSError):
            os.close(fd)
    _OWNED.clear()


os.register_at_fork(after_in_child=_forget_owned)


def other_format(folder: Path, fmt: int) -> bool:
    """Whether a key's folder was made by a library of another entry format: its record says so (or
    cannot be read), or it has none and is older than records and untouched for `STALE_UNRECORDED`."""
    try:
        fd = os.open(folder / RECORD, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        with contextlib.suppress(OSError):
            return time.time() - os.lstat(folder).st_mtime > STALE_UNRECORDED
        return False
    except OSError:
        return True
    try:
        record = json.loads(os.pread(fd, 256, 0))
        return not isinstance(record, dict) or record.get("format") != fmt
    except (OSError, ValueError, UnicodeDecodeError):
        return True
    finally:
        os.close(fd)


def own_folder(path: Path, strict: bool = True, parents: bool = True) -> None:
    """Make ``path`` (mode 0700; its missing parents too with ``parents``) or check it is a folder, not a
    link, and (``strict``) this user's and written by no other: another user's folder under /dev/shm
    could hand this process entries of its choosing."""
    try:
        path.mkdir(mode=0o700, parents=parents, exist_ok=True)
        st = os.lstat(path)
    except OSError as err:
        raise PipelineError(f"cache folder {path}: {err.strerror or err}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise PipelineError(f"cache folder {path}: not a folder (a link or a file)")
    if not strict:
        return
    if st.st_uid != os.getuid():
        raise PipelineError(f"cache folder {path}: owned by uid {st.st_uid}, not this user ({os.getuid()})")
    if st.st_mode & 0o022:
        raise PipelineError(f"cache folder {path}: writable by others (mode {oct(st.st_mode & 0o777)})")

