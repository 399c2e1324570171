"""The Ray engine runs the same per-shard tasks as the local engine and writes the same dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediapipe.dataset.convert import convert
from mediapipe.dataset.transcode import TranscodeOptions
from tests.helpers import write_image_folder


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_ray_engine_equals_local_engine(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    src = write_image_folder(tmp_path / "src", 8, scale=0.25)
    options = TranscodeOptions(image_max_side=64)
    local = convert(src, tmp_path / "local", shard_size=3, seed=2, options=options)
    distributed = convert(src, tmp_path / "ray", shard_size=3, seed=2, options=options, engine="ray", workers=2)
    assert distributed.num_samples == local.num_samples == 8 and distributed.num_shards == 3
    assert _tree(tmp_path / "ray") == _tree(tmp_path / "local")
