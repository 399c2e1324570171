"""Progressive resolution: op arguments that follow the epoch (`mp.Schedule`), through the plan,
the loader (workers, resume), the config, pickling, the DALI backend and the fused decode."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.decoders.image import plan_decode
from mediapipe.stages.sample_stage import SampleStage
from mediapipe.stages.stats import StageStats
from tests.helpers import assert_same, collect, state_after, write_image_folder

SIZES = {0: 16, 1: 24, 2: 32}


def scheduled_pipeline(root, sizes=SIZES, **kwargs) -> mp.Pipeline:
    return mp.Pipeline(
        source=mp.loaders.folder(root), decode={"image": mp.decoders.image()},
        augment=[A.RandomResizedCrop(mp.Schedule(sizes), scale=(0.2, 1.0)), A.HorizontalFlip(), A.Normalize()],
        batch_size=5, seed=3, device="cpu", **kwargs)


def fixed_pipeline(root, size: int) -> mp.Pipeline:
    return mp.Pipeline(
        source=mp.loaders.folder(root), decode={"image": mp.decoders.image()},
        augment=[A.RandomResizedCrop(size, scale=(0.2, 1.0)), A.HorizontalFlip(), A.Normalize()],
        batch_size=5, seed=3, device="cpu")


def epoch_batches(pipe: mp.Pipeline, epoch: int, **kwargs) -> list[dict]:
    loader = pipe.loader(**kwargs)
    loader.set_epoch(epoch)
    return collect(loader)


# -- the value -------------------------------------------------------------------------------------
def test_the_value_is_that_of_the_largest_key_at_or_before_the_epoch():
    schedule = mp.Schedule({0: 160, 10: 192, 18: 224})
    assert mp.Schedule is A.Schedule
    assert [schedule.at(e) for e in (0, 9, 10, 17, 18, 500)] == [160, 160, 192, 192, 224, 224]
    assert schedule.epochs == (0, 10, 18)
    assert mp.Schedule({18: 224, 0: 160, 10: 192}) == schedule  # keys in any order


def test_an_op_resolves_its_schedule_per_epoch_and_keeps_its_other_settings():
    crop = A.RandomResizedCrop(mp.Schedule({0: 160, 10: 192}), scale=[0.3, 1.0])
    assert crop.scheduled and crop.scale == (0.3, 1.0)  # normalised as a fixed op's are
    assert crop.at_epoch(9) == A.RandomResizedCrop(160, scale=(0.3, 1.0))
    assert crop.at_epoch(12) == A.RandomResizedCrop(192, scale=(0.3, 1.0))
    assert A.Resize(mp.Schedule({0: 128, 3: (100, 120)})).at_epoch(4).size == (100, 120)
    assert A.CenterCrop(mp.Schedule({0: 8, 2: 12})).at_epoch(1).size == (8, 8)
    fixed = A.RandomResizedCrop(224)
    assert not fixed.scheduled and fixed.at_epoch(7) is fixed


def test_a_plan_without_schedules_is_its_own_plan_at_every_epoch(tmp_path):
    root = write_image_folder(tmp_path / "images", 6)
    plan = fixed_pipeline(root, 16).plan
    assert plan.at_epoch(0) is plan and plan.at_epoch(5) is plan
    scheduled = scheduled_pipeline(root).plan
    at1 = scheduled.at_epoch(1)
    assert at1 is scheduled.at_epoch(1)  # made once per epoch
    assert at1.ops[0].size == (24, 24) and at1.fused["image"].op.size == (24, 24)
    assert at1.at_epoch(2) is scheduled.at_epoch(2)
    assert at1.decoders() is scheduled.decoders()  # one set of live decoders per process


# -- the loader ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("schedule_images"), 12)


def test_batches_follow_the_schedule_whatever_the_workers(images):
    pipe = scheduled_pipeline(images)
    for epoch, size in SIZES.items():
        inline = epoch_batches(pipe, epoch, num_workers=0)
        assert {tuple(b["image"].shape[-2:]) for b in inline} == {(size, size)}
        assert_same(inline, epoch_batches(pipe, epoch, num_workers=2))
        assert_same(inline, epoch_batches(pipe, epoch, num_workers=2, worker_type="thread"))
    # a schedule's epoch gives what the fixed size gives: the draws are the same keys
    assert_same(epoch_batches(pipe, 1, num_workers=0), epoch_batches(fixed_pipeline(images, 24), 1, num_workers=0))


def test_an_uninterrupted_loader_changes_size_at_the_epochs_end(images):
    loader = scheduled_pipeline(images, {0: 16, 1: 24}).loader(num_workers=0)
    sizes = [{tuple(b["image"].shape[-2:]) for b in loader} for _ in range(3)]
    assert sizes == [{(16, 16)}, {(24, 24)}, {(24, 24)}]


def test_a_resume_mid_epoch_takes_that_epochs_size(images):
    sizes = {0: 16, 10: 24, 18: 32}
    pipe = scheduled_pipeline(images, sizes)
    loader = pipe.loader(num_workers=2)
    loader.set_epoch(12)
    whole = collect(loader)
    loader = pipe.loader(num_workers=2)
    loader.set_epoch(12)
    state = state_after(loader, 1)
    resumed = pipe.loader(num_workers=0)
    resumed.load_state_dict(state)
    rest = collect(resumed)
    assert {tuple(b["image"].shape[-2:]) for b in rest} == {(24, 24)}
    assert_same(whole[1:], rest)


def test_the_dataset_takes_the_epoch_it_is_given(images):
    pipe = scheduled_pipeline(images)
    dataset = pipe.dataset()
    dataset.set_epoch(2)
    sample = dataset[3]
    assert tuple(sample["image"].shape[-2:]) == (32, 32)
    batches = epoch_batches(pipe, 2, num_workers=0, shuffle=False)
    assert torch.equal(sample["image"], batches[0]["image"][3])


# -- config and pickling ---------------------------------------------------------------------------
def test_the_config_round_trips_through_json(images):
    pipe = scheduled_pipeline(images, {0: 16, 10: 24})
    config = pipe.to_config()
    assert config["augment"][0]["size"] == {"schedule": {"0": 16, "10": 24}}
    again = mp.Pipeline.from_config(json.loads(json.dumps(config)))
    assert again.augment[0] == pipe.augment[0]
    assert_same(epoch_batches(again, 10, num_workers=0), epoch_batches(pipe, 10, num_workers=0))


def test_the_config_round_trips_through_yaml(images, tmp_path):
    pytest.importorskip("yaml")
    pipe = scheduled_pipeline(images, {0: 16, 2: (24, 20)})
    path = tmp_path / "pipe.yaml"
    pipe.save_config(path)
    again = mp.Pipeline.from_config(path)
    assert again.augment[0].size == mp.Schedule({0: 16, 2: (24, 20)})
    assert again.plan.at_epoch(3).ops[0].size == (24, 20)


def test_a_scheduled_op_and_its_plan_pickle(images):
    op = A.RandomResizedCrop(mp.Schedule({0: 160, 10: 192}))
    assert pickle.loads(pickle.dumps(op)) == op
    plan = scheduled_pipeline(images).plan
    plan.at_epoch(1)
    again = pickle.loads(pickle.dumps(plan))
    assert again.ops == plan.ops and again._epochs == {}
    assert again.at_epoch(2).ops[0].size == (32, 32)


# -- refusals --------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, words", [
    (lambda: A.RandomResizedCrop(mp.Schedule({0: 16, 3: 0})), ["RandomResizedCrop(size=Schedule(", "at epoch 3"]),
    (lambda: A.RandomResizedCrop(mp.Schedule({0: 16.5})), ["RandomResizedCrop(size=", "at epoch 0"]),
    (lambda: A.CenterCrop(mp.Schedule({0: 8, 1: "big"})), ["CenterCrop(size=", "at epoch 1"]),
    (lambda: A.Resize(mp.Schedule({0: None})), ["Resize(size=", "give size, max_size or both"]),
    (lambda: A.HorizontalFlip(p=mp.Schedule({0: 0.5})), ["HorizontalFlip(p=", "cannot follow the epoch"]),
    (lambda: A.op_from_config({"op": "Resize", "size": {"schedule": {"1": 8}}}), ["Resize(size=", "epoch 0"]),
    (lambda: A.op_from_config({"op": "CenterCrop", "size": {"schedule": {"0": 8, "x": 9}}}),
     ["CenterCrop(size=", "'x' is not an epoch"]),
])
def test_bad_schedules_are_refused_naming_the_op_and_argument(make, words):
    with pytest.raises((TypeError, ValueError)) as info:
        make()
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("steps", [{}, {5: 1}, {0: 1, -1: 2}, {0: 1, True: 2}, [0, 1]])
def test_a_schedule_needs_int_epochs_from_zero(steps):
    with pytest.raises(ValueError, match="Schedule"):
        mp.Schedule(steps)


def test_the_dali_backend_refuses_a_schedule_naming_the_op(images):
    pipe = scheduled_pipeline(images)
    with pytest.raises(mp.PipelineError, match=r"augment\[0\] RandomResizedCrop\(size=Schedule\(\{0: 16"):
        pipe.loader(backend="dali")


# -- the fused decode gets cheaper -----------------------------------------------------------------
def test_a_smaller_scheduled_crop_decodes_fewer_pixels(tmp_path):
    root = write_image_folder(tmp_path / "big", 8, scale=1.0)
    pipe = mp.Pipeline(source=mp.loaders.folder(root), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(mp.Schedule({0: 24, 1: 192}), scale=(0.5, 1.0))],
                       batch_size=4, seed=0, device="cpu")
    decoder = pipe.plan.decoders()["image"]
    seen: list[tuple] = []
    real = decoder.decode

    def spy(blob, hint, rng, meta):  # the hint the fused crop gives, and the image it is for
        seen.append((hint, (meta["height"], meta["width"])))
        return real(blob, hint, rng, meta)

    decoder.decode = spy
    stage = SampleStage(pipe.plan)
    pixels = {}
    for epoch, size in ((0, 24), (1, 192)):
        seen.clear()
        out = [stage.load(i, epoch, StageStats())["image"] for i in range(len(pipe.source))]
        assert {tuple(x.shape[-2:]) for x in out} == {(size, size)}
        assert {h.size for h, _ in seen} == {(size, size)}
        plans = [(plan_decode(h, full), h) for h, full in seen]
        pixels[epoch] = sum((h.roi[2] / p.denominator) * (h.roi[3] / p.denominator) for p, h in plans)
        if epoch == 0:
            assert all(p.denominator > 1 for p, _ in plans)  # every small crop decoded at a reduced DCT scale
    assert pixels[0] * 4 < pixels[1]


# -- the epoch cache -------------------------------------------------------------------------------
def test_an_epoch_cache_keeps_a_scheduled_resize_per_size(images, tmp_path):
    def pipe() -> mp.Pipeline:
        return mp.Pipeline(source=mp.loaders.folder(images), decode={"image": mp.decoders.image(exact=True)},
                           augment=[A.Resize(mp.Schedule({0: 20, 1: 28})), A.CenterCrop(mp.Schedule({0: 16, 1: 24})),
                                    A.HorizontalFlip()],
                           batch_size=4, seed=1, device="cpu")

    plain = pipe()
    cached = pipe().loader(num_workers=0, cache=mp.EpochCache(tmp_path / "cache"))
    for epoch, size in ((0, 16), (1, 24), (0, 16), (1, 24)):  # the second round reads the entries
        cached.set_epoch(epoch)
        got = collect(cached)
        assert {tuple(b["image"].shape[-2:]) for b in got} == {(size, size)}
        assert_same(got, epoch_batches(plain, epoch, num_workers=0))
    assert cached.stats.cache["hits"] > 0


def test_an_op_inside_a_composite_follows_the_schedule(images):
    pipe = mp.Pipeline(source=mp.loaders.folder(images), decode={"image": mp.decoders.image()},
                       augment=[A.Resize(40), A.RandomChoice([A.CenterCrop(mp.Schedule({0: 16, 1: 24})),
                                                              A.RandomCrop(mp.Schedule({0: 16, 1: 24}))])],
                       batch_size=3, seed=0, device="cpu")
    for epoch, size in ((0, 16), (1, 24)):
        assert {tuple(b["image"].shape[-2:]) for b in epoch_batches(pipe, epoch, num_workers=0)} == {(size, size)}
    again = mp.Pipeline.from_config(json.loads(json.dumps(pipe.to_config())))
    assert again.augment[1] == pipe.augment[1]
