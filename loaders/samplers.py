"""Batch samplers: this rank's batches of sample indices, a pure function of (seed, epoch).

With the order a pure function of ``(seed, epoch)``, state is two integers and a
resume is arithmetic: nothing before the resume point is read or decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

LAST_BATCH = ("drop", "partial", "pad")


@dataclass(frozen=True)
class PlannedBatch:
    """One batch of sample indices; ``valid`` counts the real ones (the rest repeat, for "pad")."""

    indices: np.ndarray
    valid: int


class BatchSampler(Protocol):
    """What the loader needs from a sampler."""

    epoch: int
    position: int  # batches of the current epoch already delivered

    def set_epoch(self, epoch: int) -> None: ...
    def batches(self) -> list[PlannedBatch]: ...
    def __len__(self) -> int: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def check_resume(state: dict[str, Any], here: dict[str, Any], version: int) -> dict[str, Any]:
    """Pop and compare the fields that must match to resume; returns what is left."""
    state = dict(state)
    if (saved := state.pop("version", None)) != version:
        raise ValueError(f"sampler state version {saved}, expected {version}")
    for name, value in here.items():
        saved = state.pop(name, None)
        if saved != value:
            raise ValueError(f"cannot resume: checkpoint {name}={saved}, this run {name}={value}")
    return state


class EpochBatchSampler:
    """This rank's batches: a new permutation each epoch (or the natural order), split by rank.

    Every sample goes to exactly one rank per epoch (rank r takes positions r, r + W, ...).
    ``last_batch``: "drop" a short last batch (all ranks then yield the same number of
    batches), keep it "partial", or "pad" it to full size by repeating its last sample
    (``PlannedBatch.valid`` says how many are real).
    """

    STATE_VERSION = 1

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        last_batch: str = "partial",
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} is outside [0, world_size={world_size})")
        if batch_size <= 0:
            raise ValueError(f"batch_size={batch_size}: expected a positive int")
        if last_batch not in LAST_BATCH:
            raise ValueError(f"last_batch={last_batch!r}: expected one of {LAST_BATCH}")
        if num_samples < world_size:
            raise ValueError(f"{num_samples} samples cannot be shared by world_size={world_size} ranks")
        self.num_samples, self.batch_size = num_samples, batch_size
        self.shuffle, self.seed, self.rank, self.world_size = shuffle, seed, rank, world_size
        self.last_batch = last_batch
        self.epoch, self.position = 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.position = epoch, 0

    def order(self) -> np.ndarray:
        """All sample indices of this epoch, in the order they are read (every rank's)."""
        if self.shuffle:
            return np.random.default_rng([self.seed, self.epoch]).permutation(self.num_samples)
        return np.arange(self.num_samples)

    def rank_indices(self) -> np.ndarray:
        return self.order()[self.rank :: self.world_size]

    def batches(self) -> list[PlannedBatch]:
        mine = self.rank_indices()
        bs = self.batch_size
        if self.last_batch == "drop":
            full = (self.num_samples // self.world_size) // bs  # equal on every rank
            return [PlannedBatch(mine[i * bs : (i + 1) * bs], bs) for i in range(full)]
        out = [PlannedBatch(mine[i : i + bs], min(bs, len(mine) - i)) for i in range(0, len(mine), bs)]
        if self.last_batch == "pad":
            per_rank = -(-self.num_samples // self.world_size)
            target = -(-per_rank // bs)  # equal on every rank
            if out and out[-1].valid < bs:
                last = out[-1]
                pad = np.full(bs - last.valid, last.indices[-1], dtype=last.indices.dtype)
                out[-1] = PlannedBatch(np.concatenate([last.indices, pad]), last.valid)
            while len(out) < target:  # this rank has one sample fewer than another: all-padding batch
                out.append(PlannedBatch(np.full(bs, mine[-1], dtype=mine.dtype), 0))
        return out

    def __len__(self) -> int:
        per_rank_max = -(-self.num_samples // self.world_size)
        mine = len(range(self.rank, self.num_samples, self.world_size))
        if self.last_batch == "drop":
            return (self.num_samples // self.world_size) // self.batch_size
        if self.last_batch == "pad":
            return -(-per_rank_max // self.batch_size)
        return -(-mine // self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": self.STATE_VERSION, "seed": self.seed, "world_size": self.world_size, "rank": self.rank,
            "num_samples": self.num_samples, "batch_size": self.batch_size, "shuffle": self.shuffle,
            "epoch": self.epoch, "position": self.position,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        here = {name: getattr(self, name) for name in
                ("seed", "world_size", "rank", "num_samples", "batch_size", "shuffle")}
        rest = check_resume(state, here, self.STATE_VERSION)
        self.epoch, self.position = rest.pop("epoch"), rest.pop("position")
        if rest:
            raise ValueError(f"unexpected keys in sampler state: {sorted(rest)}")
