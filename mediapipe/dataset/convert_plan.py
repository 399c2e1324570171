"""The plan of `mediapipe convert`: which input goes to which shard, under which key.

A pure function of the inputs, the seed and the shard size, so every shard is an independent task."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.dataset.layout import unique_keys
from mediapipe.dataset.transcode import TranscodeOptions

DEFAULT_OPTIONS = TranscodeOptions()


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
    types = {name: t.to_config() for name, t in source.field_types().items()}
    if types:  # a resume must not mix targets of another annotation file or other settings
        settings["targets"] = {"field_types": types, "source": source.to_config(), "annotations": source.fingerprint}
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
