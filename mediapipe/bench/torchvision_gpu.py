"""torchvision's GPU pipeline, the peer of this library's device decode on the image scenarios:
DataLoader workers only read each file's bytes, the training process decodes the whole batch
with ``torchvision.io.decode_jpeg(list, device="cuda")`` (nvJPEG), then transforms v2 run on
the GPU: the crop (image-train: RandomResizedCrop 224 and a horizontal flip; image-eval:
resize 256, centre crop 224) per image, whose sizes differ until then, and the conversion to
float and the normalisation on the stacked batch. It is what torchvision's documentation
suggests for GPU decoding, written as a user would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mediapipe.bench.image_data import (
    IMAGE_EXTENSIONS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    TRAIN,
    converted_images,
    dataset_layout,
    flat_rows,
    has_class_folders,
    manifest_rows,
)
from mediapipe.bench.long_epoch import Repeat, passes
from mediapipe.bench.streams import EpochStream, Stream, touch_image


class _FileBytes:
    """(uint8 tensor of the file's bytes, label) per image: all a worker does."""

    def __init__(self, rows: list[tuple[Any, int]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        where, label = self.rows[i]
        if isinstance(where, str):
            data = Path(where).read_bytes()
        else:  # an image inside a converted dataset's shard
            with open(where.tar, "rb") as f:
                f.seek(where.offset)
                data = f.read(where.size)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8), label


def _as_lists(batch: list[tuple[Any, int]]) -> tuple[list[Any], Any]:
    return [b for b, _ in batch], torch.tensor([label for _, label in batch])


def image_rows(data: Path) -> list[tuple[Any, int]]:
    """(path or shard member, label) of every image, as the torchvision baseline reads them."""
    layout = dataset_layout(data)
    if layout == "folder" and has_class_folders(data):  # ImageFolder's order and labels
        classes = sorted(p.name for p in data.iterdir() if p.is_dir() and not p.name.startswith("."))
        return [(str(path), label) for label, name in enumerate(classes) for path in sorted((data / name).rglob("*"))
                if path.is_file() and path.suffix.lower().lstrip(".") in IMAGE_EXTENSIONS]
    if layout == "folder":
        return flat_rows(data)
    if layout == "manifest":
        return manifest_rows(data)
    return [(item, item.label) for item in converted_images(data)]


def gpu_transforms(scenario: str) -> tuple[Any, Any]:
    """(per-image geometry, batch conversion) of the scenario, as transforms v2."""
    from torchvision.transforms import v2

    if scenario == TRAIN:
        geometry = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
    else:
        geometry = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224)])
    return geometry, v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def open_torchvision_gpu(scenario: str, data: Path, *, device: str, workers: int, batch_size: int,
                         options: dict[str, Any]) -> Stream:
    """Workers read bytes; ``decode_jpeg(..., device="cuda")`` per batch; transforms v2 on the GPU."""
    from torchvision.io import ImageReadMode, decode_jpeg

    if not device.startswith("cuda"):
        raise NotImplementedError("not applicable: torchvision's GPU pipeline decodes on a CUDA GPU")
    rows = image_rows(data)
    dataset = Repeat(_FileBytes(rows), passes(options, batch_size, len(rows)))
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=scenario == TRAIN,
                                         num_workers=workers, drop_last=True, collate_fn=_as_lists)
    geometry, convert = gpu_transforms(scenario)
    target = torch.device(device)

    def epoch() -> Any:
        for datas, labels in loader:
            images = decode_jpeg(datas, mode=ImageReadMode.RGB, device=target)
            batch = convert(torch.stack([geometry(image) for image in images]))
            yield {"image": batch, "label": labels.to(target, non_blocking=True)}

    return EpochStream(epoch, buffered=workers * 2 if workers else 0, samples=touch_image)
