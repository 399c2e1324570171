"""``mediapipe selfcheck --device cpu --quick``: the GPU self-check's every step, end to end on
the CPU at the smallest sizes (nvImageCodec's CPU backend standing in for nvJPEG), in a process
where nothing outside the self-check's stated needs can be imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mediapipe.bench import scenarios
from mediapipe.checks import gpu as gpu_checks
from mediapipe.checks import selfcheck

pytest.importorskip("nvidia.nvimgcodec")
pytest.importorskip("torchvision")
# what the self-check must not need: it runs where torch, torchvision and torchaudio are
# preinstalled and only PyAV, nvImageCodec, simplejpeg and soxr are brought along
NOT_NEEDED = ("yaml", "tqdm", "pytest", "matplotlib", "datasets", "pyarrow", "ray", "webdataset", "lhotse",
              "tfrecord", "crc32c", "soundfile", "imageio_ffmpeg", "torchcodec", "pycocotools", "fsspec", "moto")


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory) -> tuple[dict, str]:
    root = tmp_path_factory.mktemp("selfcheck")
    blocked = root / "blocked"
    for name in NOT_NEEDED:  # importing one of these fails, in every process the command starts
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('the self-check imported {name}')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), os.environ.get("PYTHONPATH", "")])}
    out = root / "selfcheck.json"
    proc = subprocess.run([sys.executable, "-m", "mediapipe.cli", "selfcheck", "--device", "cpu", "--quick",
                           "--json", str(out), "--cache-dir", str(root / "cache")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_every_check_passes_on_the_cpu(quick_report):
    report, stdout = quick_report
    assert [c["name"] for c in report["checks"]] == list(gpu_checks.CHECKS)
    assert all(c["ok"] for c in report["checks"]), [c for c in report["checks"] if not c["ok"]]
    facts = {c["name"]: c["facts"] for c in report["checks"]}
    assert facts["device_decode"]["decoded_on"] == "device" and facts["device_decode"]["max_abs_error"] <= 1
    assert facts["batch_stage_speed"]["images_per_s"] > 0 and facts["batch_stage_speed"]["meets_target"] is None
    assert report["ok"] and "checks passed" in stdout


def test_the_benchmark_steps_ran_in_the_same_run(quick_report):
    report, stdout = quick_report
    assert set(report["bench"]) == {"device", "video", "cpu_scaling"}
    ran = {(r["scenario"], r["backend"], r["workers"]) for part in report["bench"].values() for r in part["results"]
           if r["error"] is None and r["samples_per_s"]}
    assert {("image-train", "mediapipe", 1), ("image-train", "torchvision", 1), ("video-clips", "mediapipe", 1),
            ("video-clips", "pyav", 1), ("image-train", "mediapipe", 2)} <= ran
    if scenarios._installed("nvidia.dali"):
        assert {("image-train", "dali", 1), ("image-train", "dali", 2)} <= ran  # the CPU scaling's peer
    assert "== cpu_scaling ==" in stdout


def test_no_gpu_memory_or_targets_on_the_cpu(quick_report):
    report, _ = quick_report
    assert report["gpu_memory"]["before"] is None and report["gpu_memory"]["after"] is None
    assert report["targets"] == [] and report["device"] == "cpu"


def test_targets_compare_the_gpu_rows_with_the_issues_figures():
    bench = {"ratios": [
        {"scenario": "image-train", "device": "cuda", "peer": "dali", "ratio": 1.1},
        {"scenario": "image-train", "device": "cuda", "peer": "torchvision-gpu", "ratio": 1.2},
        {"scenario": "image-eval", "device": "cuda", "peer": "dali", "ratio": 0.5},
        {"scenario": "image-train", "device": "cpu", "peer": "dali", "ratio": 0.5}]}
    checks = [{"name": "batch_stage_speed", "facts": {"images_per_s": 25_000, "target_images_per_s": 20_000,
                                                      "meets_target": True}}]
    got = {t["what"]: (t["value"], t["target"], t["met"]) for t in selfcheck.targets(bench, checks)}
    assert got == {"image-train on cuda, mediapipe / dali": (1.1, 1.0, True),
                   "image-train on cuda, mediapipe / torchvision-gpu": (1.2, 1.5, False),
                   "batch-stage ops alone at 224x224, images/s": (25_000, 20_000, True)}


def test_torchvision_gpu_runs_on_cuda_only():
    train = scenarios.SCENARIOS["image-train"]
    assert scenarios.why_not(train, "torchvision-gpu", "cpu").startswith("not applicable")
    assert scenarios.why_not(scenarios.SCENARIOS["video-clips"], "torchvision-gpu", "cuda").startswith("not applicable")


def test_a_missing_need_is_named_with_a_non_zero_exit(tmp_path):
    """simplejpeg and soxr failing to import: one line naming them and how to install them, exit
    status 2, no traceback (before, the checks failed on an AttributeError deep in a decoder)."""
    for name in ("simplejpeg", "soxr"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('not here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "mediapipe.cli", "selfcheck", "--device", "cpu", "--quick",
                           "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "needs simplejpeg, soxr" in proc.stderr and "pip install simplejpeg soxr" in proc.stderr


def test_cuda_asked_for_without_cuda_is_a_clear_refusal(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "mediapipe.cli", "selfcheck", "--device", "cuda", "--quick",
                           "--cache-dir", str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "torch sees no CUDA device" in proc.stderr
