"""Duration bucketing (Lhotse's dynamic bucketing): batches under a total-duration budget.

Samples of similar duration share a batch, so padding stays small, and each batch holds
about ``max_duration`` seconds of audio, so batch sizes vary while the work per batch
does not. The plan is a pure function of ``(seed, epoch)`` and the durations: state is
the epoch and the number of batches delivered, never buffered samples.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.loaders.samplers import PlannedBatch, check_rank, check_resume, sampler_ranks

log = logging.getLogger(__name__)


class DurationBucketSampler:
    """This rank's batches, each at most ``max_duration`` seconds of audio in total.

    Samples are read in a shuffled order through a buffer of ``buffer_size``; each goes to
    one of ``num_buckets`` buckets by its duration (edges at equal-count quantiles of all
    durations). When a bucket holds a full batch (the next sample would pass
    ``max_duration``, or ``max_batch_size`` is reached), a batch is taken from a ready bucket
    chosen at random. At the end the buckets are flushed in partial batches.

    A sample longer than ``max_duration`` gets a batch of its own (a warning says how many).
    Ranks: the batches of the epoch are dealt round robin; the last round, when it cannot
    give every rank a batch, is re-split sample by sample so that every rank yields the same
    number of batches and each sample goes to exactly one rank ("drop_last" drops that round
    instead). A rank left without a sample gets one repeated sample with ``valid=0``, as with
    fewer samples than ranks (``drop_last`` then gives every rank no batch). ``rank`` /
    ``world_size`` not given: torch.distributed's, and a loader given this sampler sets them to
    its own ranks (given ones must agree with the loader's, or it refuses them).
    """

    STATE_VERSION = 1

    def __init__(
        self,
        durations: Sequence[float] | np.ndarray,
        max_duration: float,
        *,
        num_buckets: int = 30,
        buffer_size: int = 10_000,
        max_batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
    ) -> None:
        durations = np.asarray(durations, dtype=np.float64)
        if durations.ndim != 1 or len(durations) == 0:
            raise ValueError(f"durations: expected a non-empty 1-d sequence, got shape {durations.shape}")
        if not np.all(np.isfinite(durations)) or durations.min() < 0:
            bad = int(np.flatnonzero(~np.isfinite(durations) | (durations < 0))[0])
            raise ValueError(f"durations[{bad}] = {durations[bad]}: expected finite seconds >= 0")
        if max_duration <= 0:
            raise ValueError(f"max_duration={max_duration}: expected positive seconds per batch")
        rank, world_size, self.ranks_given = sampler_ranks(rank, world_size)
        if num_buckets < 1 or buffer_size < 1:
            raise ValueError(f"num_buckets={num_buckets}, buffer_size={buffer_size}: expected >= 1")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size}: expected >= 1 or None")
        self.durations, self.max_duration = durations, float(max_duration)
        self.num_buckets, self.buffer_size, self.max_batch_size = num_buckets, buffer_size, max_batch_size
        self.shuffle, self.seed, self.rank, self.world_size = shuffle, seed, rank, world_size
        self.drop_last = drop_last
        self.edges = bucket_edges(durations, num_buckets)
        self.epoch, self.position = 0, 0
        self._cache: tuple[int, list[PlannedBatch]] | None = None
        too_long = int((durations > max_duration).sum())
        if too_long:
            warnings.warn(f"DurationBucketSampler: {too_long} of {len(durations)} samples are longer than "
                          f"max_duration={max_duration} s; each gets a batch of its own", stacklevel=2)

    @property
    def num_samples(self) -> int:
        return len(self.durations)

    @property
    def may_pad(self) -> bool:
        """Whether a rank may get a padding sample (then every batch carries ``valid``)."""
        return self.world_size > 1 and not self.drop_last

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.position = epoch, 0

    def bind_ranks(self, rank: int, world_size: int) -> None:
        """Plan ``rank``'s batches of ``world_size`` from now on (a loader's ranks, for a sampler
        made without any)."""
        check_rank(rank, world_size)
        self.rank, self.world_size, self._cache = rank, world_size, None

    # -- the plan ---------------------------------------------------------------------
    def global_batches(self) -> list[np.ndarray]:
        """Every rank's batches of this epoch, in order (the same list on every rank)."""
        n = self.num_samples
        order = np.random.default_rng([self.seed, self.epoch]).permutation(n) if self.shuffle else np.arange(n)
        pick = np.random.default_rng([self.seed, self.epoch, 1])
        bucket_of = np.searchsorted(self.edges, self.durations, side="right")
        durations = self.durations
        buckets: list[list[int]] = [[] for _ in range(self.num_buckets)]
        sums = [0.0] * self.num_buckets
        out: list[np.ndarray] = []
        cap = self.max_batch_size
        buffered = 0

        def ready(b: int) -> bool:
            return bool(buckets[b]) and (sums[b] >= self.max_duration or (cap is not None and len(buckets[b]) >= cap))

        def take(b: int) -> np.ndarray:
            nonlocal buffered
            items, total, k = buckets[b], 0.0, 0
            while k < len(items) and (k == 0 or total + durations[items[k]] <= self.max_duration) and \
                    (cap is None or k < cap):
                total += durations[items[k]]
                k += 1
            batch, buckets[b] = items[:k], items[k:]
            sums[b] -= total
            buffered -= k
            return np.asarray(batch, dtype=np.int64)

        for i in order.tolist():
            b = int(bucket_of[i])
            buckets[b].append(i)
            sums[b] += durations[i]
            buffered += 1
            while True:
                full = [b for b in range(self.num_buckets) if ready(b)]
                if not full or (buffered < self.buffer_size and not self._overfull(buckets, sums, full)):
                    break
                out.append(take(full[int(pick.integers(len(full)))]))
        # flush: what is left, bucket after bucket (each in its shuffled order), cut greedily; the
        # flushed batches are shuffled among themselves (a small dataset is all flush)
        buckets = [[i for items in buckets for i in items]]
        sums = [float(durations[buckets[0]].sum())] if buckets[0] else [0.0]
        tail: list[np.ndarray] = []
        while buffered:
            tail.append(take(0))
        return out + [tail[k] for k in pick.permutation(len(tail))]

    def _overfull(self, buckets: list[list[int]], sums: list[float], full: list[int]) -> bool:
        """A bucket that already holds two batches' worth emits without waiting for the buffer."""
        return any(sums[b] >= 2 * self.max_duration for b in full)

    def batches(self) -> list[PlannedBatch]:
        if self._cache is not None and self._cache[0] == self.epoch:
            return self._cache[1]
        planned = self._deal(self.global_batches())
        self._cache = (self.epoch, planned)
        return planned

    def _deal(self, batches: list[np.ndarray]) -> list[PlannedBatch]:
        w, r = self.world_size, self.rank
        rounds = len(batches) // w
        mine = [PlannedBatch(batches[k * w + r], len(batches[k * w + r])) for k in range(rounds)]
        rest = batches[rounds * w :]
        if rest and not self.drop_last:
            pool = np.concatenate(rest)  # re-split the last round sample by sample
            share = pool[r::w]
            if len(share):
                mine.append(PlannedBatch(share, len(share)))
            else:
                mine.append(PlannedBatch(pool[-1:], 0))
        return mine

    def __len__(self) -> int:
        return len(self.batches())

    # -- resume -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"version": self.STATE_VERSION, **self._identity(), "epoch": self.epoch, "position": self.position}

    def _identity(self) -> dict[str, Any]:
        return {"seed": self.seed, "world_size": self.world_size, "rank": self.rank,
                "num_samples": self.num_samples, "max_duration": self.max_duration,
                "num_buckets": self.num_buckets, "buffer_size": self.buffer_size,
                "max_batch_size": self.max_batch_size, "shuffle": self.shuffle, "drop_last": self.drop_last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rest = check_resume(state, self._identity(), self.STATE_VERSION)
        self.epoch, self.position = int(rest.pop("epoch")), int(rest.pop("position"))
        if rest:
            raise ValueError(f"unexpected keys in sampler state: {sorted(rest)}")

    # -- diagnostics ------------------------------------------------------------------
    def padding_fraction(self) -> float:
        """Share of a padded batch that is padding, over this rank's batches of the epoch."""
        padded = total = 0.0
        for b in self.batches():
            d = self.durations[b.indices[: b.valid]]
            if len(d):
                padded += len(d) * d.max()
                total += d.sum()
        return 1.0 - total / padded if padded else 0.0


def bucket_edges(durations: np.ndarray, num_buckets: int) -> np.ndarray:
    """``num_buckets - 1`` inner edges at equal-count quantiles (bucket k holds edge[k-1] <= d < edge[k])."""
    if num_buckets == 1:
        return np.zeros(0)
    return np.quantile(durations, np.arange(1, num_buckets) / num_buckets)


# -- durations ----------------------------------------------------------------------------

_PROBE_CACHE: dict[tuple[str, int, int], float] = {}


def source_durations(source: Any, *, kind: str = "audio", cache: str | os.PathLike | None = None) -> np.ndarray:
    """Each sample's duration in seconds, as cheaply as it is known.

    From the source's metadata (a manifest's ``duration``, or ``num_samples`` / ``sample_rate``;
    converted shards carry both), else from the file header through the "auto" decoder of
    ``kind`` (nothing is decoded). Probes are cached in memory by (name, size, mtime), and in the JSON file
    ``cache`` when given, so the next run reads no headers.
    """
    disk: dict[str, float] = {}
    cache_path = Path(cache) if cache is not None else None
    if cache_path is not None and cache_path.exists():
        disk = json.loads(cache_path.read_text())
    decoder = None
    out = np.empty(len(source), dtype=np.float64)
    probed = 0
    for i in range(len(source)):
        meta = source.meta(i)
        if meta.get("duration") is not None:
            out[i] = float(meta["duration"])
            continue
        if meta.get("num_samples") is not None and meta.get("sample_rate"):
            out[i] = float(meta["num_samples"]) / float(meta["sample_rate"])
            continue
        blob = source.ref(i).blob(kind)
        key = _cache_key(blob)
        name = f"{key[0]}:{key[1]}:{key[2]}"
        if key in _PROBE_CACHE:
            out[i] = _PROBE_CACHE[key]
        elif name in disk:
            out[i] = _PROBE_CACHE[key] = float(disk[name])
        else:
            if decoder is None:  # "auto": libsndfile reads a FLAC or WAV header without FFmpeg's probing
                from mediapipe.decoders.registry import create

                decoder = create(kind)
            header = decoder.probe(blob)
            if header.get("duration") is None:
                from mediapipe.errors import DecodeError

                raise DecodeError(blob.name, decoder.name, "the header declares no duration")
            out[i] = _PROBE_CACHE[key] = disk[name] = float(header["duration"])
            probed += 1
    if probed:
        log.info("probed %d audio headers for their durations", probed)
        if cache_path is not None:
            tmp = cache_path.with_suffix(cache_path.suffix + ".tmp")
            tmp.write_text(json.dumps(disk))
            os.replace(tmp, cache_path)
    return out


def _cache_key(blob: Any) -> tuple[str, int, int]:
    if blob.path is not None and blob.data is None:
        st = os.stat(blob.path)
        return (f"{blob.name}@{blob.offset}", blob.size if blob.size is not None else st.st_size, st.st_mtime_ns)
    return (blob.name, blob.nbytes(), 0)
