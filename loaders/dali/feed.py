"""What the DALI backend's external sources are fed: the planned batches' bytes, in the sampler's
order, with the header sizes and keyed draws that DALI's operators take as per-sample arguments.

`Feed` holds one callback per DALI input and fills them in lockstep from planned batches
(`HostSample`: one sample's blobs, sizes, windows and keyed draws), running on into the next
epochs' plans (`plans`), so DALI prefetches across an epoch's end.
"""

from __future__ import annotations

import collections
import copy
import weakref
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from mediapipe.errors import PipelineError
from mediapipe.loaders.dali.context import FieldNode
from mediapipe.loaders.samplers import BatchSampler, PlannedBatch
from mediapipe.rng import op_rng
from mediapipe.sample import Blob, SampleRef

if TYPE_CHECKING:
    from mediapipe.plan import Plan

WHOLE = 2**31 - 1  # an audio window's count to the file's end (DALI's slice trims it)


class HostSample:
    """One sample as the feed sees it: its ref, the blob of each decoded field with its bytes
    read (``data``: the same bytes as arrays), header sizes, and the keyed draws of ops whose
    parameters are drawn on the host."""

    def __init__(self, ref: SampleRef, blobs: dict[str, Blob], probe: dict[str, Any], seed: int,
                 epoch: int) -> None:
        self.ref, self.blobs, self._probe, self._sizes = ref, blobs, probe, {}
        self.data = {name: np.frombuffer(blob.read(), dtype=np.uint8) for name, blob in blobs.items()}
        self.seed, self.epoch = seed, epoch
        self._params: dict[int, dict[str, Any]] = {}

    def params(self, op_index: int, op: Any, size: tuple[int, int]) -> dict[str, Any]:
        """``op.sample_params`` with the torch backend's key (seed, epoch, index, op index): the same draws."""
        if op_index not in self._params:
            rng = op_rng(self.seed, self.epoch, self.ref.index, op_index)
            self._params[op_index] = op.sample_params(rng, {**self.ref.meta, "size": size})
        return self._params[op_index]

    def window(self, name: str, sample_rate: int | None) -> tuple[int, int]:
        """(first, count) of the audio samples of field ``name`` the torch backend's decoder
        gives: the source's segment (an ASR manifest's utterance) on the output rate's grid, as
        `AudioDecoder.grid_windows` rounds it; the whole file without one."""
        segment = self.ref.meta.get("segment")
        if segment is None:
            return 0, WHOLE
        start, length = segment
        rate = sample_rate or int(self._probe[name](self)["sample_rate"])
        return round(max(0.0, float(start)) * rate), WHOLE if length is None else round(float(length) * rate)

    def size(self, name: str) -> tuple[int, int]:
        """(height, width) of field ``name`` as decoded, from its header (no decoding)."""
        if name not in self._sizes:
            meta = self._probe[name](self)
            self._sizes[name] = (int(meta["height"]), int(meta["width"]))
        return self._sizes[name]


class Feed:
    """External-source callbacks, one per DALI input, fed in lockstep from planned batches.

    Each input pulls its own queue; when a queue is empty the next planned batch is read
    (bytes, header checks, keyed draws) and every queue gets its part, so the order in which
    DALI calls them does not matter. The feed runs on into the next epochs' plans, so DALI
    prefetches across an epoch's end as its own readers do (no bubble, no reset).
    """

    def __init__(self, plan: Plan) -> None:
        # the plan, never the loader: DALI holds these callbacks, so a feed that held the loader
        # would close a cycle (loader -> pipeline -> callbacks -> loader) that only the cyclic
        # GC frees, maybe in a forked child, where DALI's teardown waits on the parent's threads
        self.plan = plan
        decoders = plan.decoders()
        self.probes = {name: (lambda s, d=decoders[name], n=name: d.probe(s.blobs[n])) for name in plan.decode}
        # image fields whose header is probed (raising LimitError) before DALI decodes them
        self.checked = [name for name, spec in plan.decode.items()
                        if spec.kind == "image" and plan.limits.max_pixels is not None]
        self.inputs: dict[str, Any] = {}  # name -> compute(sample) -> np.ndarray
        self.queues: dict[str, collections.deque] = {}
        self.fields: dict[str, FieldNode] = {}  # the pipeline's outputs, in order
        self.planned: Iterator[tuple[int, PlannedBatch]] = iter(())
        self.host: collections.deque = collections.deque()  # (PlannedBatch, refs) per batch fed

    def add(self, name: str, compute: Any) -> Any:
        self.inputs[name] = compute
        self.queues[name] = collections.deque()

        feed = weakref.ref(self)  # DALI holds this callback, and the feed holds DALI's graph nodes

        def source() -> list[np.ndarray]:
            return pull(feed, name)

        return source

    def start(self, sampler: BatchSampler, epoch: int, position: int) -> None:
        self.planned = plans(sampler, epoch, position)

    def _next_batch(self) -> None:
        epoch, batch = next(self.planned)
        plan = self.plan
        refs = [plan.source.ref(int(i)) for i in batch.indices]
        samples = []
        for ref in refs:
            blobs = {name: plan.blob(ref, name) for name in plan.decode}
            blobs = {name: replace(blob, data=blob.read()) for name, blob in blobs.items()}
            sample = HostSample(ref, blobs, self.probes, plan.seed, epoch)
            for name in self.checked:  # max_pixels on the header, before DALI spends memory
                sample.size(name)
            samples.append(sample)
        for name, compute in self.inputs.items():
            self.queues[name].append([compute(s) for s in samples])
        self.host.append((batch, refs))


def pull(feed_ref: weakref.ref, name: str) -> list[np.ndarray]:
    """The next batch of input ``name`` from the feed DALI's callback holds weakly (the loader's
    live pipeline keeps the feed, and the feed goes with it)."""
    feed = feed_ref()
    if feed is None:
        raise RuntimeError("the DALI loader this pipeline fed was dropped")
    if not feed.queues[name]:
        feed._next_batch()
    return feed.queues[name].popleft()


def plans(sampler: BatchSampler, epoch: int, position: int) -> Iterator[tuple[int, PlannedBatch]]:
    """(epoch, batch) from ``position`` of ``epoch`` on, then every later epoch's, endlessly."""
    planner = copy.copy(sampler)  # plans other epochs without moving the loader's sampler
    while True:
        planner.set_epoch(epoch)
        planned = planner.batches()
        for batch in planned[position:]:
            yield epoch, batch
        if not planned:
            raise PipelineError(f"epoch {epoch} has no batches (fewer samples than one batch with drop_last?)")
        epoch, position = epoch + 1, 0


__all__ = ["WHOLE", "Feed", "HostSample", "plans", "pull"]
