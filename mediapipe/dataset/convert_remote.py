"""`mediapipe convert SRC s3://bucket/out`: a conversion whose output lives in object storage.

Shards are written into a local staging folder exactly as a local conversion writes
them; as each shard commits, its tar, its index and its sample records (``.parts/``) are
uploaded, then the manifest that lists it, last: a remote manifest never names a file
not uploaded whole. The tar is then deleted locally, so the staging folder holds little
more than one shard at a time. When every shard is done, samples.jsonl.gz and
report.json are uploaded, then the complete manifest, then ``.parts/`` is removed.

``--resume`` reads the remote manifest and the committed shards' records into a fresh
staging folder and continues as a local resume does: only the shards the manifest does
not list are converted again, and the result equals an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mediapipe.dataset.convert_run import ConversionResult, convert_to_folder
from mediapipe.dataset.layout import MANIFEST, MAX_MANIFEST_BYTES, PARTS, REPORT, SAMPLES
from mediapipe.dataset.manifest import parse_manifest
from mediapipe.dataset.safe_io import json_bytes, write_atomic
from mediapipe.remote.stores import RemoteStore

MAX_PART_BYTES = 1 << 30  # one shard's sample records and failures


def _part_name(shard: int) -> str:
    return f"{PARTS}/shard-{shard:06d}.json"


def convert_to_store(src: Any, url: str, *, resume: bool = False, storage_options: dict[str, Any] | None = None,
                     staging: str | None = None, engine: str = "local", **kwargs: Any) -> ConversionResult:
    """Convert ``src`` into the store at ``url`` (see the module's docstring); returns the
    `ConversionResult` of the conversion (``out`` is the URL)."""
    if engine != "local":
        raise ValueError(f"engine={engine!r} writes shards on the cluster's nodes; a remote output ({url}) "
                         "is written by the local engine")
    store = RemoteStore(url, storage_options)
    folder = Path(tempfile.mkdtemp(prefix="mediapipe-convert-", dir=staging))
    try:
        exists = store.exists(MANIFEST)
        if exists and not resume:
            raise FileExistsError(f"{url} already holds a dataset; pass resume=True (--resume) to continue it")
        if exists:
            _fetch_state(store, folder)

        def upload(manifest: dict[str, Any], result: Any) -> None:
            if result is None:  # complete: the records, the report, then the manifest that says so
                store.put_file(folder / SAMPLES, SAMPLES)
                store.put_file(folder / REPORT, REPORT)
                store.put_bytes(MANIFEST, json_bytes(manifest))
                with contextlib.suppress(Exception):
                    store.fs.rm(store.child(PARTS), recursive=True)
                return
            entry = result.entry
            for name in (entry["name"], entry["idx"], entry.get("digests")):
                if name is not None:
                    store.put_file(folder / name, name)
            store.put_file(folder / _part_name(entry["shard"]), _part_name(entry["shard"]))
            store.put_bytes(MANIFEST, json_bytes(manifest))  # last: it lists the shard
            if entry["name"] is not None:
                (folder / entry["name"]).unlink()

        result = convert_to_folder(src, folder, resume=exists, on_commit=upload, **kwargs)
        result.out = url
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _fetch_state(store: RemoteStore, folder: Path) -> None:
    """The remote manifest and its committed shards' records (and the report, once
    complete), into ``folder``, where a local resume takes over."""
    where = store.child(MANIFEST)
    raw = store.read_small(MANIFEST, MAX_MANIFEST_BYTES, "manifest")
    manifest = parse_manifest(raw, where)
    (folder / PARTS).mkdir()
    if manifest["complete"]:
        (folder / REPORT).write_bytes(store.read_small(REPORT, MAX_MANIFEST_BYTES, "report"))
    else:
        for entry in manifest["shards"]:
            name = _part_name(entry["shard"])
            (folder / name).write_bytes(store.read_small(name, MAX_PART_BYTES, "shard records"))
    write_atomic(folder / MANIFEST, raw)
