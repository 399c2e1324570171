"""A worker process's cache of demuxed video files: each file's packets (bytes and timestamps) and
its decoder's parameters, so the next clip of a file already seen (in this epoch or a later
one) does no open, probe or demux: it replays the packets into a new decoder. Decoders are
not kept: their frame pools would cost far more memory than the packets.

Bounded in bytes (the packets held) and in files; least recently used out first. Keyed by the
file's identity on disk (`video_index.file_key`: path, offset, device, inode, size, modification
and status-change times), so a file changed or replaced on disk is read again, never served from
the cache. A packet counts its payload and `PACKET_OVERHEAD`: a file of many tiny packets is
bounded by what it really holds.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

MAX_BYTES = 64 << 20  # packets held per decoder (shared by a process's thread workers)
MAX_FILES = 256
PACKET_OVERHEAD = 192  # bytes a kept packet costs beyond its payload: its tuple, bytes and int objects


class Source(Protocol):
    nbytes: int

    def release(self) -> None: ...

    def close(self) -> None: ...


class SourceCache:
    """Least-recently-used ``key -> source`` within ``max_bytes`` of packets and ``max_files``
    entries, shared by threads (a lock around each call). A source is taken out while a clip
    decodes it and put back after a clean decode, so one source never serves two clips at once
    and a failed decode never returns one. At most one kept source holds a live decoder (the
    index pass's, `put` with ``live``): a second releases the first while it waits in the cache."""

    def __init__(self, max_bytes: int | None = None, max_files: int | None = None) -> None:
        self.max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        self.max_files = MAX_FILES if max_files is None else max_files
        self.entries: OrderedDict[tuple, Source] = OrderedDict()
        self.nbytes = 0
        self.live: tuple | None = None  # the key of the kept source that still holds its decoder
        self.lock = threading.Lock()

    def take(self, key: tuple) -> Source | None:
        """The cached source of ``key``, removed from the cache (None when absent)."""
        with self.lock:
            return self._take(key)

    def _take(self, key: tuple) -> Source | None:
        source = self.entries.pop(key, None)
        if source is not None:
            self.nbytes -= source.nbytes
            if key == self.live:
                self.live = None
        return source

    def put(self, key: tuple, source: Source, live: bool = False) -> None:
        """Keep ``source`` for ``key`` (closing a source it replaces and the least recently used
        ones beyond the bounds); one larger than the whole budget is closed at once. ``live``:
        it holds a decoder, and the one kept before it that still does is released."""
        with self.lock:
            old = self._take(key)
            if old is not None and old is not source:
                old.close()
            if source.nbytes > self.max_bytes:
                source.close()
                return
            if live:
                if self.live is not None and self.live in self.entries:
                    self.entries[self.live].release()  # waiting in the cache: no thread decodes it
                self.live = key
            self.entries[key] = source
            self.nbytes += source.nbytes
            while self.nbytes > self.max_bytes or len(self.entries) > self.max_files:
                evicted_key, evicted = self.entries.popitem(last=False)
                self.nbytes -= evicted.nbytes
                if evicted_key == self.live:
                    self.live = None
                evicted.close()

    def clear(self) -> None:
        with self.lock:
            while self.entries:
                self.entries.popitem()[1].close()
            self.nbytes, self.live = 0, None
