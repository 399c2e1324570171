"""The training example runs end to end and learns something on separable classes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch

from mediapipe.synthetic import jpeg_bytes, photo_like


def test_train_classifier_example_learns(tmp_path: Path):
    # Two classes that differ in colour cast, so a few steps of a tiny CNN can separate them.
    for c in range(2):
        (tmp_path / f"c{c}").mkdir()
        for i in range(24):
            img = photo_like(72, 96, seed=1000 * c + i).astype(np.int16)
            img[..., c] += 80
            (tmp_path / f"c{c}" / f"{i}.jpg").write_bytes(jpeg_bytes(np.clip(img, 0, 255).astype(np.uint8)))
    path = Path(__file__).parents[1] / "examples" / "train_classifier.py"
    spec = importlib.util.spec_from_file_location("train_classifier", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    losses = module.main([str(tmp_path), "--steps", "12", "--workers", "2", "--batch-size", "16",
                          "--size", "32", "--device", "cpu"])
    assert len(losses) == 12 and all(np.isfinite(losses))
    assert np.mean(losses[-3:]) < np.mean(losses[:3])
