"""The batch sampler of a loader, built in one place for every backend (torch, DALI).

Resolves ``drop_last`` / ``last_batch``, this process's rank among the training processes
(given, or torch.distributed's), and a source already split by rank (converted shards read
by rank: its loader reads all of it, as rank 0 of 1, padded or cut to the other ranks' parts
by ``source.rank_samples`` so that every rank gets the same number of batches). A sampler
handed to a loader is fitted to the loader's ranks (`fit_sampler`): one made without ranks is
given them, one whose ranks disagree is refused, so no rank silently reads every sample.

Repeated augmentations (``repeated_augmentations=k``, a `RepeatedAugmentationSampler`): the
sampler's indices are draw indices ``c * N + i`` (the c-th repeat of sample i), and the loader's
plan reads them through `RepeatedSource` (`plan_for`), which reads sample ``i`` under the draw
index: every draw is keyed by the repeat, and ``batch["index"] % N`` is the sample.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from mediapipe.errors import PipelineError
from mediapipe.loaders.samplers import (
    BatchSampler,
    EpochBatchSampler,
    RepeatedAugmentationSampler,
    distributed_rank_and_size,
)
from mediapipe.loaders.sources.folder import Source, WrappedSource
from mediapipe.options import LAST_BATCH, LastBatch
from mediapipe.sample import SampleMeta, SampleRef

if TYPE_CHECKING:
    from mediapipe.pipeline import Pipeline
    from mediapipe.plan import Plan


def resolve_last_batch(last_batch: LastBatch = "partial", drop_last: bool | None = None) -> str:
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
    from_process_group: bool = field(default=False, compare=False)  # neither given: torch.distributed's

    @property
    def sampler_rank(self) -> int:
        return 0 if self.split_by_source else self.rank

    @property
    def sampler_world_size(self) -> int:
        return 1 if self.split_by_source else self.world_size


def resolve_ranks(source: Source, rank: int | None = None, world_size: int | None = None) -> Ranks:
    """The given rank and world size, else torch.distributed's (or 0 of 1), and whether
    ``source`` is already this rank's part (``source.split_by_rank``)."""
    from_process_group = rank is None and world_size is None
    if rank is None or world_size is None:
        auto_rank, auto_size = distributed_rank_and_size()
        rank = auto_rank if rank is None else rank
        world_size = auto_size if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} is outside [0, world_size={world_size})")
    return Ranks(rank, world_size, source.split_by_rank, from_process_group)


def check_process_group(ranks: Ranks) -> None:
    """Refuse a pass whose ranks were torch.distributed's when the loader was made but are not now
    (a loader made before ``init_process_group`` would read every sample on every rank)."""
    if not ranks.from_process_group or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    now = torch.distributed.get_rank(), torch.distributed.get_world_size()
    if now != (ranks.rank, ranks.world_size):
        raise PipelineError(
            f"this loader took rank {ranks.rank} of {ranks.world_size} from torch.distributed when it was made "
            f"(before init_process_group?), and this process is now rank {now[0]} of {now[1]}: make the loader "
            "after init_process_group, or pass it rank= and world_size=")


def fit_sampler(sampler: BatchSampler, ranks: Ranks) -> BatchSampler:
    """``sampler``, planning this rank's part: a sampler made without ranks is given the loader's
    (``bind_ranks``); one with other ranks, or one that has none to say under several ranks, is
    refused, as every rank would read samples another one reads too."""
    want = (ranks.sampler_rank, ranks.sampler_world_size)
    has = (getattr(sampler, "rank", None), getattr(sampler, "world_size", None))
    name = type(sampler).__name__
    bindable = getattr(sampler, "ranks_given", True) is False and hasattr(sampler, "bind_ranks")
    bound = getattr(sampler, "_loader_ranks", None)  # the ranks a loader fitted it to
    if bindable and bound is not None and bound != want:  # rebinding would move the other loader's rank too
        raise PipelineError(
            f"sampler {name} plans rank {bound[0]} of {bound[1]} for the loader it was handed to first, and this "
            f"loader reads as rank {want[0]} of {want[1]}: one sampler plans one rank's batches (rebinding it would "
            "make the first loader read this rank's samples). Give each loader a sampler of its own")
    if has == want or (bindable and None not in has):
        if has != want:
            sampler.bind_ranks(*want)
        if bindable:
            with contextlib.suppress(AttributeError):  # (a sampler with __slots__: not remembered)
                sampler._loader_ranks = want  # type: ignore[attr-defined]
        return sampler
    if None in has:
        if want[1] == 1:  # one process reads everything: nothing to split
            return sampler
        raise PipelineError(
            f"sampler {name} does not say which rank's batches it plans (no rank and world_size attributes), and "
            f"the loader runs as rank {ranks.rank} of {ranks.world_size}: every rank would read every sample. "
            "Give it rank and world_size (and plan that rank's part), or use EpochBatchSampler or "
            "DurationBucketSampler")
    why = (f"the source is rank {ranks.rank}'s part already, read whole" if ranks.split_by_source
           else "its rank= and world_size=, else torch.distributed's")
    raise PipelineError(
        f"sampler {name} plans rank {has[0]} of {has[1]}, and the loader reads as rank {want[0]} of {want[1]} "
        f"({why}): samples would be read by several ranks, or by none. Make the sampler without rank and "
        f"world_size (the loader gives it its own), or with rank={want[0]}, world_size={want[1]}")


def build_sampler(pipeline: Pipeline, *, shuffle: bool = True, last_batch: LastBatch = "partial",
                  drop_last: bool | None = None, rank: int | None = None, world_size: int | None = None,
                  sampler: BatchSampler | None = None, repeated_augmentations: int = 1) -> BatchSampler:
    """``sampler`` when given, fitted to this rank (`fit_sampler`); else this rank's
    `EpochBatchSampler` over ``pipeline.source`` (a `RepeatedAugmentationSampler` for
    ``repeated_augmentations`` > 1), with every rank getting the same number of batches (see its
    ``last_batch``)."""
    if isinstance(repeated_augmentations, bool) or not isinstance(repeated_augmentations, int) \
            or repeated_augmentations < 1:
        raise ValueError(f"repeated_augmentations={repeated_augmentations!r}: expected an int >= 1 (1: none)")
    ranks = resolve_ranks(pipeline.source, rank, world_size)
    if sampler is not None:
        if repeated_augmentations != 1:
            raise PipelineError(
                f"repeated_augmentations={repeated_augmentations} makes the loader's sampler, and sampler= gives "
                f"one ({type(sampler).__name__}): give one of them (RepeatedAugmentationSampler(..., "
                f"repeats={repeated_augmentations}) as sampler= for its other settings)")
        return fit_sampler(sampler, ranks)
    if repeated_augmentations != 1:
        if ranks.split_by_source:
            raise PipelineError(
                f"repeated_augmentations={repeated_augmentations}: the source is rank {ranks.rank}'s part already "
                "(shards read by rank), so the repeats of a sample cannot go to different ranks as torchvision's "
                "RASampler sends them; read the whole source on every rank (not for_rank)")
        return RepeatedAugmentationSampler(
            len(pipeline.source), pipeline.batch_size, repeats=repeated_augmentations, shuffle=shuffle,
            seed=pipeline.seed, rank=ranks.rank, world_size=ranks.world_size,
            last_batch=resolve_last_batch(last_batch, drop_last))
    return EpochBatchSampler(
        len(pipeline.source), pipeline.batch_size, shuffle=shuffle, seed=pipeline.seed,
        rank=ranks.sampler_rank, world_size=ranks.sampler_world_size,
        last_batch=resolve_last_batch(last_batch, drop_last),
        part_sizes=pipeline.source.rank_samples if ranks.split_by_source else None,
    )


def may_pad(sampler: BatchSampler) -> bool:
    """Whether ``sampler`` may put padding in a batch of some rank: then every batch carries
    ``valid`` (a sampler without ``may_pad`` pads only with ``last_batch="pad"``)."""
    return bool(getattr(sampler, "may_pad", getattr(sampler, "last_batch", None) == "pad"))


class RepeatedSource(WrappedSource):
    """A source read by draw index ``c * N + i`` (`RepeatedAugmentationSampler`): sample i, under
    the draw index, so the sample stage, the batch stage and ``batch["index"]`` all key the repeat."""

    kind = ""  # a loader's view of its pipeline's source, never written to a config

    def __init__(self, inner: Source, copies: int) -> None:
        self.inner, self.copies = inner, copies

    @property
    def split_by_rank(self) -> bool:  # type: ignore[override]
        return self.inner.split_by_rank

    @property
    def fingerprint(self) -> str | None:  # type: ignore[override]
        return self.inner.fingerprint

    def __len__(self) -> int:
        return len(self.inner) * self.copies

    def ref(self, index: int) -> SampleRef:
        return replace(self.inner.ref(index % len(self.inner)), index=index)

    def meta(self, index: int) -> SampleMeta:
        return self.inner.meta(index % len(self.inner))

    def prefetch(self, indices: Iterable[int]) -> None:
        n = len(self.inner)
        self.inner.prefetch([i % n for i in indices])

    def to_config(self) -> dict[str, Any]:
        return self.inner.to_config()


def plan_for(plan: Plan, sampler: BatchSampler) -> Plan:
    """The plan a loader runs with ``sampler``: ``plan``, or for a sampler of draw indices
    (`RepeatedAugmentationSampler`) a copy that reads them through `RepeatedSource`."""
    copies = getattr(sampler, "draw_copies", None)
    if copies is None:
        return plan
    repeated = copy.copy(plan)
    repeated.source = RepeatedSource(plan.source, copies)
    return repeated
