"""The device path is a straight line: one batch with a device-decoded field goes through each
step of `mediapipe.stages.device_stage` once (decode the batch, the ops after it, collate
once, the batch ops) and never back into the worker's sample stage; a stand-in for a sample
that failed on the device is the one exception, loaded through the same two halves."""

from __future__ import annotations

import sys
from collections import Counter

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.stages.host_batch import BatchTask
from mediapipe.stages.progress import SampleProgress
from tests.helpers import write_image_folder

pytest.importorskip("nvidia.nvimgcodec")


def _pipeline(root, **kwargs) -> mp.Pipeline:
    ops = [A.RandomResizedCrop(24, scale=(0.3, 1.0)), A.HorizontalFlip(), A.Normalize()]
    return mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image("nvimgcodec", device_decode=True)},
                       ops, batch_size=4, seed=3, **kwargs)


def _calls(fn) -> Counter:
    """(module, function) of every Python call into mediapipe.stages while ``fn`` runs."""
    seen: Counter = Counter()

    def profile(frame, event, arg):
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            if module.startswith("mediapipe.stages"):
                seen[(module.rsplit(".", 1)[-1], frame.f_code.co_name)] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def test_one_batch_visits_each_device_step_once(tmp_path):
    from mediapipe.stages.batch_builder import BatchBuilder
    from mediapipe.stages.device_stage import finish_batch

    root = write_image_folder(tmp_path, 8, scale=0.3)
    pipe = _pipeline(root)
    plan = pipe.plan
    assert plan.device_fields == {"image"}
    assert [p.where for p in plan.placed] == ["device", "device", "device"]
    host = BatchBuilder(plan)(BatchTask(0, 0, torch.arange(4).numpy(), 4))
    assert all(isinstance(d.progress, SampleProgress) for d in host.data["image"])
    out = {}
    calls = _calls(lambda: out.update(finish_batch(plan, host)))
    assert out["image"].shape == (4, 3, 24, 24) and out["image"].dtype == torch.float32
    for step in ("finish_batch", "finish_on_device", "finish_samples", "decode_on_device", "_finish_fused",
                 "run_device_ops", "_collate_device_fields"):
        assert calls[("device_stage", step)] == 1, (step, calls)
    assert calls[("batch_stage", "run_batch_ops")] == 1
    assert calls[("batch_stage", "batch_params")] == 1
    assert calls[("sample_ops", "run_sample_ops")] == 4  # once per sample: the ops after the decode
    assert not any(module == "sample_stage" for module, _ in calls), calls  # never the worker's stage
    assert calls[("device_stage", "load_stand_in")] == 0


def test_a_device_failure_under_skip_loads_its_stand_in_through_both_halves(tmp_path):
    from mediapipe.stages.batch_builder import BatchBuilder
    from mediapipe.stages.device_stage import finish_batch

    root = write_image_folder(tmp_path, 8, scale=0.3)
    pipe = _pipeline(root, on_error="skip")
    plan = pipe.plan
    host = BatchBuilder(plan)(BatchTask(0, 0, torch.arange(4).numpy(), 4))
    blob = host.data["image"][1].blob
    host.data["image"][1].blob = type(blob)(blob.name, data=blob.read()[:200])  # truncated on the device
    out = {}
    calls = _calls(lambda: out.update(finish_batch(plan, host)))
    assert out["image"].shape == (4, 3, 24, 24)
    assert out["index"][1] != 1 and host.stats.errors  # a stand-in took slot 1, the failure counted
    assert calls[("device_stage", "load_stand_in")] == 1
    assert calls[("sample_stage", "load")] == 1  # the stand-in's worker half, once
    assert calls[("device_stage", "finish_on_device")] == 1
