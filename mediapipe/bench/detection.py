"""The detection-train scenario: a COCO-format dataset through an SSD-style training pipeline, on
this library's loader, torchvision v2 in a DataLoader, and DALI's COCO pipeline on the CPU.

Every backend reads the same JPEGs and annotation file, leaving out the images without objects
(as detection training does, and torchvision's IoU crop needs boxes), and does, per image: an IoU crop (SSD's
random crop: a region whose overlap with some object passes a drawn threshold), a horizontal
flip (p=0.5) moving the boxes with the pixels, a resize to SIZE x SIZE, dropping the boxes a
crop left degenerate (with their labels), and normalisation to float32 (ImageNet mean and
std). Batches hold (B, 3, SIZE, SIZE) images and each image's boxes and labels (lists, or DALI's
padded tensors).

- mediapipe: ``mp.loaders.coco`` + ``RandomIoUCrop``, ``Resize``, ``SanitizeBoundingBoxes``,
  ``HorizontalFlip``, ``Normalize`` (the crop, the flip and the resize move the boxes).
- torchvision: ``CocoDetection`` wrapped for transforms v2 (``tv_tensors``) + ``RandomIoUCrop``,
  ``RandomHorizontalFlip``, ``Resize``, ``SanitizeBoundingBoxes``, ``ToDtype``, ``Normalize``
  in a ``DataLoader`` with the same workers.
- dali: ``fn.readers.coco`` + ``fn.random_bbox_crop`` + ``fn.decoders.image_slice`` (the crop
  decoded only) + ``fn.bb_flip`` + ``fn.resize`` + ``fn.crop_mirror_normalize`` on the CPU
  (``device_id=None``), ``workers`` threads; boxes and labels padded per batch (``fn.pad``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mediapipe.bench.image_data import IMAGENET_MEAN, IMAGENET_STD, coco_paths
from mediapipe.bench.images import dataloader_stream
from mediapipe.bench.long_epoch import RepeatedSource, passes
from mediapipe.bench.streams import EpochStream, Stream, loader_stages, touch_image

SCENARIO = "detection-train"
SIZE = 320
IOU_THRESHOLDS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9)  # SSD's, as torchvision's RandomIoUCrop and DALI draw them
CROP_SCALE = (0.3, 1.0)
CROP_ASPECT = (0.5, 2.0)
CROP_TRIALS = 40


# -- this library ------------------------------------------------------------------------
def mediapipe_ops() -> list[Any]:
    """The scenario's ops: the IoU crop (fused into the JPEG decode: only its region is decoded),
    the resize and the sanitize step in the sample stage; the flip is done by Normalize while it
    writes the batch (on the CPU), and still moves the boxes."""
    from mediapipe import augment as A

    return [A.RandomIoUCrop(min_scale=CROP_SCALE[0], max_scale=CROP_SCALE[1], min_aspect_ratio=CROP_ASPECT[0],
                            max_aspect_ratio=CROP_ASPECT[1], sampler_options=(*IOU_THRESHOLDS, 2.0),
                            trials=CROP_TRIALS),
            A.Resize((SIZE, SIZE)), A.SanitizeBoundingBoxes(), A.HorizontalFlip(),
            A.Normalize(IMAGENET_MEAN, IMAGENET_STD)]


def mediapipe_pipeline(data: Path, device: str, batch_size: int, seed: int = 0,
                       options: dict[str, Any] | None = None) -> Any:
    import mediapipe as mp

    annotations, images = coco_paths(data)
    source = mp.loaders.coco(annotations, images, drop_empty=True)
    times = passes(options or {}, batch_size, len(source))
    source = RepeatedSource(source, times) if times > 1 else source
    return mp.Pipeline(source=source, decode={"image": mp.decoders.image()}, augment=mediapipe_ops(),
                       batch_size=batch_size, seed=seed, device=device)


def open_mediapipe(data: Path, *, device: str, workers: int, batch_size: int, options: dict[str, Any]) -> Stream:

    pipe = mediapipe_pipeline(data, device, batch_size, options=options)
    kwargs = {"worker_type": options["worker_type"]} if options.get("worker_type") else {}
    loader = pipe.loader(num_workers=workers, shuffle=True, drop_last=True, **kwargs)
    prefetch = getattr(loader, "prefetch", 2)
    return EpochStream(lambda: loader, buffered=max(1, workers) * prefetch + 1,
                       stats=lambda: loader_stages(loader), samples=touch_image)


# -- torchvision baseline -------------------------------------------------------------------
def torchvision_transform() -> Any:
    import torch
    from torchvision.transforms import v2

    return v2.Compose([
        v2.ToImage(),
        v2.RandomIoUCrop(min_scale=CROP_SCALE[0], max_scale=CROP_SCALE[1], min_aspect_ratio=CROP_ASPECT[0],
                         max_aspect_ratio=CROP_ASPECT[1], sampler_options=[*IOU_THRESHOLDS, 2.0], trials=CROP_TRIALS),
        v2.RandomHorizontalFlip(),
        v2.Resize((SIZE, SIZE), antialias=True),
        v2.SanitizeBoundingBoxes(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


def collate_detection(batch: list[tuple[Any, dict[str, Any]]]) -> tuple[Any, list[dict[str, Any]]]:
    """Images stacked (one size after the resize), targets as a list: what detection models take."""
    import torch

    return torch.stack([image for image, _ in batch]), [target for _, target in batch]


def open_torchvision(data: Path, *, device: str, workers: int, batch_size: int, options: dict[str, Any]) -> Stream:
    """CocoDetection (Pillow, pycocotools) wrapped for transforms v2 + DataLoader, same workers."""
    from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2

    annotations, images = coco_paths(data)
    dataset = CocoDetection(str(images), str(annotations), transforms=torchvision_transform())
    dataset.ids = [i for i in dataset.ids if dataset.coco.getAnnIds(imgIds=i)]  # as torchvision's references do
    dataset = wrap_dataset_for_transforms_v2(dataset, target_keys=("boxes", "labels", "image_id"))
    return dataloader_stream(dataset, device=device, workers=workers, batch_size=batch_size, shuffle=True,
                             options=options, collate_fn=collate_detection)


# -- DALI by hand -----------------------------------------------------------------------------
def open_dali(data: Path, *, device: str, workers: int, batch_size: int, options: dict[str, Any]) -> Stream:
    """DALI's COCO training pipeline (as its SSD example), CPU operators with device_id=None, or
    the mixed (nvJPEG) slice decoder on a GPU."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    if workers < 1:
        raise ValueError("DALI needs at least one thread: use --workers 1 or more")
    annotations, images = coco_paths(data)
    cuda = device.startswith("cuda")
    mean = [m * 255 for m in IMAGENET_MEAN]
    std = [s * 255 for s in IMAGENET_STD]

    @pipeline_def(batch_size=batch_size, num_threads=workers, device_id=0 if cuda else None, seed=0)
    def pipeline() -> Any:
        jpegs, boxes, labels = fn.readers.coco(file_root=str(images), annotations_file=str(annotations), ltrb=True,
                                               ratio=True, skip_empty=True, random_shuffle=True, name="Reader")
        begin, size, boxes, labels = fn.random_bbox_crop(
            boxes, labels, aspect_ratio=list(CROP_ASPECT), scaling=list(CROP_SCALE), thresholds=list(IOU_THRESHOLDS),
            bbox_layout="xyXY", allow_no_crop=True, num_attempts=CROP_TRIALS)
        pixels = fn.decoders.image_slice(jpegs, begin, size, device="mixed" if cuda else "cpu", output_type=types.RGB)
        flip = fn.random.coin_flip()
        boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
        pixels = fn.resize(pixels, resize_x=SIZE, resize_y=SIZE)
        pixels = fn.crop_mirror_normalize(pixels, mirror=flip, mean=mean, std=std, output_layout="CHW",
                                          dtype=types.FLOAT)
        return pixels, fn.pad(boxes, fill_value=0.0), fn.pad(labels, fill_value=-1)

    pipe = pipeline()
    pipe.build()
    iterator = DALIGenericIterator(pipe, ["image", "boxes", "labels"], reader_name="Reader",
                                   last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)
    return EpochStream(lambda: iterator, buffered=2, samples=lambda outputs: touch_image(outputs[0]))


OPENERS = {"mediapipe": open_mediapipe, "torchvision": open_torchvision, "dali": open_dali}


def open_stream(backend: str, data: Path, *, device: str, workers: int, batch_size: int,
                options: dict[str, Any]) -> Stream:
    return OPENERS[backend](data, device=device, workers=workers, batch_size=batch_size, options=options)
