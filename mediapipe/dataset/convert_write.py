"""Writing `mediapipe convert`'s output crash-safely: one shard's tar, index and records, the manifest
commit that makes it done, and the final samples.jsonl.gz and report.json (the steps `convert` names)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mediapipe.dataset.convert_item import ItemResult, convert_item
from mediapipe.dataset.convert_plan import ConversionPlan, ShardTask
from mediapipe.dataset.layout import FORMAT_NAME, FORMAT_VERSION, PARTS, REPORT, SAMPLES
from mediapipe.dataset.manifest import write_manifest
from mediapipe.dataset.safe_io import json_bytes, write_atomic
from mediapipe.dataset.sample_records import samples_bytes
from mediapipe.dataset.shard_writer import ShardWriter
from mediapipe.dataset.transcode import TranscodeOptions

step_hook: Callable[[str], None] | None = None
"""Called with "sample", "shard" or "commit" after each sample written to a partial tar, shard
renamed into place, or manifest committed (in the process that writes them); tests set it, to
SIGKILL the converter at a given step."""


@dataclass
class ShardResult:
    entry: dict[str, Any]
    records: list[dict[str, Any]]
    failures: list[dict[str, str]]
    bytes_in: int = 0


def _parts_path(out: Path, index: int) -> Path:
    return out / PARTS / f"shard-{index:06d}.json"


def write_shard(out: str | os.PathLike, task: ShardTask, results: Iterable[ItemResult]) -> ShardResult:
    """Write one shard's tar and index (atomically) and its sample records."""
    out = Path(out)
    records, failures, bytes_in = [], [], 0
    writer: ShardWriter | None = None
    try:
        for result in results:
            item = result.item
            bytes_in += item.size
            if result.error is not None:
                failures.append({"input": item.name, "reason": result.error})
                continue
            record = {"key": item.key, "shard": task.index, "label": item.label, "source": item.name,
                      "ext": result.ext, "bytes": len(result.data), **result.meta}
            if item.fields:
                record["fields"] = dict(item.fields)
            members = {result.ext: result.data, **result.extra}
            if item.label is not None:
                members["cls"] = str(item.label).encode()
            member = {k: v for k, v in record.items() if k != "shard"}
            if result.targets is not None:  # in the member only: samples.jsonl.gz stays small, read at open
                member["targets"] = result.targets
            members["json"] = json.dumps(member, sort_keys=True).encode()
            if writer is None:
                writer = ShardWriter(out, task.index)
            writer.add(item.key, members)
            records.append(record)
            _step("sample")
        write_atomic(_parts_path(out, task.index), json_bytes({"records": records, "failures": failures}))
        if writer is None:  # every input failed: no files, an empty entry
            entry = {"shard": task.index, "name": None, "idx": None, "samples": 0, "bytes": 0, "sha256": None}
        else:
            committed = writer.commit()
            entry = {"shard": task.index, "name": committed["name"], "idx": committed["index"],
                     "digests": committed["digests"], "samples": committed["samples"], "bytes": committed["bytes"],
                     "sha256": committed["sha256"]}
            _step("shard")
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    return ShardResult(entry, records, failures, bytes_in)


def convert_shard(out: str | os.PathLike, task: ShardTask, options: TranscodeOptions) -> ShardResult:
    """One shard, start to finish, in this process (the unit of work of the Ray engine)."""
    return write_shard(out, task, (convert_item(item, options) for item in task.items))


def _step(event: str) -> None:
    if step_hook is not None:
        step_hook(event)


# -- the manifest ---------------------------------------------------------------------------
def new_manifest(plan: ConversionPlan) -> dict[str, Any]:
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "complete": False,
            "source": plan.source, "classes": plan.classes,
            **({"field_types": plan.field_types} if plan.field_types else {}),
            "plan": {"fingerprint": plan.fingerprint, "num_inputs": plan.num_inputs,
                     "num_shards": len(plan.tasks), **plan.settings},
            "shards": []}


def commit_shard(out: Path, manifest: dict[str, Any], result: ShardResult) -> None:
    """List the shard in the manifest and rewrite the manifest atomically."""
    shards = [e for e in manifest["shards"] if e["shard"] != result.entry["shard"]] + [result.entry]
    manifest["shards"] = sorted(shards, key=lambda e: e["shard"])
    write_manifest(out, manifest)
    _step("commit")


def finish(out: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Gather the committed shards' records into samples.jsonl.gz and report.json; mark complete."""
    records, failures, fields = [], [], set()
    for entry in manifest["shards"]:
        part = json.loads(_parts_path(out, entry["shard"]).read_text())
        records += part["records"]
        failures += part["failures"]
    for r in records:
        fields.add(r["ext"])
        fields.update(["json"] + (["cls"] if r["label"] is not None else []))
    write_atomic(out / SAMPLES, samples_bytes(records))
    write_atomic(out / REPORT, json_bytes({"failures": sorted(failures, key=lambda f: f["input"])}))
    manifest.update(complete=True, num_samples=len(records), num_failures=len(failures), fields=sorted(fields),
                    bytes=sum(e["bytes"] for e in manifest["shards"]))
    write_manifest(out, manifest)
    shutil.rmtree(out / PARTS, ignore_errors=True)
    return manifest
