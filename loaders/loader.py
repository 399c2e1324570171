"""The loader: batches of a pipeline, built by workers, finished on the device, resumable.

``for batch in pipe.loader(num_workers=2): ...`` yields dicts of tensors on the
pipeline's device. Workers run the sample stage and collate whole batches (one IPC
hop per batch); the consumer pins, copies to the device on a side stream, and runs
the batch-stage ops there, one batch ahead of the training loop.

Each ``iter(loader)`` is a `LoaderIterator` of its own, with its own workers and queues,
as torch's DataLoader does: two live iterators never mix their batches, and each starts at
its epoch's first batch (unless a ``load_state_dict`` set where the next pass starts).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from typing import TYPE_CHECKING, Any

import torch

from mediapipe import cuda_access
from mediapipe.errors import PipelineError, WorkerError
from mediapipe.loaders.in_process import run_inline, run_threads
from mediapipe.loaders.samplers import BatchSampler, PlannedBatch
from mediapipe.loaders.sampling import (
    build_sampler,
    check_process_group,
    distributed_rank_and_size,
    may_pad,
    resolve_ranks,
)
from mediapipe.loaders.start_method import refuse_daemonic_parent, warm_start
from mediapipe.loaders.workers import ProcessPool
from mediapipe.options import WORKER_TYPES, LastBatch, WorkerType
from mediapipe.plan import Plan
from mediapipe.stages.batch_builder import BatchBuilder
from mediapipe.stages.batch_stage import run_batch_ops
from mediapipe.stages.device_stage import finish_deferred
from mediapipe.stages.host_batch import BatchTask, HostBatch
from mediapipe.stages.stats import StageStats

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mediapipe.pipeline import Pipeline

log = logging.getLogger(__name__)

__all__ = ["Loader", "LoaderIterator", "SamplerDriven", "distributed_rank_and_size"]


class SamplerDriven:
    """What every loader shares: its length, epoch and position come from its batch sampler,
    and one rule says where a new pass starts (`begin_pass`)."""

    sampler: BatchSampler
    _loaded = False  # load_state_dict ran since the last pass began: the next one starts at its position
    _resumed = False  # and set_epoch named the loaded epoch since: a loaded end of epoch stays that epoch's

    def __len__(self) -> int:
        return len(self.sampler)

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        """Start the next pass at ``epoch``'s first batch; after ``load_state_dict``, the epoch it
        loaded keeps its position (``for epoch in ...: loader.set_epoch(epoch)``, the
        DistributedSampler habit, resumes mid-epoch instead of delivering its batches again)."""
        if self._loaded and epoch == self.sampler.epoch:
            self._resumed = True  # (a loaded epoch's end: its pass is empty, then the next epoch's)
            return
        self._loaded = self._resumed = False
        self.sampler.set_epoch(epoch)

    def begin_pass(self) -> list[PlannedBatch]:
        """Put the sampler where a new pass starts and return that epoch's batches: after an epoch
        delivered to its last batch, the next epoch; after ``load_state_dict`` (since the last pass
        began), the loaded position; else the current epoch's first batch, so a pass left early
        (a peek, ``next(iter(loader))``) costs the next one nothing, as with torch's DataLoader."""
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
        return planned

    def _roll_over(self, epoch: int, length: int) -> None:
        """A pass begins after ``epoch`` was delivered to its end (a backend's hook)."""


class Loader(SamplerDriven):
    """An iterable of device batches with ``len()``, ``set_epoch()``, ``state_dict()`` and ``stats``.

    After a full pass the epoch advances by itself; ``set_epoch(e)`` chooses one. A
    ``state_dict()`` taken between batches resumes at the next batch: the batches after
    it equal an uninterrupted run's, and nothing before it is decoded again.

    Iterators: each ``iter(loader)`` plans its own pass and owns its workers. A pass starts at
    the first batch of the loader's epoch, so a peek (``next(iter(loader))``) costs the next
    pass nothing, unless ``load_state_dict`` ran since the last pass began (then at the loaded
    position); only a pass delivered to its last batch advances the epoch. The most recent
    iterator is the loader's *current* pass: only it moves the loader's position and epoch
    (what ``state_dict()`` describes); older ones still deliver their own batches. Dropping or
    closing an iterator stops its workers.

    Ranks: every rank gets ``len(loader)`` batches (see `EpochBatchSampler` for how each
    ``last_batch`` pads or drops); padding samples are flagged False in ``batch["valid"]``.

    Workers (``num_workers`` processes by default) start with ``multiprocessing_context``:
    None picks "forkserver" when a worker decoder uses CUDA (NVDEC; CUDA does not survive a
    fork), else "fork" only when this process runs a single thread, else "forkserver" (as with
    torch's spawn, a script then needs an ``if __name__ == "__main__":`` guard, and its ops
    must be importable); they exit when this process dies. ``persistent_workers=True`` keeps
    them from one epoch to the next (lent to one iterator at a time; a pass left early stops
    them). ``timeout`` (seconds, 0 for none): a pass that waits longer for a batch ends with
    a `WorkerError`, with process or thread workers (a stuck thread cannot be stopped: it is
    left to finish on its own).

    ``stats`` counts the batches delivered: worker seconds summed over workers (read, decode,
    sample_ops, collate, and batch_ops when the batch stage runs in the workers, as it does
    for a CPU device), the consumer's wall seconds (startup of workers, wait for a batch,
    transfer to the device, device_ops, of which device_decode), and failed samples by reason.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        num_workers: int = 0,
        shuffle: bool = True,
        drop_last: bool | None = None,
        last_batch: LastBatch = "partial",
        prefetch: int = 2,
        pin_memory: bool | None = None,
        worker_type: WorkerType = "process",
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
        self.pipeline = pipeline
        self.plan: Plan = pipeline.plan
        self.device = pipeline.device
        self.num_workers, self.prefetch, self.worker_type = num_workers, prefetch, worker_type
        self.pin_memory = self.device.type == "cuda" if pin_memory is None else pin_memory
        if multiprocessing_context is None and num_workers and worker_type == "process" and self.plan.workers_use_cuda:
            multiprocessing_context = cuda_access.worker_start_method()  # CUDA does not survive fork
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
        self.ranks = resolve_ranks(pipeline.source, rank, world_size)
        self.sampler: BatchSampler = build_sampler(
            pipeline, shuffle=shuffle, last_batch=last_batch, drop_last=drop_last,
            rank=self.ranks.rank, world_size=self.ranks.world_size, sampler=sampler)
        self.builder = BatchBuilder(self.plan, finish=batch_ops_in_workers)
        if num_workers and worker_type == "process":
            refuse_daemonic_parent()
            warm_start(multiprocessing_context, self.builder.modules())  # imports while the caller sets up
        self.stats = StageStats()
        self._pool: ProcessPool | None = None  # the persistent workers, while no iterator borrows them
        self._pool_lent = False
        self._current: weakref.ref[LoaderIterator] | None = None
        self._logged_fallbacks: set[str] = set()

    # -- the contract (len, epoch, set_epoch: SamplerDriven) ----------------------------
    def state_dict(self) -> dict[str, Any]:
        """The current pass's (epoch, batches delivered), mid-pass too. Loaded with
        ``load_state_dict`` (into this loader or a new one), the next pass starts after the last
        delivered batch; a pass begun without a load since the last one began starts at its
        epoch's first batch instead (a peek costs nothing), and only a pass delivered to its end
        advances the epoch."""
        return {"sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Set where the next pass starts: the position of ``state`` (see `state_dict`)."""
        self._current = None  # a live iterator no longer moves the position that was set here
        self.sampler.load_state_dict(state["sampler"])
        self._loaded, self._resumed = True, False

    def set_epoch(self, epoch: int) -> None:
        self._current = None
        super().set_epoch(epoch)

    def __iter__(self) -> LoaderIterator:
        it = LoaderIterator(self)
        self._current = weakref.ref(it)
        return it

    def log_fallbacks(self, stats: StageStats) -> None:
        """Name each new reason why a GPU backend decoded on the CPU in the log, once per loader
        (``stats.fallbacks`` counts every sample)."""
        for reason in stats.fallbacks.keys() - self._logged_fallbacks:
            self._logged_fallbacks.add(reason)
            log.warning("%s: decoding on the CPU instead (counted in loader.stats.fallbacks)", reason)

    def is_current(self, it: LoaderIterator) -> bool:
        """Whether ``it`` is the pass that moves this loader's position."""
        return self._current is not None and self._current() is it

    def close(self) -> None:
        """Stop the persistent workers now (they stop anyway when the loader is dropped)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __del__(self) -> None:
        try:  # not contextlib.suppress: at interpreter exit this module's globals may be gone
            self.close()
        except Exception:
            pass

    # -- workers ----------------------------------------------------------------------
    def _host_batches(self, tasks: Iterator[BatchTask]) -> tuple[Iterator[HostBatch], ProcessPool | None, bool]:
        """The host batches of ``tasks``, and the pool that builds them (None inline or in
        threads) with whether it is the persistent one, lent to the caller."""
        if self.num_workers == 0:
            return run_inline(self.builder, tasks), None, False
        if self.worker_type == "thread":
            return run_threads(self.builder, tasks, self.num_workers, self.prefetch, self.timeout), None, False
        persistent = self.persistent_workers and not self._pool_lent
        pool = self._pool if persistent else None
        if pool is not None and not pool.healthy:
            pool.close()
            pool = None
        if pool is None:
            t0 = time.perf_counter()
            pool = ProcessPool(self.builder, self.num_workers, context=self.multiprocessing_context,
                               timeout=self.timeout, preload=self.builder.modules())
            self.stats.seconds["startup"] += time.perf_counter() - t0
        if persistent:
            self._pool, self._pool_lent = None, True
        return pool.map(tasks, self.prefetch), pool, persistent

    def _give_back(self, pool: ProcessPool, persistent: bool) -> None:
        """An iterator is done with ``pool``: keep the persistent one when it is idle and whole,
        stop any other."""
        if persistent:
            self._pool_lent = False
            if pool.healthy and pool.outstanding == 0 and self._pool is None:
                self._pool = pool
                return
        pool.close()


class LoaderIterator:
    """One pass over an epoch of a `Loader`, from where `Loader.begin_pass` puts it (the epoch's
    first batch, the next epoch's, or a loaded position): its own workers (or the loader's
    persistent ones, lent), queues and bookkeeping of the shared buffers it holds. Closing it
    (or dropping it) stops them."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        check_process_group(loader.ranks)
        sampler = loader.sampler
        planned = loader.begin_pass()
        self.epoch, self.start, self.length = sampler.epoch, sampler.position, len(planned)
        self.delivered = 0
        self._owner = os.getpid()  # a forked copy of this pass has no workers of its own
        self._threads = loader.num_workers > 0 and loader.worker_type == "thread"
        tasks = _tasks(planned, self.start, self.epoch, may_pad(sampler), loader.ranks)
        self._closed = False
        self._hosts: Iterator[HostBatch] | None = None
        self._pool: ProcessPool | None = None
        self._hosts, self._pool, self._persistent = loader._host_batches(tasks)
        self._stream = torch.cuda.Stream(loader.device) if loader.device.type == "cuda" else None
        self._ahead: tuple[dict[str, Any], Any, StageStats] | None = None

    @property
    def worker_pids(self) -> list[int]:
        """The pids of this pass's worker processes (none inline or in threads)."""
        return self._pool.pids if self._pool is not None else []

    def __iter__(self) -> LoaderIterator:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._closed:
            raise StopIteration
        if os.getpid() != self._owner and (self._pool is not None or self._threads):
            self._closed = True  # (the workers and threads are the other process's: nothing to stop here)
            raise WorkerError(f"this pass's workers belong to process {self._owner}, not to this one, forked "
                              "from it after the pass began: start a pass of its own here, iter(loader)")
        try:
            batch = self._next_batch()
        except StopIteration:
            self._end_of_epoch()
            raise
        except BaseException:  # a worker's error, a dead worker, Ctrl-C: this pass is over
            self.close()
            raise
        self.delivered += 1
        if self.loader.is_current(self):  # a state_dict() taken now resumes after this batch
            self.loader.sampler.position = self.start + self.delivered
        return batch

    def close(self) -> None:
        """Stop this pass: its threads and workers (or hand the persistent workers back)."""
        if self._closed:
            return
        self._closed = True
        self._ahead = None
        hosts, self._hosts = self._hosts, None
        if hosts is not None:
            hosts.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            self.loader._give_back(pool, self._persistent)

    def __del__(self) -> None:
        try:  # not contextlib.suppress: at interpreter exit this module's globals may be gone
            self.close()
        except Exception:
            pass

    def _end_of_epoch(self) -> None:
        sampler = self.loader.sampler
        if self.loader.is_current(self) and sampler.epoch == self.epoch and sampler.position >= self.length:
            sampler.set_epoch(self.epoch + 1)
        self.close()

    # -- the consumer's side: to the device, one batch ahead ------------------------------
    def _next_batch(self) -> dict[str, Any]:
        """The next batch, while the one after it is already on its way to the device."""
        while True:
            pending, host = self._ahead, self._next_host()
            if host is None:
                if pending is None:
                    raise StopIteration
                self._ahead = None
                return self._deliver(*pending)
            self._ahead = (*self._finish(host), host.stats)
            if pending is not None:
                return self._deliver(*pending)

    def _next_host(self) -> HostBatch | None:
        if self._pool is not None:
            self._pool.release_consumed()  # before the next task goes out
        t0 = time.perf_counter()
        host = next(self._hosts, None)
        self.loader.stats.seconds["wait"] += time.perf_counter() - t0
        if host is not None and self._pool is not None:
            self._pool.lent.watch(host.worker, host.buffers, host.data)
        return host

    def _deliver(self, batch: dict[str, Any], event: Any, stats: StageStats) -> dict[str, Any]:
        """Hand a batch over: counted now, so a batch prefetched and never delivered counts nothing."""
        self.loader.stats.merge(stats)
        self.loader.log_fallbacks(stats)
        device = self.loader.device
        if event is not None:
            torch.cuda.current_stream(device).wait_event(event)
            for value in batch.values():
                if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                    value.record_stream(torch.cuda.current_stream(device))
        return batch

    def _finish(self, host: HostBatch) -> tuple[dict[str, Any], Any]:
        """To the device (pinned, non-blocking, on the side stream for CUDA), then the
        device decode and the batch-stage ops; returns the batch and its ready event."""
        loader, stream = self.loader, self._stream
        pin = stream is not None and loader.pin_memory
        t0 = time.perf_counter()
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            data = _to_device(host.data, loader.device, pin)
            params = {k: _to_device(v, loader.device, pin) for k, v in host.params.items()}
            t1 = time.perf_counter()
            if not host.finished:
                data, params = self._device_stage(host, data, params)
                data = run_batch_ops(loader.plan, data, params)
            event = None
            if stream is not None:
                event = torch.cuda.Event()
                event.record(stream)
        loader.stats.seconds["transfer"] += t1 - t0
        loader.stats.seconds["device_ops"] += time.perf_counter() - t1
        return data, event

    def _device_stage(self, host: HostBatch, data: dict[str, Any], params: dict) -> tuple[dict, dict]:
        """Decode the fields left for the device (if any) and draw the parameters that needed them."""
        plan = self.loader.plan
        if not plan.deferred:
            return data, params
        t0 = time.perf_counter()
        on_host, host.data, host.params = host.data, data, params
        finish_deferred(plan, host, on_host)
        self.loader.stats.seconds["device_decode"] += time.perf_counter() - t0
        return host.data, host.params


def _tasks(planned: list, start: int, epoch: int, with_valid: bool, ranks: Any) -> Iterator[BatchTask]:
    """The batch tasks of a pass from ``start``. A generator of its own, holding no reference to
    its iterator: one that did would make a cycle, and a dropped iterator would keep its
    workers until the garbage collector ran (at interpreter exit, from a finaliser)."""
    for i, b in enumerate(planned[start:]):
        yield BatchTask(start + i, epoch, b.indices, b.valid, with_valid, ranks.rank, ranks.world_size)


def _to_device(data: dict[str, Any], device: torch.device, pin: bool) -> dict[str, Any]:
    out = {}
    for k, v in data.items():
        if isinstance(v, torch.Tensor) and v.device != device:
            if pin and not v.is_pinned():
                v = v.pin_memory()
            v = v.to(device, non_blocking=pin)
        out[k] = v
    return out
