"""Shared fixtures: small datasets of photographic-looking media, generated per session."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import write_image_folder

# The Rays the tests start themselves (clusters standing for a user's) would run their workers at
# niceness 15, Ray's default: on a loaded CI machine they starve behind the other tests
os.environ.setdefault("RAY_worker_niceness", "0")


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
