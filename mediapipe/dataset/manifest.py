"""A dataset's manifest: read and type-checked, its shards' files resolved inside the dataset folder,
its sample count checked against the shards on disk, written atomically."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mediapipe.dataset.layout import BLOCK, FORMAT_NAME, FORMAT_VERSION, MANIFEST, MAX_MANIFEST_BYTES
from mediapipe.dataset.safe_io import (
    _show,
    dataset_path,
    json_bytes,
    parse_json,
    read_bounded,
    stat_regular,
    write_atomic,
)
from mediapipe.dataset.schema import MANIFEST_SCHEMA, SHARD_SCHEMA, check_fields
from mediapipe.errors import SourceError


def read_manifest(root: str | os.PathLike) -> dict[str, Any]:
    """The manifest, refused unless every field has its type, the format and version are
    known, shard numbers are distinct and a complete manifest's counts agree."""
    path = Path(root) / MANIFEST
    where = str(path)
    if not os.path.lexists(path):
        raise SourceError(where, "no manifest.json: not a converted dataset")
    real = dataset_path(os.path.realpath(root), MANIFEST, where=where, field="manifest.json")
    return parse_manifest(read_bounded(real, MAX_MANIFEST_BYTES, "manifest"), where)


def parse_manifest(data: bytes, where: str) -> dict[str, Any]:
    """`read_manifest`'s checks on a manifest's bytes (read from a file or a remote store)."""
    manifest = parse_json(data, where)
    check_fields(manifest, MANIFEST_SCHEMA, where=where, what="the manifest", field=str)
    if manifest["format"] != FORMAT_NAME:
        raise SourceError(where, f"format {_show.repr(manifest['format'])}, expected {FORMAT_NAME!r}")
    if manifest["version"] > FORMAT_VERSION:
        raise SourceError(where, f"format version {manifest['version']} is newer than {FORMAT_VERSION}")
    if manifest["complete"] and "num_samples" not in manifest:
        raise SourceError(where, "num_samples: missing from a complete manifest")
    seen: dict[int, int] = {}
    for i, entry in enumerate(manifest["shards"]):
        prefix = f"shards[{i}]."
        check_fields(entry, SHARD_SCHEMA, where=where, what=f"shards[{i}]", field=lambda name, p=prefix: p + name)
        if entry["shard"] in seen:
            raise SourceError(where, f"{prefix}shard: shard {entry['shard']} is listed twice "
                              f"(also shards[{seen[entry['shard']]}])")
        seen[entry["shard"]] = i
        for name in ("name", "idx", "sha256"):
            if (entry[name] is None) == (entry["samples"] > 0):
                raise SourceError(where, f"{prefix}{name}: {_show.repr(entry[name])} for a shard of "
                                  f"{entry['samples']} samples")
        if entry["samples"] * BLOCK > entry["bytes"]:  # each sample takes a 512-byte header at least
            raise SourceError(where, f"{prefix}samples: {entry['samples']} samples cannot fit in "
                              f"{entry['bytes']} bytes")
    if manifest["complete"]:
        held = sum(e["samples"] for e in manifest["shards"])
        if held != manifest["num_samples"]:
            raise SourceError(where, f"num_samples: {manifest['num_samples']}, but the shards hold {held}")
    return manifest


@dataclass(frozen=True)
class ShardFiles:
    """Where one shard's tar, index and member digests are: real paths inside the dataset folder."""

    shard: int
    name: str  # as the manifest writes it, for messages
    tar: str
    idx: str
    digests: str | None = None  # None: a dataset converted before member digests were written


def resolve_shards(root: str | os.PathLike, manifest: dict[str, Any],
                   problems: list[SourceError] | None = None) -> dict[int, ShardFiles]:
    """The files of every shard that holds samples, each confined to the dataset folder and
    none shared by two entries. A refused entry raises, or with ``problems`` is appended
    there and left out."""
    folder = os.path.realpath(root)
    where = str(Path(root) / MANIFEST)
    found: dict[int, ShardFiles] = {}
    owners: dict[str, str] = {}
    for i, entry in enumerate(manifest["shards"]):
        if not entry["samples"]:
            continue
        try:
            real = {"digests": None}
            for field in ("name", "idx", "digests"):
                if field == "digests" and entry.get(field) is None:
                    continue
                label = f"shards[{i}].{field}"
                real[field] = dataset_path(folder, entry[field], where=where, field=label)
                if real[field] in owners:
                    raise SourceError(where, f"{label}: {entry[field]!r} is the same file as {owners[real[field]]}")
                owners[real[field]] = label
        except SourceError as err:
            if problems is None:
                raise
            problems.append(err)
            continue
        found[entry["shard"]] = ShardFiles(entry["shard"], entry["name"], real["name"], real["idx"], real["digests"])
    return found


def check_sample_count(root: str | os.PathLike, manifest: dict[str, Any]) -> None:
    """Refuse a manifest whose ``num_samples`` the shard files on disk cannot hold (each sample
    takes a 512-byte tar header at least), before its sample records are read: they are bounded
    in proportion to that count, and a count the manifest made up would let a small gzip take any
    memory. (The loader checks each shard's size against the manifest instead.)"""
    claimed = manifest.get("num_samples")
    if claimed is None:
        return
    size = 0
    for files in resolve_shards(root, manifest, problems=[]).values():  # (unsafe entries count nothing)
        try:
            size += stat_regular(files.tar, "shard").st_size
        except SourceError:
            continue
    if claimed * BLOCK > size:
        raise SourceError(str(Path(root) / MANIFEST), f"num_samples: {claimed} samples cannot fit in the {size} "
                          f"bytes of the shard files on disk (at most {size // BLOCK}); the sample records "
                          "are not read")


def write_manifest(root: str | os.PathLike, manifest: dict[str, Any]) -> None:
    write_atomic(Path(root) / MANIFEST, json_bytes(manifest))
