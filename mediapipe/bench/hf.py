"""The Hugging Face rows of the image scenarios: the same images as a Parquet dataset.

Both backends read one Parquet copy of the benchmark's images, written once by ``datasets``
itself (``Dataset.from_dict`` with ``Image()`` and ``ClassLabel`` features, ``to_parquet``:
its row groups, its compression) beside the dataset:

- ``mediapipe-hf``: ``mp.loaders.huggingface(copy)`` in this library's loader, shuffled within
  windows of row groups (`RowGroupWindowSampler`) for training, in order for evaluation;
- ``hf-datasets``: the path users take today, ``Dataset.from_parquet`` with ``.with_transform``
  of torchvision v2 in a DataLoader (the ``datasets`` image-classification recipe), fully shuffled.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

import mediapipe as mp
from mediapipe.bench.image_data import TRAIN, dataset_layout, scenario_ops, torchvision_transform
from mediapipe.bench.long_epoch import Repeat, RepeatedSource, passes
from mediapipe.bench.streams import EpochStream, Stream, loader_stages, touch_image
from mediapipe.loaders.sources.parquet import RowGroupWindowSampler

WINDOW = 8  # row groups per shuffle window of the mediapipe-hf row
SPLIT_FILE = "train-00000-of-00001.parquet"


def _rows(data: Path) -> tuple[list[str], list[int], list[str] | None]:
    """(paths, labels, class names) of the images of a folder or manifest, in the source's order."""
    layout = dataset_layout(data)
    if layout == "converted":
        raise NotImplementedError("not applicable: the Hugging Face rows copy a folder or a manifest of images")
    source = mp.loaders.folder(data) if layout == "folder" else mp.loaders.manifest(data)
    refs = [source.ref(i) for i in range(len(source))]
    paths = [next(iter(r.blobs.values())).path for r in refs]
    labels = [r.label if r.label is not None else 0 for r in refs]
    return paths, labels, source.classes


def parquet_copy(data: Path) -> Path:
    """The folder holding the Parquet copy of ``data`` (``data/train-*.parquet``, as a Hub
    snapshot lays it out), written by ``datasets`` the first time it is asked for."""
    data = Path(data).resolve()
    out = data.parent / f".{data.name}.hf-parquet"
    target = out / "data" / SPLIT_FILE
    if target.exists():
        return out
    try:
        import datasets
    except ImportError as err:
        raise NotImplementedError("not installed: datasets (pip install datasets)") from err
    paths, labels, classes = _rows(data)
    names = classes or [str(n) for n in range(max(labels) + 1)]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=names)})
    images = [{"bytes": Path(p).read_bytes(), "path": Path(p).name} for p in paths]  # embedded, as on the Hub
    ds = datasets.Dataset.from_dict({"image": images, "label": labels}, features=features)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")  # another process may write it too
    ds.to_parquet(str(partial))
    os.replace(partial, target)  # the same content whoever renames last
    return out


def open_mediapipe_hf(scenario: str, data: Path, *, device: str, workers: int, batch_size: int,
                      options: dict[str, Any]) -> Stream:
    """This library's loader over the Parquet copy, shuffling within windows of row groups."""
    source = mp.loaders.huggingface(parquet_copy(data), split="train", columns={"image": "image", "label": "label"})
    times = passes(options, batch_size, len(source))
    groups = source.row_groups()
    groups = np.concatenate([groups + k * (int(groups.max()) + 1) for k in range(times)])
    source = RepeatedSource(source, times) if times > 1 else source
    pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image()}, augment=scenario_ops(scenario),
                       batch_size=batch_size, seed=0, device=device)
    sampler = RowGroupWindowSampler(groups, batch_size, window=WINDOW, shuffle=scenario == TRAIN, seed=0,
                                    last_batch="drop")
    kwargs = {"worker_type": options["worker_type"]} if options.get("worker_type") else {}
    loader = pipe.loader(num_workers=workers, sampler=sampler, **kwargs)
    prefetch = getattr(loader, "prefetch", 2)
    return EpochStream(lambda: loader, buffered=max(1, workers) * prefetch + 1,
                       stats=lambda: loader_stages(loader), samples=touch_image)


class _Collate:
    """The recipe's collate_fn: stack the transformed images, tensor the labels."""

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        return {"pixel_values": torch.stack([e["pixel_values"] for e in examples]),
                "labels": torch.tensor([e["label"] for e in examples])}


class _Transform:
    """The recipe's transform for ``with_transform``: Pillow image -> torchvision v2 -> tensor."""

    def __init__(self, scenario: str) -> None:
        self.transform = torchvision_transform(scenario)

    def __call__(self, examples: dict[str, list]) -> dict[str, list]:
        examples["pixel_values"] = [self.transform(image.convert("RGB")) for image in examples["image"]]
        del examples["image"]
        return examples


def open_hf_datasets(scenario: str, data: Path, *, device: str, workers: int, batch_size: int,
                     options: dict[str, Any]) -> Stream:
    """``datasets`` + ``.with_transform`` (torchvision v2) + DataLoader, fully shuffled."""
    import datasets

    copy = parquet_copy(data)
    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_parquet(str(copy / "data" / SPLIT_FILE), cache_dir=str(copy / "cache"))
    ds = ds.with_transform(_Transform(scenario))
    dataset = Repeat(ds, passes(options, batch_size, len(ds)))
    cuda = device.startswith("cuda")
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=scenario == TRAIN,
                                         num_workers=workers, drop_last=True, pin_memory=cuda, collate_fn=_Collate())
    target = torch.device(device)

    def samples(batch: Any) -> int:
        images = batch["pixel_values"].to(target, non_blocking=cuda) if cuda else batch["pixel_values"]
        touch_image({"image": images})
        return int(images.shape[0])

    return EpochStream(lambda: loader, buffered=workers * 2 if workers else 0, samples=samples)
