"""The loader: batches of a pipeline, built by workers, finished on the device, resumable.

``for batch in pipe.loader(num_workers=2): ...`` yields dicts of tensors on the
pipeline's device. Workers run the sample stage and collate whole batches (one IPC
hop per batch); the consumer pins, copies to the device on a side stream, and runs
the batch-stage ops there, one batch ahead of the training loop.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from mediapipe.device_stage import finish_deferred
from mediapipe.errors import PipelineError
from mediapipe.graph import HostBatch, Plan, StageStats
from mediapipe.loaders.samplers import BatchSampler, EpochBatchSampler
from mediapipe.loaders.workers import ProcessPool, run_inline, run_threads

if TYPE_CHECKING:
    from mediapipe.pipeline import Pipeline

WORKER_TYPES = ("process", "thread")


def distributed_rank_and_size() -> tuple[int, int]:
    """(rank, world size) of the initialised torch.distributed process group, else (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class SamplerDriven:
    """What every loader shares: its length, epoch and position come from its batch sampler."""

    sampler: BatchSampler

    def __len__(self) -> int:
        return len(self.sampler)

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)


class Loader(SamplerDriven):
    """An iterable of device batches with ``len()``, ``set_epoch()``, ``state_dict()`` and ``stats``.

    After a full pass the epoch advances by itself; ``set_epoch(e)`` chooses one. A
    ``state_dict()`` taken between batches resumes at the next batch: the batches after
    it equal an uninterrupted run's, and nothing before it is decoded again.

    ``stats.seconds`` holds worker seconds summed over workers (read, decode, sample_ops,
    collate, and batch_ops when the batch stage runs in the workers, as it does for a CPU
    device) and the consumer's wall seconds (wait for a batch, transfer to the device,
    device_ops, of which device_decode). ``persistent_workers=True`` keeps the worker
    processes from one epoch to the next.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        num_workers: int = 0,
        shuffle: bool = True,
        drop_last: bool | None = None,
        last_batch: str = "partial",
        prefetch: int = 2,
        pin_memory: bool | None = None,
        worker_type: str = "process",
        sampler: BatchSampler | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        timeout: float = 0.0,
        multiprocessing_context: str | None = None,
        batch_ops_in_workers: bool | None = None,
        persistent_workers: bool = False,
    ) -> None:
        if num_workers < 0:
            raise ValueError(f"num_workers={num_workers}: expected >= 0")
        if worker_type not in WORKER_TYPES:
            raise ValueError(f"worker_type={worker_type!r}: expected one of {WORKER_TYPES}")
        if prefetch < 1:
            raise ValueError(f"prefetch={prefetch}: expected >= 1")
        if drop_last is not None:
            last_batch = "drop" if drop_last else last_batch
        if getattr(pipeline.source, "split_by_rank", False):
            rank, world_size = 0, 1  # the source holds this rank's part already (shards by rank)
        elif rank is None or world_size is None:
            auto_rank, auto_size = distributed_rank_and_size()
            rank = auto_rank if rank is None else rank
            world_size = auto_size if world_size is None else world_size
        self.pipeline = pipeline
        self.plan: Plan = pipeline.plan
        self.device = pipeline.device
        self.num_workers, self.prefetch, self.worker_type = num_workers, prefetch, worker_type
        self.pin_memory = self.device.type == "cuda" if pin_memory is None else pin_memory
        self.timeout, self.multiprocessing_context = timeout, multiprocessing_context
        self.persistent_workers = persistent_workers
        # On a CPU device the workers' cores are the device: running the batch stage there
        # spreads it over every worker instead of serialising it in the training process.
        if batch_ops_in_workers is None:
            batch_ops_in_workers = self.device.type == "cpu" and num_workers > 0 and not self.plan.deferred
        if batch_ops_in_workers and self.plan.deferred:
            raise PipelineError(f"fields {sorted(self.plan.deferred)} decode on the device: the batch-stage "
                                "ops cannot run in the workers")
        self.batch_ops_in_workers = batch_ops_in_workers
        self.sampler: BatchSampler = sampler or EpochBatchSampler(
            len(pipeline.source), pipeline.batch_size, shuffle=shuffle, seed=pipeline.seed,
            rank=rank, world_size=world_size, last_batch=last_batch,
        )
        self.stats = StageStats()
        self._pool: ProcessPool | None = None
        self._lent: list[tuple[int, int, StorageWeakRef]] = []  # (worker, buffer key, our view of it)

    # -- the contract (len, epoch, set_epoch: SamplerDriven) ----------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        sampler = self.sampler
        epoch = sampler.epoch
        planned = sampler.batches()
        start = sampler.position
        if start > len(planned):
            raise PipelineError(f"resume position {start} is past the {len(planned)} batches of epoch {epoch}")
        with_valid = getattr(sampler, "last_batch", None) == "pad"
        tasks = ((start + i, epoch, b.indices, b.valid, with_valid) for i, b in enumerate(planned[start:]))
        host_batches = self._host_batches(tasks)
        device_batches = self._on_device(host_batches)
        finished = False
        try:
            for batch in device_batches:
                sampler.position += 1  # delivered: a state_dict() taken now resumes after this batch
                yield batch
            finished = True
        finally:  # an abandoned epoch stops its workers and threads now, not at garbage collection
            device_batches.close()
            if hasattr(host_batches, "close"):
                host_batches.close()
            if not (finished and self.persistent_workers):
                self._close_pool()
        if sampler.epoch == epoch and sampler.position >= len(planned):
            sampler.set_epoch(epoch + 1)

    # -- workers ----------------------------------------------------------------------
    def _host_batches(self, tasks: Iterator[tuple]) -> Iterator[HostBatch]:
        fn = self.plan.load_finished_batch if self.batch_ops_in_workers else self.plan.load_batch
        if self.num_workers == 0:
            return run_inline(fn, tasks)
        if self.worker_type == "thread":
            return run_threads(fn, tasks, self.num_workers, self.prefetch)
        if self._pool is None:
            t0 = time.perf_counter()
            self._pool = ProcessPool(fn, self.num_workers, context=self.multiprocessing_context, timeout=self.timeout)
            self.stats.seconds["startup"] += time.perf_counter() - t0
        return self._pool.map(tasks, self.prefetch)

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._lent.clear()

    def _release_consumed(self) -> None:
        """Hand back the workers' shared buffers that no tensor here uses any more (before
        the next task is sent), so a worker writes its next batches into memory whose pages
        are already mapped: no page faults on a fresh 40 MB each batch."""
        if self._pool is None or not self._lent:
            return
        done: dict[int, list[int]] = {}
        watching = []
        for worker, key, ref in self._lent:
            if ref.expired():
                done.setdefault(worker, []).append(key)
            else:
                watching.append((worker, key, ref))
        for worker, keys in done.items():
            self._pool.release(worker, keys)
        self._lent = watching

    def _watch(self, host: HostBatch) -> None:
        if self._pool is not None:
            self._lent += [(host.worker, key, StorageWeakRef(host.data[name].untyped_storage()))
                           for name, key in host.buffers.items()]

    def __del__(self) -> None:
        self._close_pool()

    # -- device -----------------------------------------------------------------------
    def _on_device(self, host_batches: Iterator[HostBatch]) -> Iterator[dict[str, Any]]:
        """Copy each batch to the device and run the batch stage, one batch ahead (CUDA)."""
        stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        ahead: tuple[dict[str, Any], Any] | None = None
        it = iter(host_batches)
        while True:
            self._release_consumed()
            t0 = time.perf_counter()
            host = next(it, None)
            t1 = time.perf_counter()
            if host is None:
                break
            self.stats.seconds["wait"] += t1 - t0
            self.stats.merge(host.stats)
            self._watch(host)
            batch, event = self._finish(host, stream)
            if ahead is not None:
                yield self._ready(*ahead)
            ahead = (batch, event)
        if ahead is not None:
            yield self._ready(*ahead)

    def _finish(self, host: HostBatch, stream: Any) -> tuple[dict[str, Any], Any]:
        """To the device (pinned, non-blocking, on the side stream for CUDA), then the
        device decode and the batch-stage ops; returns the batch and its ready event."""
        pin = stream is not None and self.pin_memory
        t0 = time.perf_counter()
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            data = _to_device(host.data, self.device, pin)
            params = {k: _to_device(v, self.device, pin) for k, v in host.params.items()}
            t1 = time.perf_counter()
            if not host.finished:
                data, params = self._device_stage(host, data, params)
                data = self.plan.run_batch_ops(data, params)
            event = None
            if stream is not None:
                event = torch.cuda.Event()
                event.record(stream)
        self.stats.seconds["transfer"] += t1 - t0
        self.stats.seconds["device_ops"] += time.perf_counter() - t1
        return data, event

    def _device_stage(self, host: HostBatch, data: dict[str, Any], params: dict) -> tuple[dict, dict]:
        """Decode the fields left for the device (if any) and draw the parameters that needed them."""
        if not self.plan.deferred:
            return data, params
        t0 = time.perf_counter()
        host.data, host.params = data, params
        finish_deferred(self.plan, host)
        self.stats.seconds["device_decode"] += time.perf_counter() - t0
        return host.data, host.params

    def _ready(self, batch: dict[str, Any], event: Any) -> dict[str, Any]:
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)
            for value in batch.values():
                if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                    value.record_stream(torch.cuda.current_stream(self.device))
        return batch


def _to_device(data: dict[str, Any], device: torch.device, pin: bool) -> dict[str, Any]:
    out = {}
    for k, v in data.items():
        if isinstance(v, torch.Tensor) and v.device != device:
            if pin and not v.is_pinned():
                v = v.pin_memory()
            v = v.to(device, non_blocking=pin)
        out[k] = v
    return out
