"""The GPU path on a CUDA device: ``pytest -m gpu``. Each test runs one of
`mediapipe.gpu_checks` (what ``mediapipe selfcheck`` runs without pytest) on the GPU; without
a CUDA device they skip, through the ``cuda`` fixture. The same checks run on the CPU in
tests/test_selfcheck.py."""

from __future__ import annotations

import pytest
import torch

from mediapipe import gpu_checks

pytestmark = pytest.mark.gpu


@pytest.fixture
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    return torch.device("cuda")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("gpu")


@pytest.mark.parametrize("name", list(gpu_checks.CHECKS))
def test_gpu_check(name, cuda, work):
    facts = gpu_checks.CHECKS[name](work, cuda)
    assert isinstance(facts, dict)


def test_the_selfcheck_runs_on_the_gpu_at_small_sizes(cuda, work):
    """Every step on cuda, the peers included (torchvision's GPU pipeline, DALI where installed)."""
    from mediapipe import selfcheck

    report = selfcheck.run(selfcheck.Plan.make("cuda", quick=True, cache_dir=work), say=lambda line: None)
    assert report["ok"], [c for c in report["checks"] if not c["ok"]]
    rows = [r for part in report["bench"].values() for r in part["results"]]
    ran = {(r["scenario"], r["backend"], r["device"]) for r in rows if r["error"] is None}
    assert {("image-train", "mediapipe", "cuda"), ("image-train", "torchvision-gpu", "cuda"),
            ("video-clips", "mediapipe", "cuda")} <= ran
    assert report["gpu_memory"]["before"] is not None and report["gpu_memory"]["after"] is not None
