"""The bench's beyond-one-machine rows: shards over HTTP against the same shards on disk, and
``--backend ray`` asking for the local loader and the Ray one in the same run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from mediapipe.bench import scenarios
from mediapipe.cli import main
from mediapipe.cli.bench import add_arguments, settings_from_args
from mediapipe.dataset.convert import convert
from tests.helpers import write_image_folder


def test_backend_ray_runs_the_local_loader_and_the_ray_one_on_request_only():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = settings_from_args(parser.parse_args(["--backend", "ray", "--scenario", "image-train"]))
    assert settings.backends == ["mediapipe", "mediapipe-ray"]
    train = scenarios.SCENARIOS["image-train"]
    assert "mediapipe-ray" not in train.backends and "mediapipe-http" not in train.backends  # not by default
    pytest.importorskip("ray")
    assert scenarios.why_not(train, "mediapipe-ray", "cpu") is None
    assert "not applicable" in scenarios.why_not(scenarios.SCENARIOS["audio-asr"], "mediapipe-ray", "cpu")


def test_shards_over_http_and_on_disk_in_one_run(tmp_path: Path):
    pytest.importorskip("aiohttp")
    src = write_image_folder(tmp_path / "src", 12, scale=0.3)
    convert(src, tmp_path / "shards", shard_size=5)
    out = tmp_path / "r.json"
    code = main(["bench", "--data", str(tmp_path / "shards"), "--scenario", "image-eval", "--backends",
                 "mediapipe,mediapipe-http", "--workers", "0", "--batches", "2", "--repeats", "1", "--warmup", "0",
                 "--batch-size", "4", "--device", "cpu", "--no-progress", "--json", str(out)])
    assert code == 0
    rows = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["mediapipe-http"]["error"] is None and rows["mediapipe-http"]["samples_per_s"] > 0
    assert rows["mediapipe"]["error"] is None
