"""`Schedule`: an op argument that follows the epoch (progressive resolution, as FFCV's
``ResolutionScheduler`` and MosaicML's progressive resizing do).

``A.RandomResizedCrop(mp.Schedule({0: 160, 10: 192, 18: 224}))`` crops to 160 in epochs 0-9,
192 in 10-17 and 224 from 18 on: at epoch e an argument takes the value of the largest key <= e.
The op checks every value as it checks the argument itself, when it is made; the plan resolves
its ops for each epoch (`mediapipe.plan.Plan.at_epoch`), so the keyed draws, the worker count
and a resume mid-epoch give the same batches as a fixed size would.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

import numpy as np

CONFIG_KEY = "schedule"


def _frozen(value: Any) -> Any:
    """Lists as tuples, all the way down: a schedule is hashable, as the frozen ops holding it are."""
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def _plain(value: Any) -> Any:
    """Tuples as lists, for JSON and YAML."""
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


def _epoch_key(key: Any, steps: Any) -> int:
    """A schedule's key as an int epoch >= 0 (a config's ``"10"`` too)."""
    if isinstance(key, str) and key.strip().isdigit():
        key = int(key)
    if isinstance(key, bool) or not isinstance(key, (int, np.integer)) or key < 0:
        raise ValueError(f"Schedule({steps!r}): key {key!r} is not an epoch (expected an int >= 0)")
    return int(key)


class Schedule:
    """An argument's value per epoch: ``{first epoch: value}``, the value of the largest key <= e
    at epoch e. The keys are ints >= 0 and include 0. Pickles and compares by its steps."""

    __slots__ = ("steps",)

    def __init__(self, steps: Mapping[int, Any]) -> None:
        if isinstance(steps, Schedule):
            steps = dict(steps.steps)
        if not isinstance(steps, Mapping) or not steps:
            raise ValueError(f"Schedule({steps!r}): expected a dict {{first epoch: value}}, e.g. {{0: 160, 10: 192}}")
        pairs: dict[int, Any] = {}
        for key, value in steps.items():
            epoch = _epoch_key(key, steps)
            if epoch in pairs:
                raise ValueError(f"Schedule({steps!r}): epoch {epoch} is given twice")
            pairs[epoch] = _frozen(value)
        if 0 not in pairs:
            raise ValueError(f"Schedule({steps!r}): expected a value for epoch 0 (keys: {sorted(pairs)})")
        object.__setattr__(self, "steps", tuple(sorted(pairs.items())))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Schedule is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return Schedule, (dict(self.steps),)

    def at(self, epoch: int) -> Any:
        """The value at ``epoch``: that of the largest key <= ``epoch``."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ValueError(f"{self!r}.at({epoch!r}): expected an epoch, an int >= 0")
        keys = [k for k, _ in self.steps]
        return self.steps[bisect.bisect_right(keys, int(epoch)) - 1][1]

    @property
    def epochs(self) -> tuple[int, ...]:
        """The epochs at which the value changes (the keys), in order."""
        return tuple(k for k, _ in self.steps)

    def to_config(self) -> dict[str, Any]:
        """``{"schedule": {"0": 160, "10": 192}}``: JSON and YAML serialisable (`from_config`)."""
        return {CONFIG_KEY: {str(k): _plain(v) for k, v in self.steps}}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Schedule:
        return cls(config[CONFIG_KEY])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schedule) and self.steps == other.steps

    def __hash__(self) -> int:
        return hash(self.steps)

    def __repr__(self) -> str:
        return f"Schedule({{{', '.join(f'{k}: {v!r}' for k, v in self.steps)}}})"


def is_schedule_config(value: Any) -> bool:
    """Whether a config value is a `Schedule.to_config` dict."""
    return isinstance(value, Mapping) and set(value) == {CONFIG_KEY}


__all__ = ["Schedule", "is_schedule_config"]
