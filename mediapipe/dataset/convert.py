"""`mediapipe convert`: a folder or manifest of media to sharded, indexed, transcoded datasets.

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
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.cli.progress import Progress
from mediapipe.dataset.layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    PARTS,
    REPORT,
    SAMPLES,
    safe_key,
    unique_keys,
)
from mediapipe.dataset.manifest import read_manifest, write_manifest
from mediapipe.dataset.safe_io import json_bytes, write_atomic
from mediapipe.dataset.sample_records import samples_bytes
from mediapipe.dataset.schema import is_finite_number
from mediapipe.dataset.shard_writer import ShardWriter
from mediapipe.dataset.transcode import TranscodeError, TranscodeOptions, transcode
from mediapipe.errors import MediapipeError
from mediapipe.reasons import readable, reason
from mediapipe.sample import Blob, kind_of_bytes, kind_of_extension

log = logging.getLogger(__name__)

step_hook: Callable[[str], None] | None = None
"""Called with "sample", "shard" or "commit" after each sample written to a partial tar, shard
renamed into place, or manifest committed (in the process that writes them); tests set it, to
SIGKILL the converter at a given step."""

ENGINES = ("local", "ray")
DEFAULT_OPTIONS = TranscodeOptions()


# -- the plan -----------------------------------------------------------------------------
@dataclass(frozen=True)
class InputItem:
    """One input file: where it is, what it is, and the key and label it gets."""

    position: int  # in the source's order
    path: str
    name: str  # what reports print: the path relative to the source
    key: str
    label: int | None
    ext: str
    size: int  # bytes of every file of the sample
    extra: tuple[tuple[str, str], ...] = ()  # (field, path): more media of the sample (a mask), copied as is
    fields: tuple[tuple[str, Any], ...] = ()  # numbers and text passed through to the batch
    source: str | None = None  # a record source's config (JSON) when the bytes are not a file of their own
    blob: str = ""  # the blob of that source's sample
    segment: tuple[float, float] | None = None  # (start, duration) s of an audio file: cut to FLAC


@dataclass(frozen=True)
class ShardTask:
    """The inputs of one shard, in the order they are written."""

    index: int
    items: tuple[InputItem, ...]


@dataclass(frozen=True)
class ConversionPlan:
    source: str
    classes: list[str] | None
    tasks: tuple[ShardTask, ...]
    settings: dict[str, Any]  # everything that changes the output: seed, shard size, options
    fingerprint: str
    field_types: dict[str, dict[str, str]] | None = None  # the targets (boxes, labels...) each sample carries

    @property
    def num_inputs(self) -> int:
        return sum(len(t.items) for t in self.tasks)


def parse_shard_size(text: str | int) -> tuple[int | None, int | None]:
    """(samples, bytes) per shard from "1000" (samples), "1000samples", "256MB", "1GB", "512KB"."""
    if isinstance(text, int):
        return text, None
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(samples?|[kmgt]i?b)?\s*", str(text), re.IGNORECASE)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"shard size {text!r}: expected a sample count (1000) or a size (256MB, 1GB)")
    number, unit = float(match.group(1)), (match.group(2) or "samples").lower()
    if unit.startswith("sample"):
        return int(number), None
    scale = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[unit[0]]
    if "i" in unit:
        scale = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[unit[0]]
    return None, int(number * scale)


def open_inputs(src: Any):
    """A folder (class sub-folders become labels), a JSON-lines manifest, a dataset in another
    format (`mediapipe.loaders.sources.formats.open_any`: TFRecord, RecordIO, Parquet, Hugging Face,
    NeMo, Lhotse, COCO), or a source already made (``mp.loaders.yolo(...)``), as a source."""
    from mediapipe.loaders.sources.folder import Source
    from mediapipe.loaders.sources.formats import open_any

    return src if isinstance(src, Source) else open_any(src)


def plan_conversion(src: Any, *, shard_size: str | int = "256MB", shuffle: bool = True,
                    seed: int = 0, options: TranscodeOptions = DEFAULT_OPTIONS) -> ConversionPlan:
    """Assign every input to a shard. Byte-sized shards are cut by the inputs' sizes, so the
    assignment is known before anything is transcoded."""
    from mediapipe.loaders.sources.formats import describe_inputs, describe_source

    source = open_inputs(src)
    made = source is src  # a source object: its keys are its own, its config names it
    base = Path(".") if made else Path(src) if Path(src).is_dir() else Path(src).parent
    described = list(describe_inputs(source))  # one sample at a time: a record's bytes are not kept
    keys = unique_keys(_relative(item.name, base) for item in described)
    items = [replace(item, key=key) for item, key in zip(described, keys)]
    max_samples, max_bytes = parse_shard_size(shard_size)
    order = np.random.default_rng(seed).permutation(len(items)) if shuffle else np.arange(len(items))
    tasks: list[ShardTask] = []
    current: list[InputItem] = []
    current_bytes = 0
    for i in order:
        item = items[int(i)]
        full = (max_samples is not None and len(current) >= max_samples) or (
            max_bytes is not None and current and current_bytes + item.size > max_bytes)
        if full:
            tasks.append(ShardTask(len(tasks), tuple(current)))
            current, current_bytes = [], 0
        current.append(item)
        current_bytes += item.size
    if current:
        tasks.append(ShardTask(len(tasks), tuple(current)))
    settings = {"shard_size": str(shard_size), "shuffle": shuffle, "seed": seed, "options": options.to_dict()}
    declared = getattr(source, "field_types", None)
    types = {name: t.to_config() for name, t in declared().items()} if callable(declared) else None
    if types:  # a resume must not mix targets of another annotation file or other settings
        settings["targets"] = {"field_types": types, "source": source.to_config(),
                               "annotations": getattr(source, "fingerprint", None)}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for task in tasks:
        for item in task.items:
            digest.update(f"{task.index}\0{item.name}\0{item.key}\0{item.label}\0{item.size}\0{item.extra}"
                          f"\0{item.fields}\n".encode())
    return ConversionPlan(describe_source(source) if made else str(src), source.classes, tuple(tasks), settings,
                          digest.hexdigest(), types or None)


def _relative(name: str, base: Path) -> str:
    """A manifest's absolute path as a path under the manifest's folder, where it is one."""
    if os.path.isabs(name):
        rel = os.path.relpath(name, base)
        return name if rel.startswith("..") else rel
    return name


# -- converting one input and writing one shard -------------------------------------------
@dataclass
class ItemResult:
    item: InputItem
    ext: str = ""
    data: bytes = b""
    meta: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    extra: dict[str, bytes] = field(default_factory=dict)  # member extension ("mask.png") -> bytes
    targets: dict[str, Any] | None = None  # boxes, labels, masks... as JSON values, for the .json member


def convert_item(item: InputItem, options: TranscodeOptions) -> ItemResult:
    """Read and transcode one input; a failure becomes a reason, never an exception."""
    from mediapipe.loaders.sources.formats import read_input

    try:
        data, targets, canvas = read_input(item)
    except OSError as err:  # SourceError too: it names the record and the reason
        return ItemResult(item, error=str(err) if item.source else f"cannot read: {err.strerror or err}")
    except MediapipeError as err:
        return ItemResult(item, error=str(err))
    numbers = {k: v for k, v in item.fields if type(v) is not str} | ({} if item.label is None else {"label": item.label})
    for name, value in numbers.items():
        if not is_finite_number(value):  # the dataset's strict JSON could not hold it
            return ItemResult(item, error=f"field {name!r} is {value!r}, not a finite number")
    kind = kind_of_extension(item.ext) or kind_of_bytes(data[:16])
    if kind is None:
        return ItemResult(item, error=f"unknown media kind (extension {item.ext!r})")
    extra = {}
    for name, path in item.extra:  # masks and other per-field media: lossless, so copied as they are
        ext = path.rsplit(".", 1)[-1].lower() if "." in os.path.basename(path) else "bin"
        try:
            extra[f"{safe_key(name)}.{ext}"] = Blob(path, path=path).read()
        except OSError as err:
            return ItemResult(item, error=f"cannot read its {name!r} file {path}: {err.strerror or err}")
    try:
        ext, out, meta = transcode(data, kind, item.ext, options)
    except TranscodeError as err:
        return ItemResult(item, error=readable(str(err), err.__cause__))
    except Exception as err:  # noqa: BLE001  every failure is reported with its reason, none is dropped
        return ItemResult(item, error=f"{type(err).__name__}: {reason(err)}")
    result = ItemResult(item, ext, out, {"kind": kind, **meta}, extra=extra)
    if targets:
        try:
            result.targets = targets_json(item, data, targets, canvas, (meta["height"], meta["width"]))
        except (MediapipeError, ValueError, OSError) as err:
            return ItemResult(item, error=str(err))
    return result


def targets_json(item: InputItem, data: bytes, targets: dict[str, Any], canvas: tuple[int, int] | None,
                 written: tuple[int, int]) -> dict[str, Any]:
    """An input's targets as JSON values, in pixels of the image as written: scaled when the
    image was resized (``image_max_side``), and turned with it where the image is written turned
    by its EXIF orientation (the annotations are in the stored frame, as COCO tools write them).
    An image whose size is not the one its annotations give is refused: its targets would not match."""
    from PIL import Image

    from mediapipe.decoders.exif import file_orientation, oriented_size
    from mediapipe.loaders.sources.formats import target_types
    from mediapipe.loaders.sources.targets import orient_targets, scale_targets, targets_to_json

    with Image.open(io.BytesIO(data)) as im:
        stored = (im.size[1], im.size[0])
    if canvas is not None and canvas != stored:
        raise ValueError(f"the annotations are for a {canvas[1]}x{canvas[0]} image, the file is "
                         f"{stored[1]}x{stored[0]}")
    types = target_types(item)
    orientation = file_orientation(data)  # what transcode_image's exif_transpose turns the image by
    turned = orient_targets(targets, types, orientation, stored)
    return targets_to_json(scale_targets(turned, types, oriented_size(orientation, *stored), written), types)


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


# -- engines --------------------------------------------------------------------------------
def run_local(out: Path, tasks: list[ShardTask], options: TranscodeOptions, workers: int,
              on_item: Callable[[ItemResult], None]) -> Iterator[ShardResult]:
    """Transcode inputs on ``workers`` processes and write shards here, one by one, in order.
    At most ``4 * workers`` inputs are in flight, so memory stays bounded however slow the disk."""
    jobs = ((item, options) for task in tasks for item in task.items)
    pool = None
    if workers <= 1:
        results: Iterator[ItemResult] = (convert_item(*job) for job in jobs)
    else:
        method = "fork" if sys.platform.startswith("linux") else "spawn"
        pool = multiprocessing.get_context(method).Pool(workers)
        results = _bounded_imap(pool, jobs, 4 * workers)
    try:
        for task in tasks:
            def shard_items(task: ShardTask = task) -> Iterator[ItemResult]:
                for _ in task.items:
                    result = next(results)
                    on_item(result)
                    yield result
            yield write_shard(out, task, shard_items())
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()


def _bounded_imap(pool: Any, jobs: Iterator[tuple[InputItem, TranscodeOptions]], window: int) -> Iterator[ItemResult]:
    """``pool.imap`` in order, with at most ``window`` jobs submitted and not yet consumed."""
    pending: deque = deque()
    for job in jobs:
        pending.append(pool.apply_async(convert_item, job))
        if len(pending) >= window:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


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


def convert(src: Any, out: str | os.PathLike, *, shard_size: str | int = "256MB",
            shuffle: bool = True, seed: int = 0, workers: int = 1, resume: bool = False, engine: str = "local",
            options: TranscodeOptions = DEFAULT_OPTIONS, ray_address: str | None = None,
            progress: bool = False, storage_options: dict[str, Any] | None = None,
            on_commit: Callable[[dict[str, Any], ShardResult | None], None] | None = None) -> ConversionResult:
    """Convert ``src`` (a folder of class sub-folders, a JSON-lines manifest, a dataset that
    `open_inputs` reads: TFRecord, RecordIO, Parquet, Hugging Face, NeMo, Lhotse, a COCO
    annotation file; or a source: ``mp.loaders.yolo(...)``) into ``out``. A source that declares
    targets (boxes, labels, masks: ``field_types()``) has them written into each sample's
    ``.json`` member and their types into the manifest, for `mediapipe.loaders.sources.shards`.

    ``resume=True`` continues a killed run (same inputs and settings), redoing only the
    shards its manifest does not list; the result equals an uninterrupted run byte for byte.
    ``out`` may be a URL (``s3://bucket/out``: see `mediapipe.dataset.convert_remote`, which passes
    ``storage_options`` to fsspec); ``on_commit(manifest, result)`` runs after each shard is
    committed, and once more with None when the dataset is complete.
    """
    from mediapipe.remote.urls import is_remote

    if is_remote(str(out)):
        from mediapipe.dataset.convert_remote import convert_to_store

        return convert_to_store(src, str(out), resume=resume, storage_options=storage_options, shard_size=shard_size,
                                shuffle=shuffle, seed=seed, workers=workers, engine=engine, options=options,
                                ray_address=ray_address, progress=progress)
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
            from mediapipe.dataset.convert_ray import run_ray

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


# -- benchmark helpers ------------------------------------------------------------------------
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
