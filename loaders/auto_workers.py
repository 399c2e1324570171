"""``pipe.loader(num_workers="auto")``: the torch loader with its worker count, worker type and
prefetch depth chosen by measuring the first batches of training itself.

Each setting of a small grid (`worker_grid`) builds a few batches in turn, continuing where
the last left off (every batch is delivered to the training loop: batches do not depend on
the workers, so the epoch is the one any fixed setting gives); the two fastest are timed once
more, the runner-up first, and the faster on the mean is kept for the rest of the run (a leader
still ahead goes on with the workers it is running, and what they keep). A setting's rate is timed after its start-up and after the
batches its workers had ready when the consumer first asked (they would flatter a deep
queue), over `AutoLoader.trial_batches` batches of wall time, the training step included:
what the loop actually gets. A setting that does not fit in an epoch is not a candidate; with
none timed, the first setting is kept.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mediapipe.loaders.loader import Loader
from mediapipe.options import WorkerType

if TYPE_CHECKING:
    from mediapipe.pipeline import Pipeline

log = logging.getLogger(__name__)

TRIAL_BATCHES = 8  # timed batches per setting, after its start-up and ready queue


@dataclass(frozen=True)
class WorkerSetting:
    """One way of running the loader's workers."""

    num_workers: int
    worker_type: WorkerType = "process"
    prefetch: int = 2

    def __str__(self) -> str:
        return f"num_workers={self.num_workers}, worker_type={self.worker_type!r}, prefetch={self.prefetch}"

    def as_kwargs(self) -> dict[str, Any]:
        return {"num_workers": self.num_workers, "worker_type": self.worker_type, "prefetch": self.prefetch}


@dataclass
class Trial:
    """A setting and its timed rates (batches per second, one per time it was tried)."""

    setting: WorkerSetting
    rates: list[float] = field(default_factory=list)

    @property
    def batches_per_s(self) -> float | None:
        """The mean of its rates; None until timed (0 where an epoch is too short to time it)."""
        return sum(self.rates) / len(self.rates) if self.rates else None


def usable_cpus() -> int:
    """The cores this process may run on (its affinity, which a container or taskset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def worker_grid(cpus: int | None = None) -> list[WorkerSetting]:
    """The settings tried, in order: processes at half, all and one and a half times the cores,
    threads at the cores (threads pay only where the work releases the GIL). The fastest is then
    tried with a deeper prefetch (`AutoLoader`)."""
    n = cpus or usable_cpus()
    counts = sorted({max(1, n // 2), n, n + max(1, n // 2)})
    start = counts.index(n)  # all the cores first: the usual best, and what a short epoch keeps
    ordered = [counts[start], *counts[:start], *counts[start + 1:]]
    return [*(WorkerSetting(c, "process") for c in ordered), WorkerSetting(n, "thread")]


class AutoLoader:
    """The torch `Loader` with ``num_workers="auto"``: the same batches, epochs, ``len()``,
    ``state_dict()`` and ``stats``; ``chosen`` is the setting kept (None while measuring) and
    ``trials`` each setting's timed rate. ``grid``: the settings tried (default `worker_grid`);
    other arguments are the `Loader`'s."""

    trial_batches = TRIAL_BATCHES

    def __init__(self, pipeline: Pipeline, grid: list[WorkerSetting] | None = None, **kwargs: Any) -> None:
        for name in ("worker_type", "prefetch"):
            if name in kwargs:
                raise ValueError(f"num_workers='auto' chooses {name} too: leave it out, or give num_workers a number")
        self.pipeline, self._kwargs = pipeline, kwargs
        self.trials = [Trial(s) for s in (grid or worker_grid())]
        self.chosen: WorkerSetting | None = None
        self._passes = 0  # passes begun: a pass switches settings only while it is the newest
        self._loader = self._make(self.trials[0].setting)
        self.stats = self._loader.stats

    def _make(self, setting: WorkerSetting) -> Loader:
        loader = Loader(self.pipeline, **setting.as_kwargs(), **self._kwargs)
        if hasattr(self, "stats"):
            loader.stats = self.stats  # one count over every setting tried
        return loader

    # -- what a loader offers -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._loader)

    @property
    def epoch(self) -> int:
        return self._loader.epoch

    @property
    def loader(self) -> Loader:
        """The loader of the setting running now (the chosen one once all are timed)."""
        return self._loader

    def state_dict(self) -> dict[str, Any]:
        return self._loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._loader.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        self._loader.set_epoch(epoch)

    def close(self) -> None:
        self._loader.close()

    def __enter__(self) -> AutoLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._passes += 1
        if self.chosen is not None:
            return iter(self._loader)
        return self._measuring_pass(self._passes)

    # -- measuring ------------------------------------------------------------------------
    def _next_trial(self) -> Trial | None:
        """The next setting to time: the grid in order, then the fastest with twice its
        prefetch, then the two fastest once more, the runner-up first (one short trial is noisy:
        the playoff's mean decides; the leader, timed last, is then the running loader when it
        stays ahead, and is kept without starting its workers, and their caches, afresh); None
        once all are timed."""
        for trial in self.trials:
            if trial.batches_per_s is None:
                return trial
        best = max(self.trials, key=lambda t: t.batches_per_s or 0.0)
        if not best.batches_per_s:
            return None
        deeper = WorkerSetting(best.setting.num_workers, best.setting.worker_type, 2 * best.setting.prefetch)
        if best.setting.prefetch == 2 and all(t.setting != deeper for t in self.trials):
            self.trials.append(Trial(deeper))
            return self.trials[-1]
        finalists = sorted((t for t in self.trials if t.batches_per_s), key=lambda t: -(t.batches_per_s or 0.0))[:2]
        return next((t for t in reversed(finalists) if len(t.rates) < 2), None)

    def _switch(self, setting: WorkerSetting, state: dict[str, Any] | None = None) -> None:
        """Go on with ``setting`` from ``state``, by default where the current loader's pass
        stands (its next batch)."""
        state = self._loader.state_dict() if state is None else state
        if setting != self._loader_setting():
            loader = self._make(setting)
            self._loader.close()
            self._loader = loader
        self._loader.load_state_dict(state)

    def _loader_setting(self) -> WorkerSetting:
        return WorkerSetting(self._loader.num_workers, self._loader.worker_type, self._loader.prefetch)

    def _pass_done(self, epoch: int) -> bool:
        """Whether this pass (of ``epoch``) delivered its epoch's last batch."""
        return self._loader.epoch != epoch or self._loader.sampler.position >= len(self._loader)

    def _fastest(self) -> WorkerSetting:
        """The setting with the best mean rate so far (the first of the grid when none is timed)."""
        timed = [t for t in self.trials if t.batches_per_s]
        return max(timed, key=lambda t: t.batches_per_s or 0.0).setting if timed else self.trials[0].setting

    def _choose(self, how: str) -> None:
        self.chosen = self._fastest()
        rates = ", ".join(f"{t.setting}: {t.batches_per_s:.1f} batches/s" for t in self.trials if t.batches_per_s)
        log.info("num_workers='auto': %s (%s; %s)", self.chosen, how, rates)

    def _measuring_pass(self, serial: int) -> Iterator[dict[str, Any]]:
        """One pass: settings in turn until each is timed or the epoch ends, then the chosen
        one to the epoch's end. The pass starts where any pass of the loader would (the next
        epoch, a loaded position, or this epoch's first batch: `LoaderBase.begin_pass`). A setting
        cut off by the epoch's end is timed again next pass; one an epoch is too short for is
        never chosen. Once a newer pass has begun (a second iterator), or set_epoch or load_state_dict
        ran, this one stops switching: the loader's position is no longer this pass's, so it ends its
        epoch with the setting it has."""
        self._loader.begin_pass()
        epoch, start = self._loader.epoch, self._loader.state_dict()  # where this pass begins
        trial = self._next_trial()
        while trial is not None:
            if self._pass_done(epoch):
                return
            ready = trial.setting.num_workers * trial.setting.prefetch + 1
            if len(self._loader) < ready + self.trial_batches + 1:  # never fits in an epoch: not a candidate
                trial.rates.append(0.0)
                trial = self._next_trial()
                continue
            self._switch(trial.setting, start)
            start = None  # from now on this pass switches only while it is the newest: from where it stands
            batches = iter(self._loader)
            times: list[float] = []
            for i, batch in enumerate(batches):
                yield batch
                if i >= ready:
                    times.append(time.perf_counter())
                if len(times) > self.trial_batches:
                    break
            else:  # the epoch ended before the trial did: timed again next pass
                return
            trial.rates.append((len(times) - 1) / max(times[-1] - times[0], 1e-9))
            if serial != self._passes or not self._loader.is_current(batches.cursor):
                yield from batches  # a newer pass, set_epoch or load_state_dict moves the loader now: go on as we are
                return
            following = self._next_trial()
            if following is None and self._fastest() == trial.setting:
                self._choose("kept running")  # the last one timed won: its pass, workers and caches go on
                yield from batches
                return
            batches.close()
            trial = following
        if self._pass_done(epoch):  # chosen at the next pass's start
            return
        self._choose("switched")
        assert self.chosen is not None
        self._switch(self.chosen, start)
        yield from self._loader
