"""What an epoch cache keeps of a plan: the image fields it stores, the deterministic sample ops
run before storing them, the names an entry holds, which source sample an entry is, and what
identifies a sample's media without reading it. The store itself is `mediapipe.stages.epoch_cache`."""

from __future__ import annotations

import hashlib
import os
import stat
from typing import TYPE_CHECKING, Any

from mediapipe.errors import PipelineError

if TYPE_CHECKING:
    from mediapipe.plan import PlacedOp, Plan
    from mediapipe.sample import Blob

__all__ = ["DETERMINISTIC_OPS", "base_source", "blob_stamp", "cached_fields", "entry_index", "stored_names",
           "stored_prefix"]

DETERMINISTIC_OPS = frozenset({"Resize", "CenterCrop", "Pad"})  # ops whose draw reads only the canvas size


def cached_fields(plan: Plan) -> list[str]:
    """The fields kept: those an image decoder decodes in the workers (a video's clip or an audio
    window is drawn per epoch: decoded as without a cache)."""
    if plan.device_fields:
        raise PipelineError(f"cache=: fields {sorted(plan.device_fields)} decode on the device, which keeps no "
                            "cache; decode them in the workers (device_decode=False) to cache them")
    targets = [n for n, t in plan.base_types.items() if n not in plan.decode and t.rows_are_objects]
    if targets:
        raise PipelineError(f"cache=: the source gives per-object fields {sorted(targets)}, which the cache does "
                            "not keep with their image; use the loader without cache=")
    fields = [n for n, spec in plan.decode.items() if spec.kind == "image" and spec.from_field is None]
    if not fields:
        raise PipelineError(f"cache=: no field is decoded by an image decoder (fields: {sorted(plan.decode)}); the "
                            "cache keeps decoded images only")
    return fields


def stored_prefix(plan: Plan) -> list[PlacedOp]:
    """The worker sample ops run before storing: the leading ones that are deterministic (by class,
    `DETERMINISTIC_OPS`) and read and write only cached fields; the first other op ends it."""
    kept = set(cached_fields(plan))
    prefix = []
    for p in plan.worker_sample_ops:
        if type(p.op).__name__ not in DETERMINISTIC_OPS or p.op.draws_on() or not set(p.op.reads()) <= kept:
            break
        prefix.append(p)
        kept |= set(p.op.writes())
    return prefix


def stored_names(plan: Plan, fields: list[str], prefix: list[PlacedOp]) -> tuple[str, ...]:
    """The names an entry holds: the cached fields, their side fields, what the stored ops write."""
    names = list(fields)
    for name in fields:
        names += [f"{name}_{side}" for side in plan.decode[name].side_fields]
    for p in prefix:
        names += [n for n in p.op.writes() if n not in names]
    return tuple(names)


def base_source(plan: Plan) -> Any:
    """The source whose samples are cached: a repeated-augmentation view's inner one (its repeats
    are one sample)."""
    source = plan.source
    return source.inner if getattr(source, "copies", None) else source


def entry_index(plan: Plan, index: int) -> int:
    """The cached sample of draw index ``index`` (a repeat ``c * N + i`` is sample i)."""
    source = base_source(plan)
    return index % len(source) if source is not plan.source else index


def blob_stamp(blob: Blob) -> list[Any] | None:
    """What identifies a blob's bytes without reading them: its file's path, range, size, times and
    inode, or a digest of in-memory bytes; None when its file cannot be looked at (then not cached)."""
    if blob.data is not None:
        return ["bytes", len(blob.data), hashlib.blake2b(blob.data, digest_size=16).hexdigest()]
    if blob.path is None:
        return None
    try:
        st = os.stat(blob.path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return ["file", os.path.abspath(blob.path), blob.offset, blob.size, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns, st.st_ino, st.st_dev]
