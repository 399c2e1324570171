"""What the image scenarios read and do, shared by every backend that runs them (`images`, `hf`,
`torchvision_gpu`, `detection`, `remote_backends`): the dataset forms (a folder of class
sub-folders or of images, a JSON-lines manifest, a converted dataset), the scenarios' names,
and their ops, as this library's ops and as torchvision's transforms v2.

image-train: RandomResizedCrop(224), horizontal flip (p=0.5), normalise (ImageNet mean/std),
float32 (B, 3, 224, 224). image-eval: resize the shorter side to 256, centre crop 224,
normalise. image-train-recipe: torchvision's classification recipe, image-train with
TrivialAugmentWide after the flip and RandomErasing(p=0.1) after normalising.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mediapipe import augment as A
from mediapipe.dataset.index import read_index
from mediapipe.dataset.manifest import read_manifest
from mediapipe.dataset.sample_records import read_samples

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
TRAIN, EVAL = "image-train", "image-eval"
RECIPE = "image-train-recipe"
CROP = 224  # the output side of the image scenarios
TRAIN_SIDES = (128, 160, 192)  # image-train-<side>: image-train at progressive resizing's smaller sizes
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp")


def sized(scenario: str) -> tuple[str, int]:
    """(the scenario it is, its output side): ``image-train-160`` is image-train at 160 x 160;
    every other scenario at its own side."""
    head, _, side = scenario.rpartition("-")
    if head == TRAIN and side.isdigit() and int(side) in TRAIN_SIDES:
        return TRAIN, int(side)
    return scenario, CROP


# -- the dataset forms -------------------------------------------------------------------------
def dataset_layout(data: Path) -> str:
    """"folder" (class sub-folders), "manifest" (a .jsonl file) or "converted" (shards)."""
    if data.is_file() and data.suffix == ".jsonl":
        return "manifest"
    if data.is_dir() and (data / "manifest.json").is_file():
        return "converted"
    if data.is_dir():
        return "folder"
    raise FileNotFoundError(f"{data}: expected a folder of images, a .jsonl manifest or a converted dataset")


def has_class_folders(data: Path) -> bool:
    return any(p.is_dir() and not p.name.startswith(".") for p in data.iterdir())


def flat_rows(data: Path) -> list[tuple[str, int]]:
    """(path, 0) for the images of a folder without class sub-folders (ImageFolder and DALI's
    file_root want class folders; such a folder is read as an unlabelled list instead)."""
    return [(str(p), 0) for p in sorted(data.iterdir())
            if p.is_file() and p.suffix.lower().lstrip(".") in IMAGE_EXTENSIONS and not p.name.startswith(".")]


def manifest_rows(path: Path) -> list[tuple[str, int]]:
    """(absolute path, label) per line of a JSON-lines manifest (label 0 where absent)."""
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            p = Path(row["path"])
            rows.append((str(p if p.is_absolute() else path.parent / p), int(row.get("label", 0))))
    return rows


@dataclass(frozen=True)
class ShardImage:
    """An image inside a converted dataset's tar shard: its bytes are ``size`` at ``offset``."""

    tar: str
    offset: int
    size: int
    label: int


def coco_paths(data: Path) -> tuple[Path, Path]:
    """(annotation file, images folder) of a detection dataset: a folder holding
    ``annotations.json`` and ``images/`` (the built-in sample-detection), or a COCO ``.json``
    file whose images lie beside it."""
    data = Path(data)
    if data.is_file():
        return data, data.parent
    if (data / "annotations.json").is_file():
        return data / "annotations.json", data / "images" if (data / "images").is_dir() else data
    raise FileNotFoundError(f"{data}: expected a COCO annotation file, or a folder with annotations.json and images/")


def converted_images(data: Path) -> list[ShardImage]:
    """Every image of a converted dataset, located through the shards' DALI index files."""
    manifest = read_manifest(data)
    labels = {r["key"]: int(r.get("label", 0) or 0) for r in read_samples(data)}
    out = []
    for shard in manifest["shards"]:
        tar = str(data / shard["name"])
        for members in read_index(data / shard["idx"]):
            for m in members:
                key, ext = m.name.split(".", 1)
                if ext.lower() in IMAGE_EXTENSIONS:
                    out.append(ShardImage(tar, m.offset, m.size, labels.get(key, 0)))
    return out


def converted_shards(data: Path) -> tuple[list[str], list[str]]:
    """(tar paths, index paths) of a converted dataset, in the manifest's order."""
    manifest = read_manifest(data)
    return ([str(data / s["name"]) for s in manifest["shards"]], [str(data / s["idx"]) for s in manifest["shards"]])


# -- the ops ----------------------------------------------------------------------------------
def scenario_ops(scenario: str) -> list[Any]:
    """The ops of an image scenario; the first is fused into the decoder."""
    scenario, side = sized(scenario)
    if scenario == TRAIN:
        return [A.RandomResizedCrop(side), A.HorizontalFlip(p=0.5), A.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    if scenario == RECIPE:
        return [A.RandomResizedCrop(224), A.HorizontalFlip(p=0.5), A.TrivialAugmentWide(),
                A.Normalize(IMAGENET_MEAN, IMAGENET_STD), A.RandomErasing(p=0.1)]
    return [A.Resize(256), A.CenterCrop(224), A.Normalize(IMAGENET_MEAN, IMAGENET_STD)]


def torchvision_transform(scenario: str) -> Any:
    """The same scenario as torchvision's transforms v2 on a Pillow image (the baselines')."""
    import torch
    from torchvision.transforms import v2

    scenario, side = sized(scenario)
    if scenario == TRAIN:
        geometry = [v2.RandomResizedCrop(side, antialias=True), v2.RandomHorizontalFlip()]
    elif scenario == RECIPE:  # the policy on the Pillow image, as torchvision's reference presets do
        geometry = [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), v2.TrivialAugmentWide()]
    else:
        geometry = [v2.Resize(256, antialias=True), v2.CenterCrop(224)]
    erase = [v2.RandomErasing(p=0.1)] if scenario == RECIPE else []
    return v2.Compose([*geometry, v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(IMAGENET_MEAN, IMAGENET_STD), *erase])
