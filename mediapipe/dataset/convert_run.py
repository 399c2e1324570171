"""A conversion into a local folder: the run and its resume (`convert_to_folder`).

The plan (which input goes to which shard, under which key) is a pure function of the
inputs, the seed and the shard size, so every shard is an independent task: the local
engine runs them with a process pool, the Ray engine (`mediapipe.dataset.convert_ray`) on a
cluster, and a killed run resumes by redoing only the shards the manifest does not list.

Crash safety, in the order things happen for shard i:
1. the tar is written to ``.shard-00000i.tar.partial``; the index and the shard's sample
   records (``.parts/shard-00000i.json``) are written atomically;
2. the tar is fsynced and renamed to ``shard-00000i.tar``;
3. the manifest, now listing shard i, is rewritten atomically (temporary file + rename).
A shard is done only once step 3 happened; anything else is redone identically on resume.
When every shard is done, samples.jsonl.gz and report.json are written and the manifest
is marked complete.

The plan is `convert_plan`'s, one input's conversion `convert_item`'s, the writing and
committing of shards `convert_write`'s, the process pool `convert_local`'s; throughput
measurements are in `mediapipe.dataset.measure`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mediapipe.cli.progress import Progress
from mediapipe.dataset.convert_item import ItemResult
from mediapipe.dataset.convert_local import run_local
from mediapipe.dataset.convert_plan import DEFAULT_OPTIONS, ConversionPlan, plan_conversion
from mediapipe.dataset.convert_ray import run_ray
from mediapipe.dataset.convert_write import ShardResult, commit_shard, finish, new_manifest
from mediapipe.dataset.layout import MANIFEST, PARTS, REPORT
from mediapipe.dataset.manifest import read_manifest, write_manifest
from mediapipe.dataset.transcode import TranscodeOptions

log = logging.getLogger(__name__)

ENGINES = ("local", "ray")


@dataclass
class ConversionResult:
    """What a conversion did: counts, bytes, time and every input that failed, with its reason."""

    out: str
    num_inputs: int
    num_samples: int
    num_shards: int
    failures: list[dict[str, str]]
    bytes_in: int
    bytes_out: int
    seconds: float
    resumed_shards: int = 0  # shards an earlier run had finished (resume); the counts below are theirs
    resumed_inputs: int = 0
    resumed_samples: int = 0
    run_failures: list[dict[str, str]] | None = None  # this run's failures (None: every one of `failures`)

    @property
    def new_failures(self) -> list[dict[str, str]]:
        """The inputs this run failed to convert (`failures` also holds an earlier run's)."""
        return self.failures if self.run_failures is None else self.run_failures

    def summary(self) -> str:
        """What this run did; after a resume, what the earlier run had done and what the dataset holds."""
        inputs, samples = self.num_inputs - self.resumed_inputs, self.num_samples - self.resumed_samples
        rate = inputs / self.seconds if self.seconds else 0.0
        shards = self.num_shards - self.resumed_shards
        work = (f"{samples}/{inputs} inputs converted into {_plural(shards, 'shard')} "
                f"({self.bytes_in / 1e6:.1f} MB in") + (")" if self.resumed_shards else
                                                          f", {self.bytes_out / 1e6:.1f} MB out)")
        work += f" in {self.seconds:.1f} s ({rate:.1f} files/s); {len(self.new_failures)} failed"
        if not self.resumed_shards:
            return work
        earlier_failed = self.resumed_inputs - self.resumed_samples
        lines = [f"resumed: {self.resumed_inputs} of {self.num_inputs} inputs already converted by an earlier run "
                 f"({self.resumed_shards} of {_plural(self.num_shards, 'shard')}"
                 + (f"; {earlier_failed} of those failed)" if earlier_failed else ")"),
                 f"this run: {work}" if inputs else f"this run converted nothing: no input was left ({self.seconds:.1f} s)",
                 f"dataset: {self.num_samples} samples in {_plural(self.num_shards, 'shard')}, "
                 f"{self.bytes_out / 1e6:.1f} MB; {_plural(len(self.failures), 'input')} failed in all"]
        return "\n".join(lines)


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def convert_to_folder(src: Any, out: str | os.PathLike, *, shard_size: str | int = "256MB",
                      shuffle: bool = True, seed: int = 0, workers: int = 1, resume: bool = False,
                      engine: str = "local", options: TranscodeOptions = DEFAULT_OPTIONS,
                      ray_address: str | None = None, progress: bool = False,
                      on_commit: Callable[[dict[str, Any], ShardResult | None], None] | None = None
                      ) -> ConversionResult:
    """Convert ``src`` into the local folder ``out`` (the arguments are `convert`'s);
    ``on_commit(manifest, result)`` runs after each shard is committed, and once more with None
    when the dataset is complete."""
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}: expected one of {ENGINES}")
    if workers < 1:
        raise ValueError(f"workers={workers}: expected >= 1")
    start = time.monotonic()
    plan = plan_conversion(src, shard_size=shard_size, shuffle=shuffle, seed=seed, options=options)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest, done = _start_or_resume(out, plan, resume)
    earlier = _earlier_work(plan, manifest, done)
    if manifest["complete"]:
        shutil.rmtree(out / PARTS, ignore_errors=True)  # killed between the last two steps of `finish`
        return _result(out, plan, manifest, 0, start, earlier, [])
    pending = [t for t in plan.tasks if t.index not in done]
    total_in = sum(i.size for t in pending for i in t.items)
    bar = Progress(sum(len(t.items) for t in pending), unit="files", desc="convert") if progress else None
    log.info("convert %s -> %s: %d inputs, %d shards, %d to do (%.1f MB)", src, out, plan.num_inputs,
             len(plan.tasks), len(pending), total_in / 1e6)

    def on_item(result: ItemResult) -> None:
        if result.error is not None:  # reported once, with the others, in the result (and report.json)
            log.debug("cannot convert %s: %s", result.item.name, result.error)
        if bar is not None:
            bar.update(1, bytes=result.item.size)

    failed_now: list[dict[str, str]] = []
    try:
        if engine == "ray":
            results = run_ray(out, pending, options, address=ray_address, num_cpus=workers if ray_address is None
                              else None)
        else:
            results = run_local(out, pending, options, workers, on_item)
        for result in results:
            if engine == "ray" and bar is not None:
                bar.update(len(result.records) + len(result.failures), bytes=result.bytes_in)
            commit_shard(out, manifest, result)
            if on_commit is not None:
                on_commit(manifest, result)
            failed_now += result.failures
    finally:
        if bar is not None:
            bar.close()
    finished = finish(out, manifest)
    if on_commit is not None:
        on_commit(finished, None)
    return _result(out, plan, finished, total_in, start, earlier, failed_now)


def _earlier_work(plan: ConversionPlan, manifest: dict[str, Any], done: set[int]) -> tuple[int, int, int]:
    """(shards, inputs, samples) that an earlier run of a resumed conversion finished."""
    inputs = sum(len(t.items) for t in plan.tasks if t.index in done)
    samples = sum(e["samples"] for e in manifest["shards"] if e["shard"] in done)
    return len(done), inputs, samples


def _result(out: Path, plan: ConversionPlan, manifest: dict[str, Any], bytes_in: int, start: float,
            earlier: tuple[int, int, int], failed_now: list[dict[str, str]]) -> ConversionResult:
    report = json.loads((out / REPORT).read_text())
    shards, inputs, samples = earlier
    return ConversionResult(str(out), plan.num_inputs, manifest["num_samples"], len(plan.tasks),
                            report["failures"], bytes_in, manifest["bytes"], time.monotonic() - start,
                            resumed_shards=shards, resumed_inputs=inputs, resumed_samples=samples,
                            run_failures=sorted(failed_now, key=lambda f: f["input"]))


def _start_or_resume(out: Path, plan: ConversionPlan, resume: bool) -> tuple[dict[str, Any], set[int]]:
    """The manifest to continue from and the shards already done; cleans partial files."""
    if (out / MANIFEST).exists():
        if not resume:
            raise FileExistsError(f"{out} already holds a dataset; pass resume=True (--resume) to continue it")
        manifest = read_manifest(out)
        theirs = str(manifest.get("plan", {}).get("fingerprint"))
        if theirs != plan.fingerprint:
            raise ValueError(f"cannot resume {out}: the inputs or settings differ from the run that started it "
                             f"(plan {theirs[:12]}, now {plan.fingerprint[:12]})")
        done = {e["shard"] for e in manifest["shards"]}
        if manifest["complete"]:
            return manifest, done
    else:
        visible = [p for p in out.iterdir() if not p.name.startswith(".")]
        if visible:
            raise FileExistsError(f"{out} is not empty ({visible[0].name}...); convert into a new folder")
        manifest, done = new_manifest(plan), set()
        write_manifest(out, manifest)
    for stale in out.glob(".*.partial"):
        stale.unlink()
    (out / PARTS).mkdir(exist_ok=True)
    return manifest, done
