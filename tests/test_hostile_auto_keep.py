"""``num_workers="auto"`` where the last setting timed wins and its running pass goes on: the
batches, epochs, resume points and workers are still those of a fixed setting, whatever the
consumer does around the choice (a second pass, a break, set_epoch, a load, close, a drop)."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import threading
from types import SimpleNamespace

import pytest
import torch

import mediapipe as mp
import mediapipe.loaders.auto_workers as aw
import mediapipe.loaders.loader as loader_module
from mediapipe.loaders import workers
from mediapipe.loaders.auto_workers import AutoLoader, WorkerSetting
from tests.helpers import batch_images, small_image_pipeline

P1, T1, T2 = WorkerSetting(1, "process"), WorkerSetting(1, "thread"), WorkerSetting(2, "thread")


def _deeper(s: WorkerSetting) -> WorkerSetting:
    return WorkerSetting(s.num_workers, s.worker_type, 2 * s.prefetch)


# grid, and each setting's rate on the fake clock (batches per tick), with where the choice lands
# (24 batches an epoch, one timed batch a trial: a trial takes num_workers * prefetch + 3 batches)
THREAD_KEPT = ([P1, T2, T1], {T2: 10.0, P1: 5.0, T1: 2.0, _deeper(T2): 3.0})  # epoch 1, batch 23: T2 kept
PROCESS_KEPT = ([T1, P1], {T1: 1.0, P1: 10.0, _deeper(P1): 2.0})  # epoch 1, batch 5: P1 kept
LAST_CUT = ([P1, T1], {P1: 10.0, T1: 5.0, _deeper(P1): 1.0})  # P1's playoff cut by epoch 0's end


def _same(got: list[torch.Tensor], expected: list[torch.Tensor]) -> bool:
    return len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected))


class _Clock:
    """A fake perf_counter for the auto module alone: each reading advances by one over the rate
    of the setting whose loader runs now, so every trial of a setting times the same rate."""

    def __init__(self, speeds: dict[WorkerSetting, float]) -> None:
        self.speeds, self.now, self.autos = speeds, 0.0, []

    def perf_counter(self) -> float:
        auto = self.autos[-1]
        self.now += 1.0 / self.speeds.get(auto._loader_setting(), 1.0)
        return self.now


@pytest.fixture
def rig(monkeypatch):
    clocks: list[_Clock] = []

    def make(pipe: mp.Pipeline, scenario, **kwargs) -> AutoLoader:
        grid, speeds = scenario
        if not clocks:
            clocks.append(_Clock(speeds))
            monkeypatch.setattr(aw, "time", SimpleNamespace(perf_counter=clocks[0].perf_counter))
        auto = AutoLoader(pipe, grid=list(grid), **kwargs)
        auto.trial_batches = 1
        clocks[0].autos.append(auto)
        return auto

    return make


@pytest.fixture
def pools(monkeypatch):
    """Every ProcessPool started from now on."""
    started: list[workers.ProcessPool] = []
    real = loader_module.ProcessPool

    def counting(*args, **kwargs):
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(loader_module, "ProcessPool", counting)
    return started


def _live_pools() -> list[workers.ProcessPool]:
    return [p for p in list(workers._LIVE_POOLS) if not p._closed]


def _no_workers_left() -> bool:
    gc.collect()
    threads = [t for t in threading.enumerate() if t.name.startswith("mediapipe-loader")]
    return not _live_pools() and not multiprocessing.active_children() and not threads


def _fixed_epochs(pipe: mp.Pipeline, epochs: int) -> list[list[torch.Tensor]]:
    fixed = pipe.loader(num_workers=1)
    return [batch_images(fixed) for _ in range(epochs)]


def _until_chosen(it, auto: AutoLoader, limit: int = 200) -> list[torch.Tensor]:
    """Batches of ``it`` up to and including the first one delivered after the choice."""
    got = []
    while auto.chosen is None:
        got.append(next(it)["image"].clone())
        assert len(got) < limit
    return got


def test_a_thread_leader_kept_running_gives_a_fixed_settings_epochs(image_folder, rig, caplog):
    pipe = small_image_pipeline(image_folder, batch_size=1)
    auto = rig(pipe, THREAD_KEPT)
    with caplog.at_level(logging.INFO, logger=aw.__name__):
        got = [batch_images(auto) for _ in range(3)]
    assert auto.chosen == T2 and "kept running" in caplog.text
    assert [len(e) for e in got] == [24, 24, 24]
    assert all(_same(g, e) for g, e in zip(got, _fixed_epochs(pipe, 3)))
    auto.close()
    assert _no_workers_left()


def test_a_process_leader_kept_running_keeps_its_pool_then_stops_it(image_folder, rig, pools, caplog):
    pipe = small_image_pipeline(image_folder, batch_size=1)
    expected = _fixed_epochs(pipe, 3)
    auto = rig(pipe, PROCESS_KEPT)
    with caplog.at_level(logging.INFO, logger=aw.__name__):
        first = batch_images(auto)
        it = iter(auto)
        head = _until_chosen(it, auto)
        assert "kept running" in caplog.text and auto.chosen == P1
        running = pools[-1]
        started = len(pools)
        tail = batch_images(it)
    assert len(pools) == started and running._closed  # no pool after the choice; the kept one stopped at the end
    assert _same(first, expected[0]) and _same(head + tail, expected[1])
    assert _same(batch_images(auto), expected[2])
    auto.close()
    del auto, it
    assert _no_workers_left()


def test_a_state_taken_right_after_the_choice_resumes_the_remaining_batches(image_folder, rig):
    pipe = small_image_pipeline(image_folder, batch_size=1)
    expected = _fixed_epochs(pipe, 3)
    auto = rig(pipe, PROCESS_KEPT)
    assert _same(batch_images(auto), expected[0])
    it = iter(auto)
    head = _until_chosen(it, auto)
    state = auto.state_dict()
    rest = batch_images(it)
    again = rig(pipe, PROCESS_KEPT)
    again.load_state_dict(state)
    resumed = batch_images(again)
    assert _same(head + rest, expected[1]) and _same(head + resumed, expected[1])
    assert _same(batch_images(again), expected[2]) and _same(batch_images(auto), expected[2])
    auto.close(), again.close()


@pytest.mark.parametrize("at", [18, 23])  # in the last trials of epoch 1 (THREAD_KEPT), and right at the choice
def test_a_state_taken_in_the_last_trials_resumes_the_remaining_batches(image_folder, rig, at):
    pipe = small_image_pipeline(image_folder, batch_size=1)
    expected = _fixed_epochs(pipe, 3)
    auto = rig(pipe, THREAD_KEPT)
    assert _same(batch_images(auto), expected[0])
    it = iter(auto)
    head = [next(it)["image"].clone() for _ in range(at)]
    state = auto.state_dict()
    it.close()
    again = rig(pipe, THREAD_KEPT)
    again.load_state_dict(state)
    assert _same(head + batch_images(again), expected[1])
    assert _same(batch_images(again), expected[2])
    auto.close(), again.close()


def test_a_break_after_the_choice_then_a_new_pass_is_a_fixed_loaders(image_folder, rig, pools):
    pipe = small_image_pipeline(image_folder, batch_size=1)
    fixed = pipe.loader(num_workers=1)
    auto = rig(pipe, PROCESS_KEPT)
    assert _same(batch_images(auto), batch_images(fixed))
    it = iter(auto)
    head = _until_chosen(it, auto)
    head += [next(it)["image"].clone()]
    kept = pools[-1]
    del it  # the consumer broke out of its loop
    gc.collect()
    assert kept._closed
    fixed_it = iter(fixed)
    fixed_head = [next(fixed_it)["image"].clone() for _ in head]
    del fixed_it
    assert _same(head, fixed_head)
    assert _same(batch_images(auto), batch_images(fixed))  # the epoch again, from its first batch
    assert auto.epoch == fixed.epoch
    assert _same(batch_images(auto), batch_images(fixed))
    auto.close()


@pytest.mark.parametrize("scenario, at", [(THREAD_KEPT, 20), (PROCESS_KEPT, 2), (LAST_CUT, 23)])
def test_a_second_pass_begun_in_the_last_trial_is_a_fixed_loaders(image_folder, rig, scenario, at):
    pipe = small_image_pipeline(image_folder, batch_size=1)
    fixed = pipe.loader(num_workers=1)
    auto = rig(pipe, scenario)
    assert _same(batch_images(auto), batch_images(fixed))
    got, want = [], []
    for loader, out in ((auto, got), (fixed, want)):
        first = iter(loader)
        out.append([next(first)["image"].clone() for _ in range(at)])
        out.append(batch_images(loader))  # a whole second pass while the first is open
        out.append(batch_images(first))  # the first goes on with its own epoch
        out.append(batch_images(loader))
        out.append(batch_images(loader))
    assert [len(e) for e in got] == [len(e) for e in want]
    assert all(_same(g, w) for g, w in zip(got, want))
    auto.close()


def test_an_epoch_that_ends_in_the_last_trial_times_it_again_next_epoch(image_folder, rig, caplog):
    pipe = small_image_pipeline(image_folder, batch_size=1)
    auto = rig(pipe, LAST_CUT)
    with caplog.at_level(logging.INFO, logger=aw.__name__):
        first = batch_images(auto)
        assert auto.chosen is None
        got = [first, *(batch_images(auto) for _ in range(2))]
    assert auto.chosen == P1 and "kept running" in caplog.text
    assert all(_same(g, e) for g, e in zip(got, _fixed_epochs(pipe, 3)))
    auto.close()


@pytest.mark.parametrize("scenario, at", [(THREAD_KEPT, 3), (PROCESS_KEPT, 4)])
def test_set_epoch_mid_measurement_leaves_the_running_pass_its_epoch(image_folder, rig, scenario, at):
    """A fixed loader's running pass goes on with its own epoch after set_epoch; the next pass
    starts at the epoch set."""
    pipe = small_image_pipeline(image_folder, batch_size=1)
    got, want = [], []
    for loader, out in ((rig(pipe, scenario), got), (pipe.loader(num_workers=1), want)):
        it = iter(loader)
        out.append([next(it)["image"].clone() for _ in range(at)])
        loader.set_epoch(5)
        out.append(batch_images(it))
        out.append(batch_images(loader))
        out.append([loader.epoch])
    assert [len(e) for e in got] == [len(e) for e in want]
    assert all(_same(g, w) for g, w in zip(got[:3], want[:3])) and got[3] == want[3]


def test_load_state_dict_mid_measurement_leaves_the_running_pass_its_batches(image_folder, rig):
    pipe = small_image_pipeline(image_folder, batch_size=1)
    got, want = [], []
    for loader, out in ((rig(pipe, THREAD_KEPT), got), (pipe.loader(num_workers=1), want)):
        it = iter(loader)
        out.append([next(it)["image"].clone() for _ in range(3)])
        loader.load_state_dict({"sampler": {**loader.state_dict()["sampler"], "epoch": 2, "position": 7}})
        out.append(batch_images(it))
        out.append(batch_images(loader))
    assert [len(e) for e in got] == [len(e) for e in want]
    assert all(_same(g, w) for g, w in zip(got, want))


def test_close_or_a_drop_mid_kept_pass_leaves_no_worker(image_folder, rig):
    pipe = small_image_pipeline(image_folder, batch_size=1)
    auto = rig(pipe, PROCESS_KEPT)
    batch_images(auto)
    it = iter(auto)
    _until_chosen(it, auto)
    assert _live_pools()
    auto.close()
    next(it)  # close() stops persistent workers only; this pass's go on, as a fixed loader's do
    del it
    assert _no_workers_left()
    again = rig(pipe, PROCESS_KEPT, persistent_workers=True)
    batch_images(again)
    it = iter(again)
    _until_chosen(it, again)
    del it, again  # dropped without close, mid-pass
    assert _no_workers_left()
