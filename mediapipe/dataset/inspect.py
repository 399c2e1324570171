"""Summarise (`inspect`) and check (`verify`) a converted dataset.

`summarize` reads only manifest.json and samples.jsonl.gz (both checked as the loader
checks them). `verify` reads everything: the manifest's fields and paths, the sample
records, each shard's size and sha256 against the manifest, every tar header (no links,
no unsafe names, nothing past the end of the file), the index against the headers, each
sample as the loader reads it, and a decode of every sample. Problems are returned, not
raised, each naming its file (shard) and offset.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mediapipe import reasons
from mediapipe.dataset.digests import read_digests, sha256_file
from mediapipe.dataset.index import read_index
from mediapipe.dataset.layout import BLOCK, MANIFEST, SAMPLES, split_member_name
from mediapipe.dataset.manifest import check_sample_count, read_manifest, resolve_shards
from mediapipe.dataset.safe_io import open_regular, stat_regular
from mediapipe.dataset.sample_records import match_records, read_samples
from mediapipe.dataset.tar import Member, group_members, scan_tar
from mediapipe.dataset.transcode import check_jpeg
from mediapipe.decoders.streams import main_stream
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
    manifest = read_manifest(root)
    records = []
    if manifest["complete"]:
        check_sample_count(root, manifest)
        records = read_samples(root, manifest["num_samples"])
    kinds, codecs, sides, durations, fps, labels, gops = (Counter() for _ in range(7))
    single_keyframe = 0
    for r in records:
        kinds[r.get("kind", "?")] += 1
        codecs[f"{r.get('kind', '?')}:{r.get('codec', '?')}"] += 1
        if "width" in r and "height" in r:
            sides[_bin(max(r["width"], r["height"]), SIDE_BINS, "px")] += 1
        if "duration" in r:
            durations[_bin(r["duration"], DURATION_BINS, "s")] += 1
        if r.get("fps"):
            fps[f"{r['fps']:g}"] += 1
        if r.get("frames") and "keyframes" in r:
            lengths = gop_lengths(r["keyframes"], r["frames"])
            gops.update(lengths)
            single_keyframe += not lengths
        labels[r.get("label")] += 1
    classes = manifest.get("classes") or []
    unlabelled = labels.pop(None, 0)
    per_class = {(classes[k] if 0 <= k < len(classes) else str(k)): v for k, v in sorted(labels.items())}
    shards = manifest["shards"]
    return {
        "path": str(root), "complete": bool(manifest.get("complete")), "version": manifest["version"],
        "samples": len(records), "failures": manifest.get("num_failures", 0),
        "shards": len([e for e in shards if e["samples"]]),
        "bytes": sum(e["bytes"] for e in shards), "fields": manifest.get("fields", []),
        "kinds": dict(kinds), "codecs": dict(codecs), "classes": per_class, "unlabelled": unlabelled,
        "max_side": _ascending(sides), "duration": _ascending(durations), "fps": _ascending(fps),
        "gop": {str(n): gops[n] for n in sorted(gops)}, "single_keyframe_videos": single_keyframe,
        "total_duration_s": round(sum(r.get("duration", 0.0) for r in records), 3),
        "settings": manifest.get("plan", {}),
    }


def _ascending(histogram: Counter) -> dict[str, int]:
    """A histogram keyed by numbers or bins ("<=512px", ">4096px") in ascending order."""
    def order(label: str) -> tuple[bool, float]:
        return label.startswith(">"), float(label.lstrip("<=>").rstrip("pxs"))

    return {k: histogram[k] for k in sorted(histogram, key=order)}


def gop_lengths(keyframes: list[int], frames: int) -> list[int]:
    """The length in frames of each whole GOP: from one key frame to the next. The last GOP,
    cut short by the end of the file, is no GOP length: a file with one key frame has none."""
    starts = sorted({k for k in keyframes if 0 <= k < frames})
    return [b - a for a, b in zip(starts, starts[1:])]


def _megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def _counts(histogram: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in histogram.items())


def _gop_line(s: dict[str, Any]) -> str | None:
    """"GOP: 16 frames (every video)", or the histogram of GOP lengths and the videos with one key frame."""
    gop, single = s["gop"], s["single_keyframe_videos"]
    one = f"{single} video{'s' if single != 1 else ''} with a single key frame" if single else ""
    if not gop:
        return f"  GOP: none ({'every video has' if single > 1 else 'the video has'} a single key frame)" \
            if single else None
    if len(gop) == 1:
        (length,) = gop
        return f"  GOP: {length} frames ({f'every video but {one}' if single else 'every video'})"
    return f"  GOP lengths in frames (whole GOPs): {_counts(gop)}" + (f"; {one}" if single else "")


def format_summary(s: dict[str, Any]) -> str:
    shards = f"{s['shards']} shard" + ("s" if s["shards"] != 1 else "")
    lines = [f"{s['path']}: {s['samples']} samples in {shards}, {_megabytes(s['bytes'])}"
             + ("" if s["complete"] else " (INCOMPLETE: conversion did not finish)"),
             f"  fields: {', '.join(s['fields'])}; failed inputs: {s['failures']}"]
    for title, key in (("kinds", "kinds"), ("codecs", "codecs"), ("classes", "classes")):
        if s[key]:
            lines.append(f"  {title}: {_counts(s[key])}" + (f", unlabelled: {s['unlabelled']}" if key == "classes"
                                                             and s["unlabelled"] else ""))
    if s["samples"] and not s["classes"]:
        lines.append("  classes: none (no class folders or labels)")
    for title, key in (("longest side", "max_side"), ("duration", "duration"), ("fps", "fps")):
        if s[key]:
            lines.append(f"  {title}: {_counts(s[key])}")
    gop = _gop_line(s)
    if gop:
        lines.append(gop)
    if s["total_duration_s"]:
        lines.append(f"  total duration: {s['total_duration_s']:.1f} s")
    return "\n".join(lines)


def decode_member(ext: str, data: bytes) -> None:
    """Decode one member fully (images with Pillow, JPEGs strictly with libjpeg-turbo too,
    video and audio with PyAV, a label and JSON parsed); raise on failure."""
    kind = kind_of_extension(ext)
    if ext in ("jpg", "jpeg"):
        check_jpeg(data)  # strict, as the loader's libjpeg-turbo decoder is; Pillow lets damage through
    check = MEMBER_CHECKS.get(kind) or MEMBER_CHECKS.get(ext)
    if check is not None:
        check(data, kind)


def _load_image(data: bytes, kind: str) -> None:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        im.load()


def _decode_stream(data: bytes, kind: str) -> None:
    """Every frame of the file's main stream of ``kind`` ("video" or "audio")."""
    import av

    with av.open(io.BytesIO(data)) as container:
        streams = getattr(container.streams, kind)
        if not streams:
            raise ValueError(f"no {kind} stream")
        frames = sum(1 for _ in container.decode(main_stream(streams)))
        if frames == 0:
            raise ValueError(f"no {kind} frames decoded")


# media kind (or extension, for the members that are not media) -> how `decode_member` checks it
MEMBER_CHECKS: dict[str, Callable[[bytes, str], Any]] = {
    "image": _load_image,
    "video": _decode_stream,
    "audio": _decode_stream,
    "cls": lambda data, kind: int(data.decode()),
    "json": lambda data, kind: json.loads(data),
}


def verify(root: str | os.PathLike, *, decode: bool = True,
           on_shard: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Every problem found, as {"shard", "offset", "member", "reason"}; empty when all is well.

    Checks everything the loader reads, with the loader's own checks (`manifest`, `index`, `tar`),
    and more: the manifest's schema and its paths, the sample records, each shard's size
    and sha256, every tar header against the index, each sample read as the loader reads
    it, and a decode of every member. An empty list means `mp.loaders.shards(root)` opens.
    """
    from mediapipe.loaders.sources.shards import ShardBlob, ShardFile, ShardSource

    root = Path(root)
    problems: list[dict[str, Any]] = []

    def problem(shard: str | None, reason: str, offset: int | None = None, member: str | None = None) -> None:
        problems.append({"shard": shard, "offset": offset, "member": member, "reason": reason})

    def refused(err: SourceError) -> None:  # named by its file (and line), as the loader names it
        problem(os.path.basename(err.path), err.reason, _offset_in(err.reason))

    try:
        manifest = read_manifest(root)
    except SourceError as err:
        refused(err)
        return problems
    if not manifest["complete"]:
        problem(MANIFEST, "the conversion did not finish (rerun convert --resume)")
    records = None
    if manifest["complete"]:  # (written when the conversion finishes)
        try:
            check_sample_count(root, manifest)
            records = read_samples(root, manifest["num_samples"])
        except SourceError as err:
            refused(err)
    errors: list[SourceError] = []
    files = resolve_shards(root, manifest, errors)
    for err in errors:
        refused(err)
    indices: dict[int, list[list[Member]]] = {}
    keys: list[str] = []
    for entry in manifest["shards"]:
        if entry["shard"] not in files:
            continue
        where = files[entry["shard"]]
        name = entry["name"]
        try:
            st = stat_regular(where.tar, "shard")
        except SourceError as err:
            problem(name, err.reason)
            continue
        size, shard = st.st_size, ShardFile(where.tar, st.st_size, st.st_mtime_ns)
        if size != entry["bytes"]:
            problem(name, f"{size} bytes, the manifest says {entry['bytes']}")
        damaged = sha256_file(where.tar) != entry["sha256"]
        if damaged:
            problem(name, "sha256 differs from the manifest's")
        shard_problem = len(problems) - 1
        try:
            scanned = group_members(scan_tar(where.tar))
        except SourceError as err:
            problem(name, err.reason, _offset_in(err.reason))
            continue
        try:
            indexed = indices[entry["shard"]] = read_index(where.idx, shard_size=size, samples=entry["samples"])
        except SourceError as err:
            refused(err)
            indexed = None
        if indexed is not None and indexed != scanned:
            problem(entry["idx"], "index does not match the tar's members")
        if len(scanned) != entry["samples"]:
            problem(name, f"{len(scanned)} samples, the manifest says {entry['samples']}")
        digests = None
        if where.digests is not None:
            try:  # checked whole every time; each member is hashed only when the shard's sha256 differs
                digests = read_digests(where.digests, [m for sample in scanned for m in sample],
                                          where=entry["digests"])
            except SourceError as err:
                refused(err)
        located = len(problems)
        for members in indexed or scanned:
            keys.append(split_member_name(members[0].name)[0])
            for m in members:
                try:  # as the loader reads it: the tar header in front of the data is checked too
                    data = ShardBlob(f"{name}:{m.name}", where.tar, m.offset, m.size, shard=shard).read()
                except SourceError as err:
                    problem(name, err.reason, m.offset, m.name)
                    continue
                if damaged and digests is not None and hashlib.sha256(data).hexdigest() != digests.get(m.name):
                    problem(name, f"damaged: the member's {m.size} bytes differ from the sha256 written at "
                            f"conversion ({entry['digests']})", m.offset, m.name)
                if not decode:
                    continue
                try:
                    decode_member(m.extension, data)
                except Exception as err:  # noqa: BLE001  every decode failure is a reported problem
                    problem(name, f"cannot decode: {type(err).__name__}: {reasons.reason(err)}", m.offset, m.name)
        if damaged:
            try:
                stray = _stray_bytes(where.tar, [m for sample in scanned for m in sample], size)
            except SourceError as err:  # replaced while it was verified
                problem(name, err.reason)
                stray = []
            for offset, member in stray:
                what = f"the padding after {member}" if member else "the end-of-archive blocks"
                problem(name, f"damaged: {what} should be zeros (first non-zero byte at offset {offset})", offset)
            if len(problems) == located:
                problems[shard_problem]["reason"] += _unlocated(digests is not None, decode)
        if on_shard is not None:
            on_shard(entry["shard"], len(scanned))
    if records is not None:
        try:
            with_samples = {e["shard"] for e in manifest["shards"] if e["samples"]}
            match_records(records, indices, with_samples, where=str(root / SAMPLES))
        except SourceError as err:
            refused(err)
    if len(set(keys)) != len(keys):
        dupes = [k for k, n in Counter(keys).items() if n > 1]
        problem("*", f"duplicate keys: {dupes[:5]}")
    if manifest["complete"] and manifest["num_samples"] != len(keys):
        problem(MANIFEST, f"{len(keys)} samples in the shards, the manifest says {manifest['num_samples']}")
    if not problems and manifest["complete"]:
        try:  # nothing above may miss what the loader refuses
            ShardSource(root)
        except SourceError as err:
            refused(err)
    return problems


def _stray_bytes(path: str, members: list[Member], size: int) -> list[tuple[int, str | None]]:
    """(offset, member) of the first non-zero byte of each stretch that convert writes as zeros:
    the padding after each member's data (member None: the end-of-archive blocks)."""
    found = []
    fd, _ = open_regular(path, "shard")  # (no link followed, nothing but a regular file)
    try:
        stretches = [(m.offset + m.size, -(-(m.offset + m.size) // BLOCK) * BLOCK, m.name) for m in members]
        end = stretches[-1][1] if stretches else 0
        stretches.append((end, size, None))
        for start, stop, name in stretches:
            data = os.pread(fd, stop - start, start) if stop > start else b""
            stripped = data.lstrip(b"\0")
            if stripped:
                found.append((start + len(data) - len(stripped), name))
    finally:
        os.close(fd)
    return found


def _unlocated(digests: bool, decoded: bool) -> str:
    """Why a shard whose sha256 differs has no damaged member in the report."""
    if digests:
        return ("; yet every member matches its sha256 and every tar header and padding is intact: the "
                "manifest's sha256 is the likely damage")
    checks = "decodes, tar header and padding" if decoded else "tar header and padding (decoding was off)"
    return (f"; this dataset has no member digests (converted before they were written), and every member's "
            f"{checks} look intact, so the damaged member is not known")


def _offset_in(reason: str) -> int | None:
    import re

    match = re.search(r"offset (\d+)", reason)
    return int(match.group(1)) if match else None
