"""The image scenarios' backends: this library (torch loader, and lowered to DALI), the
torchvision baseline and DALI's own pipeline written by hand, as the core issue specifies; the
Hugging Face rows (`mediapipe.bench.hf`) and torchvision's GPU pipeline
(`mediapipe.bench.torchvision_gpu`) are theirs. What the scenarios read and do is
`mediapipe.bench.image_data`'s.

Every backend reads the same files, batch 64 by default, with ``workers`` processes (torch) or
threads (DALI), shuffled for training and in order for evaluation.
"""

from __future__ import annotations

import functools
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from PIL import Image

import mediapipe as mp
from mediapipe.bench import ffcv_peer, hf
from mediapipe.bench.cache_folder import bench_cache_folder, close_cache_folder
from mediapipe.bench.image_data import (
    EVAL,
    IMAGE_EXTENSIONS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    RECIPE,
    TRAIN,
    ShardImage,
    converted_images,
    converted_shards,
    dataset_layout,
    flat_rows,
    has_class_folders,
    manifest_rows,
    scenario_ops,
    sized,
    torchvision_transform,
)
from mediapipe.bench.long_epoch import Repeat, RepeatedSource, passes
from mediapipe.bench.streams import EpochStream, Stream, loader_stages, touch_image
from mediapipe.bench.torchvision_gpu import open_torchvision_gpu
from mediapipe.loaders.sources.folder import Source


# -- this library ------------------------------------------------------------------------
def mediapipe_pipeline(scenario: str, data: Path, device: str, batch_size: int, seed: int = 0,
                       options: dict[str, Any] | None = None, source: Source | None = None) -> Any:
    layout = dataset_layout(data) if source is None else "given"  # given: the same data read another way
    if layout == "given":
        pass
    elif layout == "folder":
        source = mp.loaders.folder(data)
    elif layout == "manifest":
        source = mp.loaders.manifest(data)
    else:
        try:
            from mediapipe.loaders.sources.shards import shards
        except ImportError as err:
            raise NotImplementedError(f"not available: converted datasets need mediapipe.loaders.sources.shards ({err})") from err
        source = shards(data)
    times = passes(options or {}, batch_size, len(source))
    source = RepeatedSource(source, times, (options or {}).get("same_samples", False)) if times > 1 else source
    # a cache row's images decode in the workers (on CUDA they would decode on the device, which keeps no cache)
    decoder = mp.decoders.image(device_decode=False) if (options or {}).get("cached") else mp.decoders.image()
    return mp.Pipeline(source=source, decode={"image": decoder}, augment=scenario_ops(scenario),
                       batch_size=batch_size, seed=seed, device=device)


# -- the fused path's quality, reported next to its speed --------------------------------------------
def open_mediapipe(scenario: str, data: Path, *, device: str, workers: int, batch_size: int,
                   options: dict[str, Any]) -> Stream:
    """This library's torch loader: worker processes (or threads) build whole batches."""
    pipe = mediapipe_pipeline(scenario, data, device, batch_size, options=options)
    kwargs = {"worker_type": options["worker_type"]} if options.get("worker_type") else {}
    loader = pipe.loader(num_workers=workers, shuffle=scenario != EVAL, drop_last=True, **kwargs)
    prefetch = getattr(loader, "prefetch", 2)
    return EpochStream(lambda: loader, buffered=max(1, workers) * prefetch + 1,
                       stats=lambda: loader_stages(loader), samples=touch_image)


def open_mediapipe_cached(scenario: str, data: Path, *, device: str, workers: int, batch_size: int,
                          options: dict[str, Any], fill: bool = False) -> Stream:
    """This library's loader with an epoch cache (`mp.EpochCache`) in a folder of its own, in RAM
    (/dev/shm) where there is one, removed at close (`bench_cache_folder`; on a failed open too); its
    images decode in the workers (on CUDA too). ``mediapipe-cached`` fills it with one untimed epoch,
    then is timed reading it: the second epoch on. ``mediapipe-cache-fill`` is timed while every
    sample is new to the cache (decoded whole and stored): the first epoch's cost; with
    ``--real-epochs`` the cache is cleared as each epoch after the first starts. A cache that
    cannot hold the samples (its budget: half the free space of /dev/shm) ends the row: not
    available (cached) or an error (fill), never rates of samples decoded as without a cache."""
    folder = bench_cache_folder()
    try:
        cache = mp.EpochCache(folder)
        pipe = mediapipe_pipeline(scenario, data, device, batch_size,
                                  options={**options, "cached": True, "same_samples": not fill})
        kwargs = {"worker_type": options["worker_type"]} if options.get("worker_type") else {}
        loader = pipe.loader(num_workers=workers, shuffle=scenario != EVAL, drop_last=True, cache=cache, **kwargs)
        if not fill:  # one epoch over the dataset itself: the same cache key as the long epoch's passes
            first = mediapipe_pipeline(scenario, data, device, batch_size, options={"repeat": False, "cached": True})
            filler = first.loader(num_workers=workers, shuffle=False, cache=cache, **kwargs)
            for _ in filler:
                pass
            stored, total = getattr(filler.stats, "cache", {}).get("stored", 0), len(first.plan.source)
            if stored < total:
                raise NotImplementedError(f"not available: the epoch cache in {folder.parent} held {stored} of {total} "
                                          f"samples (its budget: {cache.max_bytes / 1e6:.0f} MB)")
    except BaseException:
        close_cache_folder(folder)
        raise
    epochs = 0
    repeated = isinstance(pipe.plan.source, RepeatedSource)  # one long epoch: every pass new to the fill row
    running: list[Any] = []  # the pass being read: its workers stop before the folder is removed

    def epoch() -> Any:
        nonlocal epochs
        if fill and not repeated and epochs:
            cache.clear()
        epochs += 1
        running[:] = [iter(loader)]
        return running[0]

    def close() -> None:
        for one in running:
            one.close()
        close_cache_folder(folder)

    def touched(batch: Any) -> int:
        skipped = getattr(loader.stats, "cache", {}).get("skipped", 0)
        if fill and skipped:
            raise RuntimeError(f"the epoch cache in {folder.parent} skipped {skipped} samples (over its budget of "
                               f"{cache.max_bytes / 1e6:.0f} MB): decoded without being stored, not a fill's rate")
        return touch_image(batch)

    prefetch = getattr(loader, "prefetch", 2)
    return EpochStream(epoch, buffered=max(1, workers) * prefetch + 1, stats=lambda: loader_stages(loader),
                       samples=touched, on_close=close)


def open_mediapipe_dali(scenario: str, data: Path, *, device: str, workers: int, batch_size: int,
                        options: dict[str, Any]) -> Stream:
    """The same pipeline spec lowered to DALI: ``pipe.loader(backend="dali")``."""
    try:
        from mediapipe.loaders.dali.loader import DaliLoader  # noqa: F401  (present and importable?)
    except ImportError as err:
        raise NotImplementedError(f"not available: {err}") from err
    pipe = mediapipe_pipeline(scenario, data, device, batch_size, options=options)
    if workers < 1:
        raise ValueError("DALI needs at least one thread: use --workers 1 or more")
    loader = pipe.loader(backend="dali", num_workers=workers, shuffle=scenario == TRAIN, drop_last=True)
    return EpochStream(lambda: loader, buffered=getattr(loader, "prefetch", 2),
                       stats=lambda: loader.stats.seconds, samples=touch_image)


# -- torchvision baseline -------------------------------------------------------------


class _ManifestImages:
    """A manifest's images through torchvision's default loader (Pillow), like ImageFolder."""

    def __init__(self, rows: list[tuple[str, int]], transform: Any) -> None:
        from torchvision.datasets.folder import default_loader

        self.rows, self.transform, self.loader = rows, transform, default_loader

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        path, label = self.rows[i]
        return self.transform(self.loader(path)), label


class _ShardImages:
    """A converted dataset's images for the baseline: each read from its tar shard by offset
    (what a hand-written tar Dataset does) and opened with Pillow, as ImageFolder opens files."""

    def __init__(self, items: list[ShardImage], transform: Any) -> None:
        self.items, self.transform = items, transform

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        item = self.items[i]
        with open(item.tar, "rb") as f:
            f.seek(item.offset)
            data = f.read(item.size)
        return self.transform(Image.open(io.BytesIO(data)).convert("RGB")), item.label


def open_torchvision(scenario: str, data: Path, *, device: str, workers: int, batch_size: int,
                     options: dict[str, Any]) -> Stream:
    """ImageFolder (Pillow) + transforms v2 + DataLoader, same workers, batch 64, defaults otherwise."""
    from torchvision.datasets import ImageFolder

    layout = dataset_layout(data)
    transform = torchvision_transform(scenario)
    if layout == "folder" and has_class_folders(data):
        dataset = ImageFolder(str(data), transform=transform)
    elif layout == "folder":
        dataset = _ManifestImages(flat_rows(data), transform)
    elif layout == "manifest":
        dataset = _ManifestImages(manifest_rows(data), transform)
    else:
        dataset = _ShardImages(converted_images(data), transform)
    return dataloader_stream(dataset, device=device, workers=workers, batch_size=batch_size,
                             shuffle=scenario != EVAL, options=options)


def dataloader_stream(dataset: Any, *, device: str, workers: int, batch_size: int, shuffle: bool,
                      options: dict[str, Any], collate_fn: Any = None) -> Stream:
    """A torch DataLoader over ``dataset`` (repeated for a long epoch; batch ``[0]`` holds the
    images) as a stream: the baselines' loader, defaults otherwise."""
    dataset = Repeat(dataset, passes(options, batch_size, len(dataset)))
    cuda = device.startswith("cuda")
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=workers,
                                         drop_last=True, pin_memory=cuda, collate_fn=collate_fn)
    target = torch.device(device)

    def samples(batch: Any) -> int:
        images = batch[0].to(target, non_blocking=cuda) if cuda else batch[0]
        touch_image({"image": images})
        return int(images.shape[0])

    return EpochStream(lambda: loader, buffered=workers * 2 if workers else 0, samples=samples)


# -- DALI by hand -----------------------------------------------------------------------
def open_dali(scenario: str, data: Path, *, device: str, workers: int, batch_size: int,
              options: dict[str, Any]) -> Stream:
    """fn.readers.file -> image_random_crop (ROI decode) -> resize -> crop_mirror_normalize
    (train), or decode -> resize shorter 256 -> crop_mirror_normalize 224 (eval); ``cpu``
    decoders with device_id=None, or ``mixed`` (nvJPEG) on a GPU."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    if workers < 1:
        raise ValueError("DALI needs at least one thread: use --workers 1 or more")
    cuda = device.startswith("cuda")
    layout = dataset_layout(data)
    cleanup: list[str] = []
    if layout == "folder" and has_class_folders(data):
        reader, reader_args = "file", {"file_root": str(data)}
    elif layout in ("folder", "manifest"):
        fd, list_path = tempfile.mkstemp(suffix=".txt", prefix="mediapipe-bench-dali-")
        rows = manifest_rows(data) if layout == "manifest" else flat_rows(data)
        with os.fdopen(fd, "w") as f:
            f.writelines(f"{p} {label}\n" for p, label in rows)
        reader, reader_args, cleanup = "file", {"file_list": list_path}, [list_path]
    else:  # DALI reads the shards and their index files directly; the .cls labels are not decoded
        tars, indices = converted_shards(data)
        reader, reader_args = "webdataset", {"paths": tars, "index_paths": indices,
                                             "ext": [";".join(IMAGE_EXTENSIONS)]}
    mean = [m * 255 for m in IMAGENET_MEAN]
    std = [s * 255 for s in IMAGENET_STD]
    decoder_device = "mixed" if cuda else "cpu"
    scenario, side = sized(scenario)

    @pipeline_def(batch_size=batch_size, num_threads=workers, device_id=0 if cuda else None, seed=0)
    def pipeline() -> Any:
        if reader == "file":
            jpegs, labels = fn.readers.file(**reader_args, random_shuffle=scenario != EVAL, name="Reader")
        else:
            jpegs = fn.readers.webdataset(**reader_args, random_shuffle=scenario != EVAL, name="Reader")
            labels = None
        if scenario == RECIPE:
            images = _dali_recipe(fn, types, fn.decoders.image_random_crop(jpegs, device=decoder_device,
                                                                       output_type=types.RGB), mean, std)
        elif scenario == TRAIN:
            images = fn.decoders.image_random_crop(jpegs, device=decoder_device, output_type=types.RGB)
            images = fn.resize(images, resize_x=side, resize_y=side)
            images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(), mean=mean, std=std,
                                              output_layout="CHW", dtype=types.FLOAT)
        else:
            images = fn.decoders.image(jpegs, device=decoder_device, output_type=types.RGB)
            images = fn.resize(images, resize_shorter=256)
            images = fn.crop_mirror_normalize(images, crop=(224, 224), mean=mean, std=std,
                                              output_layout="CHW", dtype=types.FLOAT)
        return (images, labels) if labels is not None else images

    pipe = pipeline(enable_conditionals=scenario == RECIPE)  # trivial_augment_wide picks ops with `if`
    pipe.build()
    iterator = DALIGenericIterator(pipe, ["image", "label"] if reader == "file" else ["image"], reader_name="Reader",
                                   last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)

    def close() -> None:
        for path in cleanup:
            Path(path).unlink(missing_ok=True)

    return EpochStream(lambda: iterator, buffered=2, on_close=close,
                       samples=lambda outputs: touch_image(outputs[0]))


def _dali_recipe(fn: Any, types: Any, images: Any, mean: list[float], std: list[float]) -> Any:
    """image-train-recipe in DALI's own operators: resize 224, a coin-flip mirror, its
    ``trivial_augment_wide`` (nearest, fill 0: torchvision's settings; DALI's op definitions and
    draws), crop_mirror_normalize, and torchvision's RandomErasing(p=0.1) drawn with DALI's random
    operators (area 2-33 %, log-uniform aspect 0.3-3.3, clamped to the image instead of redrawn)."""
    import math

    from nvidia.dali import math as dmath
    from nvidia.dali.auto_aug import trivial_augment

    images = fn.resize(images, resize_x=224, resize_y=224)
    images = fn.flip(images, horizontal=fn.random.coin_flip())
    images = trivial_augment.trivial_augment_wide(images, fill_value=0, interp_type=types.INTERP_NN)
    images = fn.crop_mirror_normalize(images, mean=mean, std=std, output_layout="CHW", dtype=types.FLOAT)
    area = fn.random.uniform(range=(0.02, 0.33)) * (224.0 * 224.0)
    ratio = dmath.exp(fn.random.uniform(range=(math.log(0.3), math.log(3.3))))
    erase = fn.cast(fn.random.coin_flip(probability=0.1), dtype=types.FLOAT)
    height = dmath.min(dmath.sqrt(area * ratio), 224.0) * erase
    width = dmath.min(dmath.sqrt(area / ratio), 224.0) * erase
    anchor = fn.stack(fn.random.uniform(range=(0.0, 1.0)) * (224.0 - height),
                      fn.random.uniform(range=(0.0, 1.0)) * (224.0 - width))
    return fn.erase(images, anchor=anchor, shape=fn.stack(height, width), axis_names="HW", fill_value=0.0)


OPENERS = {"mediapipe": open_mediapipe, "mediapipe-cached": open_mediapipe_cached,
           "mediapipe-cache-fill": functools.partial(open_mediapipe_cached, fill=True), "mediapipe-dali": open_mediapipe_dali, "torchvision": open_torchvision,
           "torchvision-gpu": open_torchvision_gpu, "dali": open_dali,
           "mediapipe-hf": hf.open_mediapipe_hf, "hf-datasets": hf.open_hf_datasets,  # hf: the images as Parquet
           "ffcv": ffcv_peer.open_ffcv}


def open_stream(scenario: str, backend: str, data: Path, *, device: str, workers: int, batch_size: int,
                options: dict[str, Any]) -> Stream:
    return OPENERS[backend](scenario, data, device=device, workers=workers, batch_size=batch_size, options=options)
