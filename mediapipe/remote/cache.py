"""`ShardCache`: whole shards on local disk, bounded in bytes, least recently used evicted first;
a shard enters once checked, under a name that includes its version, and is read through descriptors."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import threading
import time
from pathlib import Path
from typing import Any

from mediapipe.remote.retry import CHUNK
from mediapipe.remote.stores import RemoteStore
from mediapipe.remote.versions import ObjectVersion

_ENTRY = re.compile(r"[0-9a-f]{32}")  # a cached shard is "<key>.tar"; "<key>.partial" while it downloads
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


class ShardCache:
    """Whole shards on local disk, at most ``max_bytes`` of them (and the downloads in
    flight), least recently used evicted first. A shard enters under a name made of its URL and digest, once downloaded whole and
    checked (size, sha256); processes and datasets share the folder (a download holds the
    shard's lock and ends in an atomic rename; the others wait for it). Readers get a
    descriptor (`open`), so a shard evicted meanwhile stays readable to them. A shard larger
    than the whole cache is not cached (its samples are read by range)."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"cache_bytes={max_bytes}: expected > 0")
        self.directory, self.max_bytes = Path(directory), int(max_bytes)

    def file_for(self, url: str, size: int, sha256: str | None, version: ObjectVersion | None = None) -> Path:
        """Where the copy of this shard lives: a name made of its URL, size, digest and the
        validators its store gave (a shard rewritten on the server is another entry)."""
        tag = version.tag() if version is not None else ""
        text = f"{url}\0{size}\0{sha256}" + (f"\0{tag}" if tag else "")  # (no tag: the name it always had)
        key = hashlib.sha256(text.encode()).hexdigest()[:32]
        return self.directory / f"{key}.tar"

    def fits(self, size: int) -> bool:
        return size <= self.max_bytes

    def open(self, store: RemoteStore, name: str, size: int, sha256: str | None, *, verify: bool = False,
             version: ObjectVersion | None = None) -> int:
        """A descriptor on the cached copy of shard ``name`` (downloaded now when absent, of
        another size, or, with ``verify``, of another sha256: checked once per process),
        marked as just used; ``version``: the object the store had when the dataset was
        opened (a download from another is refused). The caller closes it."""
        path = self.file_for(store.child(name), size, sha256, version)
        check = sha256 if verify else None
        fd = _open_entry(path, size, check)
        if fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            with _locked(path.with_suffix(".lock")):
                fd = _open_entry(path, size, check)  # another process downloaded it meanwhile
                if fd is None:
                    fd = self._download(store, name, path, size, sha256, version)
        _touch(fd)
        return fd

    def get(self, store: RemoteStore, name: str, size: int, sha256: str | None,
            version: ObjectVersion | None = None) -> Path:
        """The path of shard ``name``'s cached copy (see `open`); it may be evicted at any time."""
        os.close(self.open(store, name, size, sha256, version=version))
        return self.file_for(store.child(name), size, sha256, version)

    def _download(self, store: RemoteStore, name: str, path: Path, size: int, sha256: str | None,
                  version: ObjectVersion | None) -> int:
        """Download under the shard's lock: into "<key>.partial", opened, then renamed into place."""
        self.evict(keep=size)
        partial = path.with_suffix(".partial")
        try:
            store.download(name, partial, size, sha256, version)
            fd = os.open(partial, _OPEN_FLAGS)
            try:
                os.replace(partial, path)
                _touch(fd)
                self.evict()  # again: another process may have added a shard while this one downloaded
            except BaseException:
                os.close(fd)
                raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
        if sha256 is not None:
            _VERIFIED.add(_identity(os.fstat(fd)))
        return fd

    def discard(self, path: Path, fd: int) -> None:
        """Remove the cached copy ``fd`` reads (found damaged), unless another has replaced it."""
        with contextlib.suppress(OSError):
            st = os.fstat(fd)
            _VERIFIED.discard(_identity(st))
            if _identity(path.stat()) == _identity(st):
                path.unlink()

    def evict(self, keep: int = 0) -> None:
        """Remove the least recently used shards until ``keep`` more bytes fit in the bound
        (a shard being read stays readable through its descriptor), and the partial downloads
        no process is writing any more (one killed mid-download)."""
        entries = []
        for p in self.directory.iterdir():
            if not _ENTRY.fullmatch(p.stem):
                continue
            if p.suffix == ".partial":
                _remove_abandoned(p)
            elif p.suffix == ".tar":
                with contextlib.suppress(OSError):
                    st = p.stat()
                    entries.append((st.st_atime_ns, st.st_size, p))
        total = sum(size for _, size, _ in entries)
        for _, size, p in sorted(entries):
            if total + keep <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                p.unlink()
                total -= size


class _Verified:
    """The cached shards (device, inode, size, modification time) whose sha256 this process has checked."""

    def __init__(self) -> None:
        self.lock, self.seen = threading.Lock(), set()

    def add(self, key: tuple[int, int, int, int]) -> None:
        self.seen.add(key)

    def discard(self, key: tuple[int, int, int, int]) -> None:
        self.seen.discard(key)

    def check(self, fd: int, st: os.stat_result, sha256: str) -> bool:
        key = _identity(st)
        if key in self.seen:
            return True
        with self.lock:  # one thread hashes a shard; the others wait for its verdict
            if key not in self.seen:
                digest, offset = hashlib.sha256(), 0
                while block := os.pread(fd, CHUNK, offset):
                    digest.update(block)
                    offset += len(block)
                if digest.hexdigest() != sha256:
                    return False
                self.seen.add(key)
        return True


_VERIFIED = _Verified()


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """A cached file's identity: its modification time is when it entered the cache (use moves
    only its access time), so a later file on a reused inode is another."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _open_entry(path: Path, size: int, sha256: str | None) -> int | None:
    """A descriptor on a cached shard, or None when it is absent, not a regular file, of
    another size or (``sha256`` given) of another digest: then it is downloaded again."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size == size and (sha256 is None or _VERIFIED.check(fd, st, sha256)):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _touch(fd: int) -> None:
    """Mark a cached shard as just used: its access time, set here (reads may not move it),
    is the eviction order; its modification time stays when it entered the cache."""
    with contextlib.suppress(OSError):
        os.utime(fd, ns=(time.time_ns(), os.fstat(fd).st_mtime_ns))


def _remove_abandoned(partial: Path) -> None:
    """Remove a partial download whose shard's lock nobody holds (its process is gone)."""
    try:
        import fcntl
    except ImportError:
        return
    try:
        with open(partial.with_suffix(".lock"), "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # being downloaded now
            try:
                partial.unlink()
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
    except OSError:
        pass


@contextlib.contextmanager
def _locked(path: Path) -> Any:
    try:
        import fcntl
    except ImportError:  # no advisory locks: two processes may both download (the rename is atomic)
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
