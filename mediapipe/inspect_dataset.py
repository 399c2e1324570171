"""Summarise (`inspect`) and check (`verify`) a converted dataset.

`summarize` reads only manifest.json and samples.jsonl.gz (both checked as the loader
checks them). `verify` reads everything: the manifest's fields and paths, the sample
records, each shard's size and sha256 against the manifest, every tar header (no links,
no unsafe names, nothing past the end of the file), the index against the headers, each
sample as the loader reads it, and a decode of every sample. Problems are returned, not
raised, each naming its file (shard) and offset.
"""

from __future__ import annotations

import io
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mediapipe import shard_format as sf
from mediapipe.errors import SourceError
from mediapipe.sample import kind_of_extension

SIDE_BINS = (128, 256, 512, 1024, 2048, 4096)
DURATION_BINS = (1.0, 5.0, 10.0, 30.0, 60.0, 300.0)


def _bin(value: float, edges: tuple[float, ...], unit: str = "") -> str:
    for edge in edges:
        if value <= edge:
            return f"<={edge:g}{unit}"
    return f">{edges[-1]:g}{unit}"


def summarize(root: str | os.PathLike) -> dict[str, Any]:
    """Counts, bytes, classes, and histograms of resolution, duration, fps and codecs."""
    manifest = sf.read_manifest(root)
    records = sf.read_samples(root, manifest["num_samples"]) if manifest["complete"] else []
    kinds, codecs, sides, durations, fps, labels, gops = (Counter() for _ in range(7))
    for r in records:
        kinds[r.get("kind", "?")] += 1
        codecs[f"{r.get('kind', '?')}:{r.get('codec', '?')}"] += 1
        if "width" in r and "height" in r:
            sides[_bin(max(r["width"], r["height"]), SIDE_BINS, "px")] += 1
        if "duration" in r:
            durations[_bin(r["duration"], DURATION_BINS, "s")] += 1
        if r.get("fps"):
            fps[f"{r['fps']:g}"] += 1
        if r.get("keyframes") and r.get("frames"):  # mean frames per key frame: the cost of a seek
            gops[f"{r['frames'] / len(r['keyframes']):.0f}"] += 1
        labels[r.get("label")] += 1
    classes = manifest.get("classes") or []
    per_class = {(classes[k] if isinstance(k, int) and 0 <= k < len(classes) else str(k)): v
                 for k, v in sorted(labels.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))}
    shards = manifest["shards"]
    return {
        "path": str(root), "complete": bool(manifest.get("complete")), "version": manifest["version"],
        "samples": len(records), "failures": manifest.get("num_failures", 0),
        "shards": len([e for e in shards if e["samples"]]),
        "bytes": sum(e["bytes"] for e in shards), "fields": manifest.get("fields", []),
        "kinds": dict(kinds), "codecs": dict(codecs), "classes": per_class,
        "max_side": dict(sides), "duration": dict(durations), "fps": dict(fps),
        "frames_per_keyframe": dict(gops),
        "total_duration_s": round(sum(r.get("duration", 0.0) for r in records), 3),
        "settings": manifest.get("plan", {}),
    }


def format_summary(s: dict[str, Any]) -> str:
    lines = [f"{s['path']}: {s['samples']} samples in {s['shards']} shards, {s['bytes'] / 1e6:.1f} MB"
             + ("" if s["complete"] else " (INCOMPLETE: conversion did not finish)"),
             f"  fields: {', '.join(s['fields'])}; failed inputs: {s['failures']}"]
    for title, key in (("kinds", "kinds"), ("codecs", "codecs"), ("classes", "classes"),
                       ("longest side", "max_side"), ("duration", "duration"), ("fps", "fps"),
                       ("frames per key frame", "frames_per_keyframe")):
        if s[key]:
            lines.append(f"  {title}: " + ", ".join(f"{k}: {v}" for k, v in s[key].items()))
    if s["total_duration_s"]:
        lines.append(f"  total duration: {s['total_duration_s']:.1f} s")
    return "\n".join(lines)


def decode_member(ext: str, data: bytes) -> None:
    """Decode one member fully (images with Pillow, JPEGs strictly with libjpeg-turbo too,
    video and audio with PyAV); raise on failure."""
    kind = kind_of_extension(ext)
    if ext in ("jpg", "jpeg"):
        from mediapipe.transcode import check_jpeg

        check_jpeg(data)  # strict, as the loader's libjpeg-turbo decoder is; Pillow lets damage through
    if kind == "image":
        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            im.load()
    elif kind in ("video", "audio"):
        import av

        with av.open(io.BytesIO(data)) as container:
            streams = container.streams.video if kind == "video" else container.streams.audio
            if not streams:
                raise ValueError(f"no {kind} stream")
            frames = sum(1 for _ in container.decode(streams[0]))
            if frames == 0:
                raise ValueError(f"no {kind} frames decoded")
    elif ext == "cls":
        int(data.decode())
    elif ext == "json":
        import json

        json.loads(data)


def verify(root: str | os.PathLike, *, decode: bool = True,
           on_shard: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Every problem found, as {"shard", "offset", "member", "reason"}; empty when all is well.

    Checks everything the loader reads, with the loader's own checks (`shard_format`),
    and more: the manifest's schema and its paths, the sample records, each shard's size
    and sha256, every tar header against the index, each sample read as the loader reads
    it, and a decode of every member. An empty list means `mp.loaders.shards(root)` opens.
    """
    from mediapipe.loaders.shards import ShardBlob, ShardFile, ShardSource

    root = Path(root)
    problems: list[dict[str, Any]] = []

    def problem(shard: str | None, reason: str, offset: int | None = None, member: str | None = None) -> None:
        problems.append({"shard": shard, "offset": offset, "member": member, "reason": reason})

    def refused(err: SourceError) -> None:  # named by its file (and line), as the loader names it
        problem(os.path.basename(err.path), err.reason, _offset_in(err.reason))

    try:
        manifest = sf.read_manifest(root)
    except SourceError as err:
        refused(err)
        return problems
    if not manifest["complete"]:
        problem(sf.MANIFEST, "the conversion did not finish (rerun convert --resume)")
    records = None
    if manifest["complete"]:  # (written when the conversion finishes)
        try:
            records = sf.read_samples(root, manifest["num_samples"])
        except SourceError as err:
            refused(err)
    errors: list[SourceError] = []
    files = sf.resolve_shards(root, manifest, errors)
    for err in errors:
        refused(err)
    indices: dict[int, list[list[sf.Member]]] = {}
    keys: list[str] = []
    for entry in manifest["shards"]:
        if entry["shard"] not in files:
            continue
        where = files[entry["shard"]]
        name = entry["name"]
        try:
            st = sf.stat_regular(where.tar, "shard")
        except SourceError as err:
            problem(name, err.reason)
            continue
        size, shard = st.st_size, ShardFile(where.tar, st.st_size, st.st_mtime_ns)
        if size != entry["bytes"]:
            problem(name, f"{size} bytes, the manifest says {entry['bytes']}")
        if sf.sha256_file(where.tar) != entry["sha256"]:
            problem(name, "sha256 differs from the manifest's")
        try:
            scanned = sf.group_members(sf.scan_tar(where.tar))
        except SourceError as err:
            problem(name, err.reason, _offset_in(err.reason))
            continue
        try:
            indexed = indices[entry["shard"]] = sf.read_index(where.idx, shard_size=size, samples=entry["samples"])
        except SourceError as err:
            refused(err)
            indexed = None
        if indexed is not None and indexed != scanned:
            problem(entry["idx"], "index does not match the tar's members")
        if len(scanned) != entry["samples"]:
            problem(name, f"{len(scanned)} samples, the manifest says {entry['samples']}")
        for members in indexed or scanned:
            keys.append(sf.split_member_name(members[0].name)[0])
            for m in members:
                try:  # as the loader reads it: the tar header in front of the data is checked too
                    data = ShardBlob(f"{name}:{m.name}", where.tar, m.offset, m.size, shard=shard).read()
                except SourceError as err:
                    problem(name, err.reason, m.offset, m.name)
                    continue
                if not decode:
                    continue
                try:
                    decode_member(m.extension, data)
                except Exception as err:  # noqa: BLE001  every decode failure is a reported problem
                    problem(name, f"cannot decode: {type(err).__name__}: {err}", m.offset, m.name)
        if on_shard is not None:
            on_shard(entry["shard"], len(scanned))
    if records is not None:
        try:
            with_samples = {e["shard"] for e in manifest["shards"] if e["samples"]}
            sf.match_records(records, indices, with_samples, where=str(root / sf.SAMPLES))
        except SourceError as err:
            refused(err)
    if len(set(keys)) != len(keys):
        dupes = [k for k, n in Counter(keys).items() if n > 1]
        problem("*", f"duplicate keys: {dupes[:5]}")
    if manifest["complete"] and manifest["num_samples"] != len(keys):
        problem(sf.MANIFEST, f"{len(keys)} samples in the shards, the manifest says {manifest['num_samples']}")
    if not problems and manifest["complete"]:
        try:  # nothing above may miss what the loader refuses
            ShardSource(root)
        except SourceError as err:
            refused(err)
    return problems


def _offset_in(reason: str) -> int | None:
    import re

    match = re.search(r"offset (\d+)", reason)
    return int(match.group(1)) if match else None
