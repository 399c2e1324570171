"""What every loader shares, whichever engine builds its batches (worker processes, DALI, Ray actors).

`LoaderBase` checks the arguments the backends have in common, builds this rank's batch sampler
(`sampling.build_sampler`: ranks, a source already split by rank, ``last_batch``), and keeps the
pass tracking that ``state_dict()`` describes: where a new pass starts (`LoaderBase.begin_pass`),
which pass is the current one, what a delivered batch and an epoch's end move. `place_batch_ops`
is the rule for where the batch stage runs. `BACKENDS` names the built-in backends that
``Pipeline.loader(backend=...)`` picks from; each module is imported when first asked for.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from mediapipe.errors import PipelineError
from mediapipe.loaders.samplers import BatchSampler, PlannedBatch
from mediapipe.loaders.sampling import (
    build_sampler,
    check_process_group,
    plan_for,
    resolve_last_batch,
    resolve_ranks,
)
from mediapipe.options import LastBatch, Where
from mediapipe.stages.stats import StageStats

if TYPE_CHECKING:
    import torch
    from typing_extensions import Self

    from mediapipe.pipeline import Pipeline
    from mediapipe.plan import Plan
    from mediapipe.stages.epoch_cache import EpochCache

__all__ = ["BACKENDS", "LoaderBase", "LoaderStats", "PassCursor", "SamplingOptions", "check_count",
           "check_seconds", "loader_class",
           "place_batch_ops"]

# name -> "module:class" of each built-in backend, imported when first asked for (DALI and Ray are extras)
BACKENDS: dict[str, str] = {
    "torch": "mediapipe.loaders.loader:Loader",
    "dali": "mediapipe.loaders.dali.loader:DaliLoader",
    "ray": "mediapipe.loaders.ray_loader:RayLoader",
}


def loader_class(backend: str) -> type[LoaderBase]:
    """The loader class of the built-in ``backend`` (one of `BACKENDS`)."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {tuple(BACKENDS)}")
    module, _, name = BACKENDS[backend].partition(":")
    return getattr(importlib.import_module(module), name)


class SamplingOptions(TypedDict, total=False):
    """Which batches this rank reads: the keyword arguments every loader hands to `LoaderBase`."""

    shuffle: bool
    drop_last: bool | None
    last_batch: LastBatch
    sampler: BatchSampler | None
    rank: int | None
    world_size: int | None
    repeated_augmentations: int  # each sample k times per epoch, each repeat with draws of its own


def check_count(name: str, value: Any, minimum: int) -> None:
    """Refuse a count argument that is not an int of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r}: expected an int >= {minimum}")


def check_seconds(name: str, value: Any) -> None:
    """Refuse a duration that is not a number of seconds >= 0 (0: no limit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name}={value!r}: expected seconds >= 0 (0: no limit)")


LIBRARY_PACKAGES = ("mediapipe", "mediapipe.loaders", "mediapipe.augment", "mediapipe.decoders")  # their folders


def _outside_library() -> int:
    """The ``stacklevel`` of the first caller outside this library, so a warning names the user's line."""
    roots = tuple(os.path.dirname(module.__file__) + os.sep for name in LIBRARY_PACKAGES
                  if (module := sys.modules.get(name)) is not None and module.__file__)
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(roots):
        frame, level = frame.f_back, level + 1
    return level


def warn_if_no_batch(sampler: BatchSampler) -> None:
    """Warn when this rank's epoch has no batch (``drop`` with fewer samples per rank than a batch):
    a loop over the loader would otherwise run zero steps without a word."""
    if len(sampler) > 0:
        return
    size = getattr(sampler, "batch_size", None)
    per_rank = sampler.samples_per_rank() if hasattr(sampler, "samples_per_rank") else None
    if size is None or per_rank is None:
        reason = f"the sampler given ({type(sampler).__name__}) plans no batch for this rank's epoch"
    else:
        ranks = getattr(sampler, "world_size", 1)
        share = f" over {ranks} ranks: {per_rank} per rank" if ranks != 1 else " on 1 rank"
        smaller = f"batch_size <= {per_rank}" if per_rank else "fewer ranks than samples"
        reason = (f"{getattr(sampler, 'num_samples', per_rank)} samples{share}, batch_size={size} and "
                  f"last_batch={getattr(sampler, 'last_batch', 'drop')!r} (what drop_last=True asks for), which "
                  f"drops a batch that is not full; set last_batch='partial' to get one short batch, or {smaller}")
    warnings.warn(f"this loader's epoch has no batch (len(loader) == 0): {reason}", UserWarning,
                  stacklevel=_outside_library())


def place_batch_ops(plan: Plan, device: torch.device, requested: bool | None, num_workers: int) -> Where:
    """Where the batch-stage ops run: "worker" (where the batches are built: worker processes, Ray
    actors) or "device" (in this process, on the device); ``requested`` is the loader's
    ``batch_ops_in_workers``. By default only for a CPU device with workers: its
    cores are the device, so the stage spreads over every worker instead of running serially here.
    Never with fields decoded on the device: they reach the batch stage in this process only."""
    if requested is None:
        requested = device.type == "cpu" and num_workers > 0 and not plan.device_fields
    if requested and plan.device_fields:
        raise PipelineError(f"fields {sorted(plan.device_fields)} decode on the device: the batch-stage "
                            "ops cannot run in the workers")
    return "worker" if requested else "device"


def state_parts(state: Any) -> dict[str, Any]:
    """A loader's state as its parts: the sampler's, and a backend's under the backend's name (DALI's
    checkpoint under "dali"); anything else is refused, on every backend."""
    if not isinstance(state, Mapping) or "sampler" not in state:
        raise ValueError(f"a loader state is what state_dict() returns, a mapping with a 'sampler' part; got "
                         f"{type(state).__name__}" + (f" with {sorted(state)}" if isinstance(state, Mapping) else ""))
    unknown = sorted(set(state) - {"sampler", *BACKENDS})
    if unknown:
        raise ValueError(f"unexpected keys in loader state: {unknown}; a loader's state holds 'sampler' and a "
                         f"backend's part under the backend's name, one of {sorted(BACKENDS)}")
    return dict(state)


@dataclass
class LoaderStats(StageStats):
    """A loader's `StageStats`, with ``cache``: the epoch cache's counts (hits, misses, stored,
    skipped, rejected; see `mediapipe.stages.epoch_cache`), merged from each delivered batch's."""

    cache: Counter = field(default_factory=Counter)

    def merge(self, other: StageStats) -> None:
        super().merge(other)
        self.cache.update(getattr(other, "cache", None) or {})

    def as_dict(self) -> dict[str, Any]:
        return {**super().as_dict(), "cache": dict(self.cache)}


@dataclass
class PassCursor:
    """One pass over an epoch: where it began (``start`` of ``length`` batches) and how many it delivered."""

    epoch: int
    start: int
    length: int
    delivered: int = 0


class LoaderBase:
    """An iterable of batches with ``len()``, ``epoch``, ``set_epoch()``, ``state_dict()`` and ``stats``.

    Passes: each ``iter(loader)`` is a pass of its own. It starts at the first batch of the
    loader's epoch, so a peek (``next(iter(loader))``) costs the next pass nothing, unless
    ``load_state_dict`` ran since the last pass began (then at the loaded position); only a pass
    delivered to its last batch advances the epoch. The newest pass is the loader's *current*
    one: only it moves the position and epoch that ``state_dict()`` describes (``set_epoch`` and
    ``load_state_dict`` detach it); older ones still deliver their own batches.

    Ranks: every rank gets ``len(loader)`` batches (see `EpochBatchSampler` for how each
    ``last_batch`` pads or drops); padding samples are flagged False in ``batch["valid"]``.
    """

    min_workers = 0  # the fewest ``num_workers`` the backend runs with
    default_workers = 0  # what ``Pipeline.loader(num_workers=0)`` asks this backend for
    takes_cache = False  # whether the backend keeps an epoch cache (``cache=``)

    def __init__(self, pipeline: Pipeline, *, num_workers: int, prefetch: int, shuffle: bool = True,
                 drop_last: bool | None = None, last_batch: LastBatch = "partial", sampler: BatchSampler | None = None,
                 rank: int | None = None, world_size: int | None = None, repeated_augmentations: int = 1,
                 cache: Any = None) -> None:
        if cache is not None and not self.takes_cache:
            raise PipelineError(f"cache={cache!r}: the {type(self).__name__} backend keeps no epoch cache; use the "
                                "torch backend (pipe.loader(cache=...))")
        check_count("num_workers", num_workers, self.min_workers)
        check_count("prefetch", prefetch, 1)
        resolve_last_batch(last_batch, drop_last)  # refused with a sampler of one's own too
        self.pipeline = pipeline
        self.plan: Plan = pipeline.plan
        self.device = pipeline.device
        self.num_workers, self.prefetch = num_workers, prefetch
        self.ranks = resolve_ranks(pipeline.source, rank, world_size)
        self.sampler: BatchSampler = build_sampler(
            pipeline, shuffle=shuffle, last_batch=last_batch, drop_last=drop_last,
            rank=self.ranks.rank, world_size=self.ranks.world_size, sampler=sampler,
            repeated_augmentations=repeated_augmentations)
        self.plan = plan_for(self.plan, self.sampler)  # a sampler of draw indices reads them through the source
        self.cache: EpochCache | None = None
        if cache is not None:
            from mediapipe.stages.epoch_cache import resolve_cache

            self.cache = resolve_cache(cache)
            self.plan = self.plan.with_cache(self.cache)
        warn_if_no_batch(self.sampler)
        self.stats = LoaderStats()
        self._current: PassCursor | None = None  # the pass that moves the sampler's position
        self._loaded = False  # load_state_dict ran since the last pass began: the next one starts at its position
        self._resumed = False  # and set_epoch named the loaded epoch since: a loaded end of epoch stays that epoch's

    def __len__(self) -> int:
        return len(self.sampler)

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    # -- state --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The current pass's (epoch, batches delivered), mid-pass too. Loaded with
        ``load_state_dict`` (into this loader or a new one), the next pass starts after the last
        delivered batch; a pass begun without a load since the last one began starts at its
        epoch's first batch instead (a peek costs nothing), and only a pass delivered to its end
        advances the epoch."""
        return {"sampler": self.sampler.state_dict(), **self._backend_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Set where the next pass starts: the position of ``state`` (see `state_dict`); a pass
        still running goes on, no longer moving the loader's position. A state this loader cannot
        resume from is a ValueError that changes nothing. Another backend's part (DALI's
        checkpoint, in a state taken from a DALI loader) is not this backend's to read: left aside."""
        parts = state_parts(state)
        before = self.sampler.state_dict()
        try:
            self.sampler.load_state_dict(parts.pop("sampler"))
            check_count("state_dict()['sampler'] epoch", self.sampler.epoch, 0)
            check_count("state_dict()['sampler'] position", self.sampler.position, 0)
            self._check_backend_state(parts)
        except Exception:
            self.sampler.load_state_dict(before)
            raise
        self._current = None
        self._loaded, self._resumed = True, False
        self._load_backend_state(parts)

    def set_epoch(self, epoch: int) -> None:
        """Start the next pass at ``epoch``'s first batch; after ``load_state_dict``, the epoch it
        loaded keeps its position (``for epoch in ...: loader.set_epoch(epoch)``, the
        DistributedSampler habit, resumes mid-epoch instead of delivering its batches again).
        A pass still running goes on with its own epoch, no longer moving the loader's."""
        self._current = None
        if self._loaded and epoch == self.sampler.epoch:
            self._resumed = True  # (a loaded epoch's end: its pass is empty, then the next epoch's)
            return
        self._loaded = self._resumed = False
        self.sampler.set_epoch(epoch)

    def _backend_state(self) -> dict[str, Any]:
        """What a backend adds to `state_dict` besides the sampler's position."""
        return {}

    def _check_backend_state(self, state: dict[str, Any]) -> None:
        """Refuse (ValueError) a backend's part of a state before anything is loaded (a backend's hook)."""

    def _load_backend_state(self, state: dict[str, Any]) -> None:
        """The rest of a loaded state, once the sampler took its part and it was checked (a backend's hook)."""

    # -- passes -------------------------------------------------------------------------
    def begin_pass(self) -> tuple[PassCursor, list[PlannedBatch]]:
        """Start a pass, the loader's current one from now on, and return it with its epoch's batches.
        It starts, after an epoch delivered to its last batch, at the next epoch; after
        ``load_state_dict`` (since the last pass began), at the loaded position; else at the current
        epoch's first batch, so a pass left early (a peek) costs the next one nothing, as with
        torch's DataLoader."""
        check_process_group(self.ranks)
        sampler = self.sampler
        planned = sampler.batches()
        if planned and sampler.position == len(planned) and not self._resumed:
            self._roll_over(sampler.epoch, len(planned))
            sampler.set_epoch(sampler.epoch + 1)
            planned = sampler.batches()
        elif not self._loaded:
            sampler.position = 0
        self._loaded = self._resumed = False
        if sampler.position > len(planned):
            raise PipelineError(f"resume position {sampler.position} is past the {len(planned)} batches of "
                                f"epoch {sampler.epoch}")
        self._current = cursor = PassCursor(sampler.epoch, sampler.position, len(planned))
        return cursor, planned

    def is_current(self, cursor: PassCursor) -> bool:
        """Whether the pass at ``cursor`` is the one that moves this loader's position."""
        return self._current is cursor

    def batch_delivered(self, cursor: PassCursor) -> None:
        """The pass at ``cursor`` handed a batch over: a state_dict() taken now resumes after it."""
        cursor.delivered += 1
        if self.is_current(cursor):
            self.sampler.position = cursor.start + cursor.delivered

    def pass_ended(self, cursor: PassCursor) -> None:
        """The pass at ``cursor`` ran out of batches: the current pass, delivered to its epoch's
        end, moves the loader to the next epoch."""
        sampler = self.sampler
        if self.is_current(cursor) and sampler.epoch == cursor.epoch and sampler.position >= cursor.length:
            sampler.set_epoch(cursor.epoch + 1)

    def _roll_over(self, epoch: int, length: int) -> None:
        """A pass begins after ``epoch`` was delivered to its end (a backend's hook)."""

    # -- resources ----------------------------------------------------------------------
    def close(self) -> None:
        """Let go of what the backend holds (workers, actors, a DALI pipeline) now."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
