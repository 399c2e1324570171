"""The examples run end to end on generated data: the image classifier (learning, evaluation, checkpoint,
resume after --max-steps and after Ctrl-C), the video classifier, the speech-features model and
torchvision's classification recipes by their flags (train_recipe)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from mediapipe.synthetic import jpeg_bytes, photo_like

EXAMPLES = Path(__file__).parents[1] / "examples"


@pytest.fixture
def examples(monkeypatch: pytest.MonkeyPatch):
    """Load an example as a module, with examples/ on sys.path as when it runs as a script."""
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="module")
def tinted_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two classes that differ in colour cast, so a few steps of a tiny CNN can separate them."""
    root = tmp_path_factory.mktemp("tinted")
    for c in range(2):
        (root / f"c{c}").mkdir()
        for i in range(30):
            img = photo_like(72, 96, seed=1000 * c + i).astype(np.int16)
            img[..., c] += 80
            (root / f"c{c}" / f"{i}.jpg").write_bytes(jpeg_bytes(np.clip(img, 0, 255).astype(np.uint8)))
    return root


def classifier_args(data: Path, checkpoint: Path, *extra: str) -> list[str]:
    # 27 training images per class after the held-out split: 3 batches of 16 per epoch
    return [str(data), "--checkpoint", str(checkpoint), "--epochs", "2", "--batch-size", "16", "--size", "32",
            "--workers", "0", "--device", "cpu", "--log-every", "1", *extra]


@pytest.fixture(scope="module")
def uninterrupted(tinted_images: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    import importlib

    sys.path.insert(0, str(EXAMPLES))
    try:
        module = importlib.import_module("train_classifier")
        checkpoint = tmp_path_factory.mktemp("full") / "c.pt"
        return {**module.main(classifier_args(tinted_images, checkpoint)), "checkpoint": checkpoint}
    finally:
        sys.path.remove(str(EXAMPLES))
        sys.modules.pop("train_classifier", None)


def test_classifier_learns_evaluates_and_checkpoints(uninterrupted, tinted_images: Path):
    steps, val = uninterrupted["steps"], uninterrupted["val"]
    assert uninterrupted["stopped"] is None and len(steps) == 6 and len(val) == 2
    losses = [s[3] for s in steps]
    assert all(np.isfinite(losses)) and np.mean(losses[-2:]) < np.mean(losses[:2])
    assert val[-1]["accuracy"] > 0.5 and val[-1]["loss"] < val[0]["loss"] + 0.5
    # every 10th image of each class is held out: the two lists share no file and cover the folder
    split = uninterrupted["checkpoint"].parent / "split"
    train, val = ({json.loads(line)["path"] for line in (split / f"{name}.jsonl").read_text().splitlines()}
                  for name in ("train", "val"))
    assert len(val) == 6 and not train & val and len(train | val) == 60


@pytest.mark.parametrize("stopped_at", [2, 3], ids=["mid-epoch", "at-the-epoch's-last-step"])
def test_classifier_resumes_with_the_same_batches_losses_and_validations(examples, uninterrupted, tinted_images,
                                                                         tmp_path: Path, stopped_at: int):
    """Stopped mid-epoch, or at an epoch's last step (before its validation: the resume runs it)."""
    module = examples("train_classifier")
    checkpoint = tmp_path / "c.pt"
    first = module.main(classifier_args(tinted_images, checkpoint, "--max-steps", str(stopped_at)))
    assert first["stopped"] == "max-steps" and len(first["steps"]) == stopped_at and not first["val"]
    state = torch.load(checkpoint)
    assert state["step"] == stopped_at and state["loader"]["sampler"]["position"] == stopped_at
    assert set(state) >= {"model", "optimizer", "loader"}
    rest = module.main(classifier_args(tinted_images, checkpoint, "--resume"))
    full = uninterrupted["steps"]
    assert [s[:3] for s in rest["steps"]] == [s[:3] for s in full[stopped_at:]]  # step, epoch, sample indices
    assert [s[3] for s in rest["steps"]] == pytest.approx([s[3] for s in full[stopped_at:]], rel=1e-5)
    for ours, theirs in zip(rest["val"], uninterrupted["val"], strict=True):
        assert ours == pytest.approx(theirs, rel=1e-5)


HELD_AT_THE_SECOND_STEP = """
import os, runpy, sys, time
import torch
gate, script = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[2:]
sys.path.insert(0, os.path.dirname(script))
step, calls = torch.optim.SGD.step, []

def held(self, *args, **kwargs):
    calls.append(None)
    deadline = time.monotonic() + 120
    while len(calls) == 2 and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return step(self, *args, **kwargs)

torch.optim.SGD.step = held
runpy.run_path(script, run_name="__main__")
"""


def test_classifier_ctrl_c_saves_and_resume_finishes_the_run(examples, uninterrupted, tinted_images,
                                                             tmp_path: Path):
    """Ctrl-C as a terminal sends it (to the whole process group, workers included), then --resume."""
    checkpoint, gate = tmp_path / "c.pt", tmp_path / "ctrl-c-sent"
    args = classifier_args(tinted_images, checkpoint)
    # with a worker process, which gets the Ctrl-C too; the resume below runs without one. The
    # run's steps after the first take a fraction of a second: held at the second step until the
    # Ctrl-C is sent, so that on a loaded machine it still lands in training, not after the run
    proc = subprocess.Popen([sys.executable, "-u", "-c", HELD_AT_THE_SECOND_STEP, str(gate),
                             str(EXAMPLES / "train_classifier.py"), *args, "--workers", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if re.match(r"epoch 1/2 +step +1 ", line):
                os.killpg(proc.pid, signal.SIGINT)
                gate.touch()
                break
        lines += proc.stdout.readlines()
        assert proc.wait(timeout=120) == 130, "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = "".join(lines)
    assert "Traceback" not in output and "stopping after this step" in output
    stopped_at = int(re.search(r"stopped at step (\d+) with a checkpoint", output).group(1))
    assert 1 <= stopped_at < 6 and torch.load(checkpoint)["step"] == stopped_at
    rest = examples("train_classifier").main([*args, "--resume"])
    full = uninterrupted["steps"]
    assert [s[:3] for s in rest["steps"]] == [s[:3] for s in full[stopped_at:]]
    assert [s[3] for s in rest["steps"]] == pytest.approx([s[3] for s in full[stopped_at:]], rel=1e-5)


def test_classifier_command_line_for_a_newcomer(examples, capsys, tmp_path: Path, tinted_images: Path):
    module = examples("train_classifier")
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "--resume" in text and "(default: 3)" in text and "checkpoints/classifier.pt" in text
    for argv, message in [([str(tmp_path / "nope")], "not a folder"),
                          ([str(tinted_images), "--checkpoint", str(tmp_path / "none.pt"), "--resume"],
                           "no checkpoint at"),
                          ([str(tinted_images), "--val-fraction", "1.5"], "between 0 and 1")]:
        with pytest.raises(SystemExit) as exit_:
            module.main(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err


RECIPE = ["--train-crop-size", "32", "--val-resize-size", "36", "--val-crop-size", "32", "--batch-size", "8",
          "--workers", "0", "--device", "cpu"]


@pytest.mark.parametrize("policy", ["ta_wide", "ra", "augmix", "imagenet"])
def test_train_recipe_runs_torchvisions_recipe_flags_on_the_librarys_ops(examples, capsys, tinted_images, policy):
    """torchvision's new ResNet-50 recipe's data flags at a small size: the policy, random erasing,
    MixUp or CutMix per batch and repeated augmentation, for a few steps."""
    module = examples("train_recipe")
    result = module.main([str(tinted_images), *RECIPE, "--auto-augment", policy, "--random-erase", "0.1",
                          "--mixup-alpha", "0.2", "--cutmix-alpha", "1.0", "--ra-sampler", "--ra-reps", "2",
                          "--ra-epoch", "repeats", "--label-smoothing", "0.1", "--steps", "3"])
    assert len(result["losses"]) == 3 and all(np.isfinite(result["losses"]))
    name = {"ta_wide": "TrivialAugmentWide", "ra": "RandAugment", "augmix": "AugMix", "imagenet": "AutoAugment"}
    assert result["ops"] == ["RandomResizedCrop", "HorizontalFlip", name[policy], "Normalize", "RandomErasing",
                             "RandomChoice"]
    out = capsys.readouterr().out
    assert "each image 2 times" in out and "15 batches per epoch" in out  # 60 images twice, in batches of 8
    assert 0.0 <= result["val"]["accuracy"] <= 1.0


def test_train_recipe_refuses_what_torchvisions_sampler_or_policies_cannot_do(examples, capsys, tinted_images):
    module = examples("train_recipe")
    with pytest.raises(SystemExit, match="256"):  # torchvision's RASampler epoch on 60 images: no batch
        module.main([str(tinted_images), *RECIPE, "--ra-sampler"])
    with pytest.raises(SystemExit) as exit_:
        module.main([str(tinted_images), "--auto-augment", "ra", "--interpolation", "bicubic"])
    assert exit_.value.code == 2 and "policies warp with" in capsys.readouterr().err


def test_video_classifier_trains_on_av1_clips(examples, capsys, tmp_path: Path):
    from sample_data import sample_videos

    data = sample_videos(tmp_path, count=4, height=64, seconds=1.0)
    losses = examples("train_video_classifier").main(
        [str(data), "--steps", "3", "--batch-size", "2", "--clip-len", "6", "--size", "32", "--workers", "1",
         "--device", "cpu"])
    assert len(losses) == 3 and all(np.isfinite(losses))
    out = capsys.readouterr().out
    assert re.search(r"video +float32 +\(2, 3, 6, 32, 32\)", out)  # (B, C, T, H, W) after ClipLayout
    assert re.search(r"video_colour +int64 +\(2,\)", out)


def test_asr_features_example_trains_with_duration_buckets(examples, capsys, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEDIAPIPE_CACHE_DIR", str(tmp_path))  # no DATA: the sample clips land here
    module = examples("train_asr_features")
    losses = module.main(["--steps", "4", "--batch-seconds", "30", "--workers", "1", "--device", "cpu"])
    assert len(losses) == 4 and all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert (tmp_path / "examples" / "sample-audio-n24" / "manifest.jsonl").is_file()
    out = capsys.readouterr().out
    sizes = {int(n) for n in re.findall(r"batch of (\d+) clips", out)}
    assert len(sizes) > 1  # batches hold a duration budget, not a fixed count


def test_asr_loss_leaves_out_padding_and_invalid_rows(examples):
    module = examples("train_asr_features")
    target = torch.zeros(3, 2, 5)
    prediction = torch.zeros(3, 2, 5)
    prediction[0, :, 3:] = 100.0  # padding of row 0 (length 3)
    prediction[1] = 100.0  # row 1 is not valid
    prediction[2, :, :2] = 1.0  # real frames of row 2: error 1 on 2 of its 5 frames
    loss = module.masked_mse(prediction, target, torch.tensor([3, 5, 5]), torch.tensor([True, False, True]))
    assert loss.item() == pytest.approx(2 / 8)  # 8 real frames in valid rows


def test_detector_trains_on_a_coco_format_dataset(examples, capsys, detection_dataset):
    module = examples("train_detector")
    losses = module.main([str(detection_dataset.annotations), "--images", str(detection_dataset.images), "--steps", "2",
                          "--batch-size", "2", "--size", "64", "--workers", "0", "--device", "cpu"])
    assert len(losses) == 2 and all(np.isfinite(losses))
    out = capsys.readouterr().out
    assert "16 images, 6 classes: apple, brick" in out and re.search(r"step +2 +loss \d", out)


def test_detector_targets_leave_out_crowd_regions(examples):
    module = examples("train_detector")
    batch = {"boxes": [torch.tensor([[0.0, 0, 10, 10], [5, 5, 7, 20], [1, 1, 30, 30]]), torch.zeros(0, 4)],
             "labels": [torch.tensor([0, 1, 2]), torch.zeros(0, dtype=torch.int64)],
             "iscrowd": [torch.tensor([0, 0, 1]), torch.zeros(0, dtype=torch.int64)]}
    first, second = module.model_targets(batch)
    assert first["boxes"].tolist() == [[0, 0, 10, 10], [5, 5, 7, 20]] and first["labels"].tolist() == [1, 2]
    assert second["boxes"].shape == (0, 4) and second["labels"].shape == (0,)
