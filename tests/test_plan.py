"""The compiled plan and the stages that run it, each tested on its own."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.errors import DecodeError, SampleUnavailableError, SourceError
from mediapipe.stages.stats import StageStats, normalise_reason, reason_class


def image_pipeline(root, ops=None, **kwargs) -> mp.Pipeline:
    ops = ops if ops is not None else [A.RandomResizedCrop(24), A.HorizontalFlip(), A.Normalize()]
    return mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image()}, ops, batch_size=4, seed=7,
                       device="cpu", **kwargs)


def test_the_plan_compiles_without_reading_anything_and_pickles_without_decoders(image_folder):
    from mediapipe.plan import Plan

    pipe = image_pipeline(image_folder)
    plan = pipe.plan
    assert [p.stage.value for p in plan.placed] == ["sample", "batch", "batch"]
    assert plan.fused["image"].index == 0  # the crop is fused into the decoder
    assert plan.absorbed == {2: plan.placed[1]}  # Normalize does the flip on the CPU
    assert plan._decoders is None  # nothing decoded, no decoder made
    again = Plan(pipe.source, pipe.decode, pipe.augment, seed=7, device=torch.device("cpu"))
    assert again.describe() == plan.describe()
    plan.decoders()
    copy = pickle.loads(pickle.dumps(plan))
    assert copy._decoders is None and copy.describe() == plan.describe()


def test_the_sample_stage_alone_gives_the_loaders_samples(image_folder):
    from mediapipe.stages.sample_stage import SampleStage

    pipe = image_pipeline(image_folder, [A.RandomResizedCrop(24)])  # the sample stage only
    stage = SampleStage(pipe.plan)
    stats = StageStats()
    samples = [stage.load(i, 0, stats) for i in range(4)]
    batch = next(iter(pipe.loader(shuffle=False)))
    assert torch.equal(torch.stack([s["image"] for s in samples]), batch["image"])
    assert [s["index"] for s in samples] == [0, 1, 2, 3] and stats.bytes > 0 and stats.seconds["decode"] > 0


class _Flaky:
    """A sample loader where the listed indices fail."""

    def __init__(self, bad: set[int]) -> None:
        self.bad, self.calls = bad, []

    def __call__(self, index: int) -> dict:
        self.calls.append(index)
        if index in self.bad:
            raise DecodeError(f"/data/{index}.jpg", "turbo", f"truncated at byte {100 + index}")
        return {"index": index, "image": torch.full((3,), float(index))}


def test_the_error_policy_alone():
    from mediapipe.stages.error_policy import MAX_REPLACEMENT_TRIES, ErrorPolicy

    stats = StageStats()
    with pytest.raises(DecodeError):
        ErrorPolicy("raise", 10, seed=0).load(_Flaky({3}), 3, 0, stats)
    assert ErrorPolicy("replace", 10, seed=0).load(_Flaky({3}), 3, 0, stats) is None
    assert stats.errors == {"turbo: truncated at byte N": 1} and stats.failed == ["/data/3.jpg: truncated at byte 103"]
    picks = [ErrorPolicy("skip", 10, seed=0).load(_Flaky({3}), 3, 0, StageStats())["index"] for _ in range(3)]
    assert len(set(picks)) == 1 and picks[0] != 3  # a deterministic replacement
    assert ErrorPolicy("skip", 10, seed=1).load(_Flaky({3}), 3, 0, StageStats(), counted=False)["index"] != 3
    flaky = _Flaky(set(range(100)))
    counted = StageStats()
    with pytest.raises(SampleUnavailableError) as info:
        ErrorPolicy("skip", 100, seed=0).load(flaky, 3, 0, counted)
    assert len(flaky.calls) <= 1 + MAX_REPLACEMENT_TRIES
    assert info.value.paths == ["/data/3.jpg"] and info.value.tried == [f"/data/{i}.jpg" for i in flaky.calls[1:]]
    assert sum(counted.errors.values()) == 1  # the sample, not the replacements that failed too
    template = ErrorPolicy("replace", 10, seed=0).template(_Flaky({0, 1}), 0, [(0, None), (1, None)])
    assert template["index"] not in (0, 1)


def test_the_batch_stage_alone(image_folder):
    from mediapipe.rng import batch_rng
    from mediapipe.stages.batch_stage import batch_params, run_batch_ops

    pipe = image_pipeline(image_folder, [A.Resize((16, 16)), A.HorizontalFlip(p=1.0), A.MixUp(num_classes=3)])
    plan = pipe.plan
    x = torch.arange(2 * 3 * 16 * 16, dtype=torch.float32).reshape(2, 3, 16, 16)
    data = {"image": x.clone(), "label": torch.tensor([0, 2]), "index": torch.tensor([5, 9])}
    samples = [{"index": 5, "image": x[0]}, {"index": 9, "image": x[1]}]
    params = batch_params(plan, 6, 1, np.array([5, 9]), samples, data)
    assert params[2]["lam"] == A.MixUp(num_classes=3).batch_params(batch_rng(7, 1, 6, 2), 2)["lam"]
    out = run_batch_ops(plan, data, params)
    lam = float(params[2]["lam"])
    flipped = x.flip(-1)
    assert torch.allclose(out["image"], lam * flipped + (1 - lam) * flipped.roll(1, 0))


def test_the_batch_builder_alone(image_folder):
    from mediapipe.stages.batch_builder import BatchBuilder
    from mediapipe.stages.host_batch import BatchTask

    pipe = image_pipeline(image_folder)
    host = BatchBuilder(pipe.plan)(BatchTask(0, 0, np.array([1, 2, 2]), 2, with_valid=True))
    assert host.data["valid"].tolist() == [True, True, False]
    assert torch.equal(host.data["image"][1], host.data["image"][2])  # padding repeats its sample
    assert host.stats.samples == 2 and host.stats.batches == 1 and host.batch_ops_where == "device"
    finished = BatchBuilder(pipe.plan, batch_ops="worker")(BatchTask(0, 0, np.array([1, 2]), 2))
    assert finished.batch_ops_where == "worker" and finished.params == {}
    assert finished.data["image"].dtype == torch.float32


def test_reason_classes():
    assert normalise_reason("cannot identify image file <_io.BytesIO object at 0x7f3a2b1c0d90>") == \
        "cannot identify image file <object>"
    assert normalise_reason("header declares 18000.0 s, above max_duration=14400") == \
        "header declares N s, above max_duration=14400"
    assert normalise_reason("expected 1234 bytes at offset 5678 of /data/shard-000001.tar") == \
        "expected N bytes at offset N of <path>"
    assert normalise_reason("frames are 4000x3000, cannot open '/x/y z.mp4'") == "frames are NxN, cannot open '…'"
    assert reason_class(DecodeError("a.jpg", "pillow", "bad (1 2)")) == "pillow: bad (N N)"
    assert reason_class(DecodeError("a.jpg", "pillow", "bad 1", category="bad header")) == "pillow: bad header"
    assert reason_class(SourceError("a.jpg", "[Errno 2] No such file")) == "source: [Errno N] No such file"
    err = pickle.loads(pickle.dumps(DecodeError("a.jpg", "pillow", "bad", category="c")))
    assert (err.path, err.decoder, err.reason, err.category) == ("a.jpg", "pillow", "bad", "c")


def test_older_imports_from_graph_still_work():
    from mediapipe.plan import Plan
    from mediapipe.plan import Plan as NewPlan
    from mediapipe.stages.collate import stack_params
    from mediapipe.stages.collate import stack_params as graph_stack_params
    from mediapipe.stages.host_batch import HostBatch
    from mediapipe.stages.host_batch import HostBatch as NewHostBatch
    from mediapipe.stages.stats import StageStats
    from mediapipe.stages.stats import StageStats as NewStats

    assert (Plan, HostBatch, StageStats, graph_stack_params) == (NewPlan, NewHostBatch, NewStats, stack_params)
