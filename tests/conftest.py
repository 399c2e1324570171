"""Shared fixtures: small datasets of photographic-looking media, generated per session."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mediapipe.synthetic import imagenet_like_sizes, jpeg_bytes, photo_like


def write_image_folder(root: Path, count: int, classes: int = 3, seed: int = 0, scale: float = 0.5) -> Path:
    """``count`` JPEGs in ``classes`` class folders, ImageNet-like sizes times ``scale``."""
    rng = np.random.default_rng(seed)
    for i, (h, w) in enumerate(imagenet_like_sizes(rng, count)):
        folder = root / f"class{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        h, w = max(32, int(h * scale)), max(32, int(w * scale))
        (folder / f"img{i:04d}.jpg").write_bytes(jpeg_bytes(photo_like(h, w, seed * 100_000 + i), quality=90))
    return root


def state_after(loader, batches: int) -> dict:
    """The loader's state_dict() after ``batches`` delivered batches of an interrupted epoch."""
    it = iter(loader)
    for _ in range(batches):
        next(it)
    state = loader.state_dict()
    it.close()
    return state


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 JPEGs (about 150-250 px on the shorter side) in 3 class folders."""
    return write_image_folder(tmp_path_factory.mktemp("images"), 24)


@pytest.fixture(scope="session")
def image_manifest(image_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSON-lines manifest over ``image_folder`` with labels and a numeric ``weight`` field."""
    path = tmp_path_factory.mktemp("manifest") / "train.jsonl"
    files = sorted(image_folder.rglob("*.jpg"))
    with open(path, "w") as f:
        for i, p in enumerate(files):
            f.write(json.dumps({"path": str(p), "label": int(p.parent.name[-1]), "weight": 0.5 + i}) + "\n")
    return path


@pytest.fixture(scope="session")
def detection_dataset(tmp_path_factory: pytest.TempPathFactory):
    """16 photos with 1-5 flat-coloured objects each (some none, some crowd), as COCO
    annotations (polygons and RLE) and YOLO label files (`mediapipe.synthetic.detection`)."""
    from mediapipe.synthetic.detection import write_detection_dataset

    return write_detection_dataset(tmp_path_factory.mktemp("detection"), count=16, seed=3, flat=True, yolo=True,
                                   empty=0.15, crowd=0.2)
