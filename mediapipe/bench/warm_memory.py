"""Memory touched once before the cache-fill row, as the bench warms the page cache before any row.

A virtual machine's hypervisor backs a page of guest RAM the first time the guest writes it, and
the guest's later allocations reuse pages it has freed. An epoch cache's first epoch writes its
whole store into fresh pages (`/dev/shm` is RAM): on a VM whose RAM has not yet been used since it
booted, the fill row then times the hypervisor's first touch, and the same row on the same
machine is much faster the second time the bench runs. `touch_memory` writes and frees as many
bytes as the fill will store before the row's group starts (in the harness process, so no row's
start-up or first batch includes it), so the row measures the loader, whatever ran on the machine
before; `fill_bytes` is that size.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

PAGE = mmap.PAGESIZE
SLACK = 1.25  # entries hold a header, and images of the same mean size are not all the same size
CHANNELS = 3  # an RGB image's bytes per pixel: the cached images are uint8 RGB


def available_bytes(meminfo: str = "/proc/meminfo") -> int:
    """MemAvailable from ``meminfo``; 0 where it cannot be read (not Linux)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def fill_bytes(batches: int, batch_size: int, info: dict[str, Any]) -> int:
    """What a cache-fill row stores over ``batches`` batches of ``batch_size`` images of the
    dataset ``info`` (`datasets.describe`: its mean decoded megapixels); 0 when unknown."""
    megapixels = info.get("mean_megapixels") or 0.0
    return int(max(0, batches) * max(0, batch_size) * megapixels * 1e6 * CHANNELS * SLACK)


def touch_memory(nbytes: int, meminfo: str = "/proc/meminfo") -> int:
    """Write one byte in each page of ``nbytes`` of new anonymous memory, then free it; at most
    half of the memory available now (never a cause of swapping or of the OOM killer). Returns
    the bytes touched."""
    nbytes = min(int(nbytes), available_bytes(meminfo) // 2)
    nbytes -= nbytes % PAGE
    if nbytes <= 0:
        return 0
    with mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as block:
        pages = np.frombuffer(block, dtype=np.uint8)
        pages[::PAGE] = 1
        del pages  # the view must go before the mapping closes
    return nbytes
