"""Throughput measurements for the bench and the tests: a conversion's, a source's reads (cold or warm
page cache), and the per-file page-cache eviction they use."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.dataset.convert import convert
from mediapipe.dataset.transcode import TranscodeOptions


def measure_conversion(src: str | os.PathLike, workdir: str | os.PathLike, workers: int = 1,
                       reencode: bool = False, **kwargs: Any) -> dict[str, Any]:
    """Convert ``src`` into a fresh folder under ``workdir`` and report the throughput.

    ``reencode=False`` copies what can be copied (JPEGs that fit, video and audio streams);
    ``reencode=True`` re-encodes every input (JPEG, AV1, FLAC). Returns files, MB in/out,
    seconds, files_per_s and mb_per_s (input megabytes, 10^6 bytes, per second).
    """
    if reencode:
        options = TranscodeOptions(reencode=True)
    else:
        options = TranscodeOptions(video_codec="copy", audio_codec="copy")
    options = replace(options, **kwargs.pop("options", {}))
    Path(workdir).mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=f"convert-w{workers}-{'reencode' if reencode else 'copy'}-", dir=workdir))
    result = convert(src, out, workers=workers, options=options, **kwargs)
    seconds = max(result.seconds, 1e-9)
    return {"workers": workers, "reencode": reencode, "files": result.num_inputs, "failed": len(result.failures),
            "mb_in": result.bytes_in / 1e6, "mb_out": result.bytes_out / 1e6, "seconds": result.seconds,
            "files_per_s": result.num_inputs / seconds, "mb_per_s": result.bytes_in / 1e6 / seconds,
            "out": str(out)}


def evict_from_page_cache(paths: Iterable[str | os.PathLike]) -> None:
    """Ask the kernel to drop these files' cached pages (POSIX_FADV_DONTNEED): a per-file
    cold cache that needs no root and leaves other processes' files alone."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except (OSError, AttributeError):
            pass
        finally:
            os.close(fd)


def measure_read(source: Any, *, cold: bool = False, decode: Any = None, seed: int = 0,
                 limit: int | None = None) -> dict[str, Any]:
    """Read every sample of ``source`` once in a shuffled order (as an epoch does): bytes only,
    or through a `Pipeline` with ``decode`` (e.g. ``{"image": mp.decoders.image()}``).
    ``cold=True`` evicts the source's files from the page cache first. Returns samples/s and
    MB/s (of bytes read, or of decoded uint8 elements when decoding)."""
    order = np.random.default_rng(seed).permutation(len(source))[:limit]
    if cold:
        files = {blob.path for i in range(len(source)) for blob in source.ref(i).blobs.values() if blob.path}
        evict_from_page_cache(files)
    total = 0
    start = time.perf_counter()
    if decode is None:
        for i in order:
            for blob in source.ref(int(i)).blobs.values():
                total += len(blob.read())
    else:
        from mediapipe.pipeline import Pipeline

        dataset = Pipeline(source=source, decode=decode, batch_size=1, device="cpu").dataset()
        for i in order:
            sample = dataset[int(i)]
            total += sum(int(v.numel()) for v in sample.values() if hasattr(v, "numel"))
    seconds = max(time.perf_counter() - start, 1e-9)
    return {"samples": len(order), "seconds": seconds, "samples_per_s": len(order) / seconds,
            "mb_per_s": total / 1e6 / seconds, "cold": cold, "decoded": decode is not None}
