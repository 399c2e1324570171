"""The batch sampler of a loader, built in one place for every backend (torch, DALI).

Resolves ``drop_last`` / ``last_batch``, this process's rank among the training processes
(given, or torch.distributed's), and a source already split by rank (converted shards read
by rank: its loader reads all of it, as rank 0 of 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from mediapipe.loaders.samplers import LAST_BATCH, BatchSampler, EpochBatchSampler

if TYPE_CHECKING:
    from mediapipe.pipeline import Pipeline


def distributed_rank_and_size() -> tuple[int, int]:
    """(rank, world size) of the initialised torch.distributed process group, else (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def resolve_last_batch(last_batch: str = "partial", drop_last: bool | None = None) -> str:
    """``drop_last=True`` means "drop"; ``drop_last=False`` or None leaves ``last_batch``."""
    if last_batch not in LAST_BATCH:
        raise ValueError(f"last_batch={last_batch!r}: expected one of {LAST_BATCH}")
    return "drop" if drop_last else last_batch


@dataclass(frozen=True)
class Ranks:
    """This process's place among the training processes, and how the sampler splits the data."""

    rank: int  # keys what differs by rank (per-batch draws, DALI's seed)
    world_size: int
    split_by_source: bool = False  # the source holds this rank's part already

    @property
    def sampler_rank(self) -> int:
        return 0 if self.split_by_source else self.rank

    @property
    def sampler_world_size(self) -> int:
        return 1 if self.split_by_source else self.world_size


def resolve_ranks(source: Any, rank: int | None = None, world_size: int | None = None) -> Ranks:
    """The given rank and world size, else torch.distributed's (or 0 of 1), and whether
    ``source`` is already this rank's part (``source.split_by_rank``)."""
    if rank is None or world_size is None:
        auto_rank, auto_size = distributed_rank_and_size()
        rank = auto_rank if rank is None else rank
        world_size = auto_size if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} is outside [0, world_size={world_size})")
    return Ranks(rank, world_size, bool(getattr(source, "split_by_rank", False)))


def build_sampler(pipeline: Pipeline, *, shuffle: bool = True, last_batch: str = "partial",
                  drop_last: bool | None = None, rank: int | None = None, world_size: int | None = None,
                  sampler: BatchSampler | None = None) -> BatchSampler:
    """``sampler`` when given; else this rank's `EpochBatchSampler` over ``pipeline.source``,
    with every rank getting the same number of batches (see its ``last_batch``)."""
    if sampler is not None:
        return sampler
    ranks = resolve_ranks(pipeline.source, rank, world_size)
    return EpochBatchSampler(
        len(pipeline.source), pipeline.batch_size, shuffle=shuffle, seed=pipeline.seed,
        rank=ranks.sampler_rank, world_size=ranks.sampler_world_size,
        last_batch=resolve_last_batch(last_batch, drop_last),
    )


def may_pad(sampler: BatchSampler) -> bool:
    """Whether ``sampler`` may put padding in a batch of some rank: then every batch carries
    ``valid`` (a sampler without ``may_pad`` pads only with ``last_batch="pad"``)."""
    return bool(getattr(sampler, "may_pad", getattr(sampler, "last_batch", None) == "pad"))
