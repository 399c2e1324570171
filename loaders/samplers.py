"""Batch samplers: this rank's batches of sample indices, a pure function of (seed, epoch).

With the order a pure function of ``(seed, epoch)``, state is two integers and a
resume is arithmetic: nothing before the resume point is read or decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import torch

from mediapipe.options import LAST_BATCH, LastBatch


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


def distributed_rank_and_size() -> tuple[int, int]:
    """(rank, world size) of the initialised torch.distributed process group, else (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def check_rank(rank: int, world_size: int) -> None:
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} is outside [0, world_size={world_size})")


def sampler_ranks(rank: int | None, world_size: int | None) -> tuple[int, int, bool]:
    """A sampler's (rank, world size, whether either was given): what is not given is
    torch.distributed's (0 of 1 without a process group), as DistributedSampler does; a loader
    gives a sampler made without either its own ranks (`sampling.fit_sampler`)."""
    given = rank is not None or world_size is not None
    if rank is None or world_size is None:
        auto_rank, auto_size = distributed_rank_and_size()
        rank = auto_rank if rank is None else rank
        world_size = auto_size if world_size is None else world_size
    check_rank(rank, world_size)
    return rank, world_size, given


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

    Every sample goes to exactly one rank per epoch (rank r takes positions r, r + W, ...),
    and every rank yields the same number of batches, as DDP needs (a rank that ran out of
    batches early would leave the others waiting in an all-reduce). ``last_batch``:

    - "partial" (default): every rank reads ceil(N / W) samples, as torch's DistributedSampler
      does; a rank with one sample fewer repeats its last one, flagged False in
      ``batch["valid"]`` (present on every batch when such padding can happen, N % W != 0).
      With fewer samples than ranks, a rank that has none repeats another rank's sample.
      The last batch of each rank may be short (the same size on every rank).
    - "drop": every rank reads floor(N / W) samples, in full batches only; the rest is dropped.
    - "pad": as "partial", and the short last batch is filled to full size by repeating its
      last sample; ``batch["valid"]`` (always present) flags the padding.

    ``rank`` / ``world_size`` not given: torch.distributed's, and a loader given this sampler
    sets them to its own ranks (given ones must agree with the loader's, or it refuses them).
    ``PlannedBatch.valid`` counts the real samples at the front of each batch.

    A source that is this rank's part already (shards read by rank) is read whole as rank 0 of
    1; ``part_sizes`` (every rank's part's size) then gives each rank the slots of the largest
    part (the smallest for "drop"), so ranks with parts of other sizes still step together.
    """

    STATE_VERSION = 1

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        last_batch: LastBatch = "partial",
        part_sizes: Sequence[int] | None = None,
    ) -> None:
        if part_sizes is not None and rank is None and world_size is None:
            rank, world_size = 0, 1  # a part of the source already: read whole
        rank, world_size, self.ranks_given = sampler_ranks(rank, world_size)
        if part_sizes is not None and (world_size != 1 or num_samples not in part_sizes):
            raise ValueError(f"part_sizes={list(part_sizes)}: for a source that is this rank's part already "
                             f"(read as rank 0 of 1), one of its sizes ({num_samples} samples)")
        if batch_size <= 0:
            raise ValueError(f"batch_size={batch_size}: expected a positive int")
        if last_batch not in LAST_BATCH:
            raise ValueError(f"last_batch={last_batch!r}: expected one of {LAST_BATCH}")
        if num_samples <= 0:
            raise ValueError(f"num_samples={num_samples}: nothing to read")
        self.num_samples, self.batch_size = num_samples, batch_size
        self.shuffle, self.seed, self.rank, self.world_size = shuffle, seed, rank, world_size
        self.last_batch = last_batch
        self.part_sizes = tuple(part_sizes) if part_sizes is not None else None
        self.epoch, self.position = 0, 0

    @property
    def may_pad(self) -> bool:
        """Whether a batch of some rank may hold padding (then every batch carries ``valid``)."""
        uneven = self.num_samples % self.world_size != 0 or len(set(self.part_sizes or ())) > 1
        return self.last_batch == "pad" or (self.last_batch == "partial" and uneven)

    def samples_per_rank(self) -> int:
        """The sample slots each rank reads per epoch, padding included (before "pad" fills the
        last batch): ceil(N / W), or floor(N / W) for "drop"; for a source split by rank, the
        largest part (the smallest for "drop")."""
        if self.part_sizes:
            return min(self.part_sizes) if self.last_batch == "drop" else max(self.part_sizes)
        if self.last_batch == "drop":
            return self.num_samples // self.world_size
        return -(-self.num_samples // self.world_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.position = epoch, 0

    def bind_ranks(self, rank: int, world_size: int) -> None:
        """Plan ``rank``'s batches of ``world_size`` from now on (a loader's ranks, for a sampler
        made without any)."""
        check_rank(rank, world_size)
        if self.part_sizes is not None and world_size != 1:
            raise ValueError(f"a sampler with part_sizes reads this rank's part whole: rank 0 of 1, "
                             f"not rank {rank} of {world_size}")
        self.rank, self.world_size = rank, world_size

    def order(self) -> np.ndarray:
        """All sample indices of this epoch, in the order they are read (every rank's)."""
        if self.shuffle:
            return np.random.default_rng([self.seed, self.epoch]).permutation(self.num_samples)
        return np.arange(self.num_samples)

    def rank_indices(self) -> np.ndarray:
        return self.order()[self.rank :: self.world_size]

    def batches(self) -> list[PlannedBatch]:
        mine = self.rank_indices()
        bs, slots = self.batch_size, self.samples_per_rank()
        if self.last_batch == "drop":
            return [PlannedBatch(mine[i * bs : (i + 1) * bs], bs) for i in range(slots // bs)]
        real = len(mine)  # slots, or slots - 1: the missing slot repeats this rank's last sample
        if self.last_batch == "pad":
            slots = -(-slots // bs) * bs
        fill = mine[-1] if real else self.order()[self.rank % self.num_samples]  # fewer samples than ranks
        padded = np.concatenate([mine, np.full(slots - real, fill, dtype=mine.dtype)])
        return [PlannedBatch(padded[i : i + bs], max(0, min(bs, real - i))) for i in range(0, slots, bs)]

    def __len__(self) -> int:
        slots = self.samples_per_rank()
        if self.last_batch == "drop":
            return slots // self.batch_size
        return -(-slots // self.batch_size)

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


EpochLength = Literal["repeats", "dataset"]
EPOCH_LENGTHS: tuple[str, ...] = ("repeats", "dataset")


class RepeatedAugmentationSampler(EpochBatchSampler):
    """Each sample ``repeats`` times per epoch, every repeat with draws of its own, spread over the
    ranks as torchvision's ``RASampler`` (references/classification/sampler.py, from DeiT) does.

    The epoch's permutation (`order`) lists each sample ``repeats`` times in a row; the list is
    padded to a multiple of the world size by wrapping to its head (those slots are real repeats,
    as torchvision trains on them), and rank r takes slots r, r + W, ...: consecutive repeats of a
    sample go to different ranks. A slot's index is its *draw index* ``c * N + i``, for the c-th
    occurrence of sample i in the epoch (c < repeats, beyond for the wrapped slots): a loader reads
    sample ``index % N`` and keys every draw by the draw index, so repeats differ and the batches
    stay a pure function of (seed, epoch), resumable like `EpochBatchSampler`'s.

    ``epoch_length``: "repeats" (default) reads every repeat, ceil(N * repeats / W) slots per rank
    (floor for ``last_batch="drop"``); "dataset" keeps torchvision's epoch, the first
    floor(N // 256 * 256 / W) slots of each rank's (about N / repeats samples, ``repeats`` times
    each), so a recipe's schedule in epochs ports as it is. ``last_batch``: "partial" and "drop" as
    `EpochBatchSampler`; "pad" fills the short last batch with its last slot, ``valid`` False.
    """

    def __init__(self, num_samples: int, batch_size: int, *, repeats: int = 3, epoch_length: EpochLength = "repeats",
                 shuffle: bool = True, seed: int = 0, rank: int | None = None, world_size: int | None = None,
                 last_batch: LastBatch = "partial") -> None:
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats={repeats!r}: expected an int >= 1")
        if epoch_length not in EPOCH_LENGTHS:
            raise ValueError(f"epoch_length={epoch_length!r}: expected one of {EPOCH_LENGTHS}")
        super().__init__(num_samples, batch_size, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size,
                         last_batch=last_batch)
        self.repeats, self.epoch_length = repeats, epoch_length
        self._check_length()

    @property
    def may_pad(self) -> bool:
        """Only "pad" pads: the other slots are all real repeats."""
        return self.last_batch == "pad"

    def samples_per_rank(self) -> int:
        """This rank's slots per epoch (before "pad" fills the last batch), as the docstring says."""
        n, w = self.num_samples, self.world_size
        if self.epoch_length == "dataset":
            return n // 256 * 256 // w
        if self.last_batch == "drop":
            return n * self.repeats // w
        return -(-n * self.repeats // w)

    @property
    def draw_copies(self) -> int:
        """How many draw indices per sample a pass may use: the occurrences of the most repeated one."""
        total = self.samples_per_rank() * self.world_size
        return max(1, -(-total // (self.num_samples * self.repeats))) * self.repeats

    def bind_ranks(self, rank: int, world_size: int) -> None:
        super().bind_ranks(rank, world_size)
        self._check_length()

    def _check_length(self) -> None:
        if self.samples_per_rank() == 0:
            raise ValueError(
                f"RepeatedAugmentationSampler(epoch_length={self.epoch_length!r}): no slot for rank {self.rank} of "
                f"{self.world_size} with {self.num_samples} samples (torchvision's epoch of floor(N // 256 * 256 / W) "
                "per rank needs 256 samples or more); use epoch_length='repeats'")

    def rank_indices(self) -> np.ndarray:
        """This rank's draw indices: its slots r, r + W, ... of the repeated, wrapped epoch."""
        n, k = self.num_samples, self.repeats
        positions = self.rank + self.world_size * np.arange(self.samples_per_rank(), dtype=np.int64)
        cycle, at = np.divmod(positions, n * k)
        return (cycle * k + at % k) * n + self.order()[at // k]

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "repeats": self.repeats, "epoch_length": self.epoch_length}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        mine = {"repeats": state.pop("repeats", None), "epoch_length": state.pop("epoch_length", None)}
        check_resume({"version": self.STATE_VERSION, **mine},
                     {"repeats": self.repeats, "epoch_length": self.epoch_length}, self.STATE_VERSION)
        super().load_state_dict(state)
