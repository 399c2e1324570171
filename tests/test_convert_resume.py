"""A conversion SIGKILLed at any moment and resumed equals an uninterrupted run, byte for byte."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from mediapipe.dataset.convert import convert
from mediapipe.dataset.manifest import read_manifest
from mediapipe.dataset.transcode import TranscodeOptions
from tests.helpers import cli_argv, write_image_folder

OPTIONS = ["--shard-size", "3", "--seed", "7", "--image-max-side", "64", "--no-progress"]


@pytest.fixture(scope="module")
def source_and_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    src = write_image_folder(tmp_path_factory.mktemp("src"), 10, scale=0.25)
    ref = tmp_path_factory.mktemp("ref") / "out"
    convert(src, ref, shard_size=3, seed=7, options=TranscodeOptions(image_max_side=64))
    return src, _tree(ref)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _run(src: Path, out: Path, *extra: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cli_argv("convert", str(src), str(out), *OPTIONS, *extra, kill_at=kill_at),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kill_at, workers", [
    ("sample:5", 1),   # mid-shard: a partial tar on disk, shard 0 committed
    ("shard:2", 1),    # shard 1 renamed into place, manifest not yet rewritten
    ("commit:4", 2),   # the last shard committed, samples.jsonl.gz not yet written (2 workers)
])
def test_resume_after_sigkill_equals_an_uninterrupted_run(source_and_reference, tmp_path: Path,
                                                          kill_at: str, workers: int) -> None:
    src, reference = source_and_reference
    out = tmp_path / "out"
    killed = _run(src, out, "--workers", str(workers), kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    manifest = read_manifest(out)
    assert not manifest["complete"]
    assert _tree(out) != reference
    resumed = _run(src, out, "--resume", "--workers", str(workers))
    assert resumed.returncode == 0, resumed.stderr
    assert _tree(out) == reference


def test_resume_refuses_other_settings(source_and_reference, tmp_path: Path) -> None:
    src, _ = source_and_reference
    out = tmp_path / "out"
    convert(src, out, shard_size=3, seed=7, options=TranscodeOptions(image_max_side=64))
    with pytest.raises(ValueError, match="inputs or settings differ"):
        convert(src, out, shard_size=3, seed=8, resume=True, options=TranscodeOptions(image_max_side=64))
    again = convert(src, out, shard_size=3, seed=7, resume=True, options=TranscodeOptions(image_max_side=64))
    assert again.num_samples == 10 and again.resumed_shards == 4
