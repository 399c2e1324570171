"""``num_workers="auto"``: settings measured on the first batches, the fastest kept, and the
batches, epochs and resume points those of any fixed setting."""

from __future__ import annotations

import pytest
import torch

import mediapipe as mp
from mediapipe.loaders.auto_workers import AutoLoader, WorkerSetting, worker_grid
from tests.helpers import batch_images, small_image_pipeline

GRID = [WorkerSetting(1, "process"), WorkerSetting(2, "thread"), WorkerSetting(1, "thread")]


def _auto(pipe: mp.Pipeline, trial_batches: int = 1, **kwargs) -> AutoLoader:
    loader = AutoLoader(pipe, grid=list(GRID), **kwargs)
    loader.trial_batches = trial_batches
    return loader


def test_the_grid_tries_every_core_first_then_fewer_and_more_then_threads():
    assert worker_grid(2) == [WorkerSetting(2), WorkerSetting(1), WorkerSetting(3), WorkerSetting(2, "thread")]
    assert worker_grid(16)[:3] == [WorkerSetting(16), WorkerSetting(8), WorkerSetting(24)]
    assert worker_grid(1) == [WorkerSetting(1), WorkerSetting(2), WorkerSetting(1, "thread")]


def test_the_batches_are_a_fixed_settings_while_measuring_and_after(image_folder):
    pipe = small_image_pipeline(image_folder)  # 24 images: 12 batches an epoch
    auto = _auto(pipe)
    got = []
    while auto.chosen is None and len(got) < 8:
        got.append(batch_images(auto))
    got.append(batch_images(auto))  # one pass with the chosen setting alone
    fixed = pipe.loader(num_workers=2)
    expected = [batch_images(fixed) for _ in got]
    assert all(len(e) == 12 for e in got) and len(auto) == 12
    assert all(torch.equal(a, b) for e, f in zip(got, expected) for a, b in zip(e, f))
    timed = [t for t in auto.trials if t.batches_per_s]
    assert len(timed) == len(GRID) + 1 and auto.chosen == max(timed, key=lambda t: t.batches_per_s).setting
    assert sorted(len(t.rates) for t in timed)[-2:] == [2, 2]  # the two fastest, timed again
    best = max(timed[: len(GRID)], key=lambda t: t.rates[0])
    assert timed[-1].setting == WorkerSetting(best.setting.num_workers, best.setting.worker_type, 4)
    assert auto.stats.batches == 12 * len(got)  # one count over every setting tried


def test_a_resume_mid_measurement_gives_the_remaining_batches(image_folder):
    pipe = small_image_pipeline(image_folder)
    expected = batch_images(pipe.loader(num_workers=1))
    auto = _auto(pipe)
    it = iter(auto)
    head = [next(it)["image"].clone() for _ in range(5)]  # across a switch of setting (1 + 3 + 1 per trial)
    state = auto.state_dict()
    it.close()
    again = _auto(pipe)
    again.load_state_dict(state)
    tail = batch_images(again)
    assert len(head) + len(tail) == 12
    assert all(torch.equal(a, b) for a, b in zip(head + tail, expected))


def test_a_peek_costs_the_next_pass_nothing(image_folder):
    pipe = small_image_pipeline(image_folder)
    expected = batch_images(pipe.loader(num_workers=1))
    auto = _auto(pipe)
    next(iter(auto))
    got = batch_images(auto)
    assert len(got) == 12 and all(torch.equal(a, b) for a, b in zip(got, expected))


def test_an_epoch_too_short_for_a_trial_keeps_a_setting_that_fits(image_folder):
    pipe = small_image_pipeline(image_folder, batch_size=8)  # 3 batches an epoch: no trial of 1 + 1 + 2 fits
    auto = _auto(pipe)
    fixed = pipe.loader(num_workers=1)
    expected = [batch_images(fixed) for _ in range(2)]
    got = [batch_images(auto) for _ in range(2)]
    assert all(torch.equal(a, b) for e, f in zip(got, expected) for a, b in zip(e, f))
    assert auto.chosen == GRID[0] and not any(t.batches_per_s for t in auto.trials)


def test_auto_is_refused_with_the_settings_it_chooses_and_on_other_backends(image_folder):
    pipe = small_image_pipeline(image_folder)
    with pytest.raises(ValueError, match="chooses prefetch too"):
        pipe.loader(num_workers="auto", prefetch=4)
    with pytest.raises(ValueError, match="torch backend's"):
        pipe.loader(num_workers="auto", backend="dali")
    loader = pipe.loader(num_workers="auto")
    assert isinstance(loader, AutoLoader) and loader.chosen is None


def test_the_chosen_setting_runs_every_pass_once_measured(image_folder):
    pipe = small_image_pipeline(image_folder)
    auto = _auto(pipe)
    while auto.chosen is None:
        batch_images(auto)
    batch_images(auto)
    assert auto.stats.batches % 12 == 0
    assert (auto.loader.num_workers, auto.loader.worker_type, auto.loader.prefetch) == \
        (auto.chosen.num_workers, auto.chosen.worker_type, auto.chosen.prefetch)


def test_the_playoff_times_the_runner_up_first_so_the_leader_is_kept_running(image_folder):
    """After the grid and the deeper prefetch, the two fastest are timed again: the runner-up
    first, then the leader, so that a leader still ahead is the running loader when chosen (its
    workers, and what they keep, are not started afresh)."""
    auto = _auto(small_image_pipeline(image_folder))
    rates = {GRID[0]: 10.0, GRID[1]: 8.0, GRID[2]: 2.0}
    for trial in auto.trials:
        trial.rates.append(rates[trial.setting])
    deeper = auto._next_trial()
    assert deeper.setting == WorkerSetting(1, "process", 4)
    deeper.rates.append(5.0)
    first = auto._next_trial()
    assert first.setting == GRID[1]  # the runner-up
    first.rates.append(8.0)
    second = auto._next_trial()
    assert second.setting == GRID[0]  # then the leader, last
    second.rates.append(10.0)
    assert auto._next_trial() is None
    auto.close()


def test_a_leader_timed_last_goes_on_with_its_running_workers(image_folder, monkeypatch):
    """With every setting equally fast (a clock that ticks once per reading), the first of the
    grid leads, is timed last in the playoff and wins: the pass goes on with its workers, so no
    pool is started after the last trial (a restart would drop what the workers keep, such as a
    video decoder's indexed files), and the batches are still a fixed setting's."""
    import mediapipe.loaders.auto_workers as aw
    import mediapipe.loaders.loader as loader_module

    ticks = iter(range(10**6))
    monkeypatch.setattr(aw.time, "perf_counter", lambda: float(next(ticks)))
    starts = []
    real_pool = loader_module.ProcessPool

    def counting_pool(*args, **kwargs):
        starts.append(1)
        return real_pool(*args, **kwargs)

    monkeypatch.setattr(loader_module, "ProcessPool", counting_pool)
    pipe = small_image_pipeline(image_folder, batch_size=1)  # 24 batches an epoch: room for every trial
    grid = [WorkerSetting(1, "process")]
    auto = AutoLoader(pipe, grid=list(grid))
    auto.trial_batches = 1
    got = batch_images(auto)
    assert auto.chosen == grid[0]
    assert [len(t.rates) for t in auto.trials] == [2, 2]  # the setting and its deeper prefetch, twice each
    assert len(starts) == 4  # one pool per timing; the winner's last one went on to the epoch's end
    expected = batch_images(pipe.loader(num_workers=1))
    assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected))
    auto.close()
