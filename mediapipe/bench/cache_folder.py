"""The folder of one epoch cache row of the bench (`mediapipe.bench.images.open_mediapipe_cached`):
made in RAM (/dev/shm) where there is one, locked while the row lives, removed when it ends,
however it ends (a detached reaper waits for the lock), and never another's folder."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from mediapipe.loaders.parent_watch import process_alive
from mediapipe.stages.epoch_cache import SHM

CACHE_PREFIX = "mediapipe-bench-cache-"  # + pid-random: a cache row's folder (bench_cache_folder)

_HELD: dict[Path, int] = {}  # a cache row's folder -> this process's descriptor holding its lock
_PID = re.compile(r"[0-9]+")
# Run detached (its own session, not a child of the row's process): waits for the folder's lock, which
# the row's process and its forked workers hold until they are gone however they end, then removes it.
_REAPER = """import fcntl, os, shutil, stat, sys
path, dev, ino = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if os.fork():
    os._exit(0)
os.setsid()
fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) == (dev, ino):
    fcntl.flock(fd, fcntl.LOCK_EX)
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == (dev, ino):
        shutil.rmtree(path, ignore_errors=True)
"""


def bench_cache_folder() -> Path:
    """A new folder for one row's epoch cache, under /dev/shm where it exists (else the temporary
    folder), named by this process and locked (flock) while it or its forked workers live; a detached
    reaper removes it once they are gone, SIGKILLed too. Dead rows' folders are removed first
    (`remove_dead_cache_folders`)."""
    root = Path(SHM) if os.path.isdir(SHM) else Path(tempfile.gettempdir())
    remove_dead_cache_folders(root)
    made = Path(tempfile.mkdtemp(prefix=f".{CACHE_PREFIX}", dir=root))  # not a name the sweep matches
    fd = os.open(made, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        folder = root / f"{CACHE_PREFIX}{os.getpid()}-{made.name[len(CACHE_PREFIX) + 1:]}"
        os.rename(made, folder)  # locked before any sweep can see it
        st = os.fstat(fd)
        try:  # best effort: without it, the next cache row's sweep removes the folder of a killed row
            subprocess.run([sys.executable, "-I", "-S", "-c", _REAPER, str(folder), str(st.st_dev), str(st.st_ino)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True, cwd="/", check=False, timeout=60)
        except (OSError, subprocess.SubprocessError):
            pass
    except BaseException:
        os.close(fd)
        shutil.rmtree(made, ignore_errors=True)
        raise
    _HELD[folder] = fd
    return folder


def close_cache_folder(folder: Path) -> None:
    """Remove a folder `bench_cache_folder` made and let go of its lock."""
    shutil.rmtree(folder, ignore_errors=True)
    fd = _HELD.pop(folder, None)
    if fd is not None:
        os.close(fd)


def remove_dead_cache_folders(root: Path) -> None:
    """Remove the cache rows' folders under ``root`` whose rows are gone: a folder of this user's
    (never a link, never another user's), named by a pid that is not alive, whose lock no process
    holds (a live row in another pid namespace sharing /dev/shm holds its folder's)."""
    for old in root.glob(f"{CACHE_PREFIX}*"):
        pid = old.name[len(CACHE_PREFIX):].split("-")[0]
        if not _PID.fullmatch(pid) or process_alive(int(pid)):
            continue
        try:
            fd = os.open(old, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # a link, a file, gone
            continue
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(old, ignore_errors=True)
        except OSError:  # locked: its row lives
            pass
        finally:
            os.close(fd)
