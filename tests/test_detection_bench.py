"""`mediapipe bench --scenario detection-train`: this library, torchvision v2 in a DataLoader and
DALI's COCO pipeline on one generated COCO-format dataset in the same run; the built-in dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mediapipe.bench import datasets, detection, scenarios
from mediapipe.bench.scenarios import _installed
from mediapipe.cli import main
from mediapipe.synthetic.detection import write_detection_dataset


@pytest.fixture(scope="module")
def coco_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_detection_dataset(tmp_path_factory.mktemp("bench-coco"), count=20, seed=4, heights=(120, 160),
                                   widths=(160, 220), empty=0.1).root


@pytest.fixture(scope="module")
def bench_run(coco_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench-detection") / "r.json"
    code = main(["bench", "--data", str(coco_folder), "--scenario", "detection-train", "--workers", "1",
                 "--batches", "2", "--repeats", "1", "--warmup", "0", "--batch-size", "4", "--device", "cpu",
                 "--no-progress", "--json", str(out)])
    return {"code": code, "report": json.loads(out.read_text())}


def test_every_installed_peer_runs_in_the_same_run(bench_run: dict, coco_folder: Path) -> None:
    assert bench_run["code"] == 0
    report = bench_run["report"]
    rows = {r["backend"]: r for r in report["results"] if r["scenario"] == "detection-train"}
    assert set(rows) == {"mediapipe", "torchvision", "dali"}
    expected = {"mediapipe"} | ({"torchvision"} if _installed("torchvision") and _installed("pycocotools") else set()) \
        | ({"dali"} if _installed("nvidia.dali") else set())
    ran = {b for b, r in rows.items() if r["error"] is None}
    assert ran == expected, {b: r["error"] for b, r in rows.items()}
    for r in rows.values():
        if r["error"] is None:
            assert r["unit"] == "images" and r["samples_per_s"] > 0 and r["epochs"] > 0
    peers = {r["peer"] for r in report["ratios"] if r["scenario"] == "detection-train"}
    assert peers == expected - {"mediapipe"}
    info = report["data"]["detection-train"][coco_folder_label(report)]
    document = json.loads((coco_folder / "annotations.json").read_text())
    with_objects = len({a["image_id"] for a in document["annotations"]})
    assert info["layout"] == "coco" and info["images"] == 20 and info["samples"] == with_objects < 20
    assert info["objects_per_image"] > 1


def coco_folder_label(report: dict) -> str:
    return next(iter(report["data"]["detection-train"]))


def test_the_pipelines_give_the_same_kind_of_batch(coco_folder: Path) -> None:
    pipe = detection.mediapipe_pipeline(coco_folder, "cpu", 4)
    assert {str(t) for n, t in pipe.field_types.items() if n in ("boxes", "labels")} >= {"boxes (xyxy)"}
    batch = next(iter(pipe.loader(num_workers=0)))
    size = detection.SIZE
    assert batch["image"].shape == (4, 3, size, size) and batch["image"].dtype == torch.float32
    assert all(b.shape[1:] == (4,) and len(b) == len(v) for b, v in zip(batch["boxes"], batch["labels"]))
    assert all(((b >= 0) & (b <= size)).all() for b in batch["boxes"])
    pytest.importorskip("pycocotools")
    pytest.importorskip("torchvision")
    from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2

    annotations, images = detection.coco_paths(coco_folder)
    dataset = wrap_dataset_for_transforms_v2(CocoDetection(str(images), str(annotations),
                                                           transforms=detection.torchvision_transform()))
    image, target = dataset[1]
    assert image.shape == (3, size, size) and image.dtype == torch.float32
    assert target["boxes"].shape[1:] == (4,) and len(target["boxes"]) == len(target["labels"])


def test_coco_paths_take_a_folder_or_a_file(coco_folder: Path, tmp_path: Path) -> None:
    assert detection.coco_paths(coco_folder) == (coco_folder / "annotations.json", coco_folder / "images")
    assert detection.coco_paths(coco_folder / "annotations.json") == (coco_folder / "annotations.json", coco_folder)
    with pytest.raises(FileNotFoundError, match="annotations.json and images/"):
        detection.coco_paths(tmp_path)


def test_the_built_in_detection_dataset_is_made_once(tmp_path: Path) -> None:
    assert datasets.BUILTIN["sample-detection"] == "detection"
    assert scenarios.SCENARIOS["detection-train"].dataset == "sample-detection"
    path = datasets.prepare("sample-detection", root=tmp_path, count=6, seed=2, progress=False)
    marker = (path / datasets.MARKER).stat().st_mtime_ns
    assert datasets.prepare("sample-detection", root=tmp_path, count=6, seed=2, progress=False) == path
    assert (path / datasets.MARKER).stat().st_mtime_ns == marker  # not made again
    document = json.loads((path / "annotations.json").read_text())
    assert len(document["images"]) == 6 and all(480 <= i["width"] <= 640 for i in document["images"])
    info = datasets.describe(path, "detection")
    assert info["images"] == 6 and info["mean_bytes"] > 20_000 and 0.15 < info["mean_megapixels"] < 0.32
