"""The torch backend: batches of a pipeline, built by workers, finished on the device, resumable.

``for batch in pipe.loader(num_workers=2): ...`` yields dicts of tensors on the
pipeline's device. Workers run the sample stage and collate whole batches (one IPC
hop per batch); the consumer (`LoaderIterator`, shared with the Ray backend through
`HostBatchLoader`) pins, copies to the device on a side stream, and runs the batch-stage
ops there, one batch ahead of the training loop. Arguments, sampler and passes: `LoaderBase`.

Each ``iter(loader)`` is a `LoaderIterator` of its own, with its own workers and queues,
as torch's DataLoader does: two live iterators never mix their batches, and each starts at
its epoch's first batch (unless a ``load_state_dict`` set where the next pass starts).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import torch

from mediapipe import cuda_access
from mediapipe.errors import WorkerError
from mediapipe.loaders.in_process import run_inline, run_threads
from mediapipe.loaders.loader_base import LoaderBase, SamplingOptions, check_seconds, place_batch_ops
from mediapipe.loaders.sampling import distributed_rank_and_size, may_pad
from mediapipe.loaders.start_method import refuse_daemonic_parent, warm_start
from mediapipe.loaders.workers import ProcessPool
from mediapipe.options import WORKER_TYPES, WorkerType
from mediapipe.stages.batch_builder import BatchBuilder
from mediapipe.stages.device_stage import finish_batch
from mediapipe.stages.host_batch import BatchTask, HostBatch
from mediapipe.stages.stats import StageStats

if TYPE_CHECKING:
    from collections.abc import Iterator

    from typing_extensions import Unpack

    from mediapipe.pipeline import Pipeline
    from mediapipe.stages.epoch_cache import EpochCache

log = logging.getLogger(__name__)

__all__ = ["HostBatchLoader", "Loader", "LoaderIterator", "distributed_rank_and_size"]


class HostBatchLoader(LoaderBase):
    """A loader whose host batches are built elsewhere (worker processes or threads, Ray actors)
    and finished in this process by `LoaderIterator`: pinned, copied to the device on a side
    stream, decoded there when a field decodes on the device, and through the batch stage (unless
    `batch_ops_in_workers` puts it where the batches are built). A backend says where the host
    batches come from (`_host_batches`) and what a pass gives back when it ends (`_give_back`)."""

    def __init__(self, pipeline: Pipeline, *, num_workers: int, prefetch: int, pin_memory: bool | None,
                 timeout: float, batch_ops_in_workers: bool | None, cache: Any = None,
                 **sampling: Unpack[SamplingOptions]) -> None:
        super().__init__(pipeline, num_workers=num_workers, prefetch=prefetch, cache=cache, **sampling)
        check_seconds("timeout", timeout)
        self.timeout = timeout
        self.pin_memory = self.device.type == "cuda" if pin_memory is None else pin_memory
        self.batch_ops = place_batch_ops(self.plan, self.device, batch_ops_in_workers, num_workers)
        self.builder = BatchBuilder(self.plan, batch_ops=self.batch_ops)
        self._logged_fallbacks: set[str] = set()

    @property
    def workers_are_threads(self) -> bool:
        """Whether the host batches come from threads of this process (a forked copy has none)."""
        return False

    def __iter__(self) -> LoaderIterator:
        return LoaderIterator(self)

    def log_fallbacks(self, stats: StageStats) -> None:
        """Name each new reason why a GPU backend decoded on the CPU in the log, once per loader
        (``stats.fallbacks`` counts every sample)."""
        for reason in stats.fallbacks.keys() - self._logged_fallbacks:
            self._logged_fallbacks.add(reason)
            log.warning("%s: decoding on the CPU instead (counted in loader.stats.fallbacks)", reason)

    def __del__(self) -> None:
        try:  # not contextlib.suppress: at interpreter exit this module's globals may be gone
            self.close()
        except Exception:
            pass

    def _host_batches(self, tasks: Iterator[BatchTask]) -> tuple[Iterator[HostBatch], ProcessPool | None, bool]:
        """The host batches of ``tasks``, and the pool that builds them (None when none is this
        pass's to give back) with whether it is the persistent one, lent to the caller."""
        raise NotImplementedError

    def _give_back(self, pool: ProcessPool, persistent: bool) -> None:
        """An iterator is done with ``pool``."""
        pool.close()


class Loader(HostBatchLoader):
    """The torch backend: batches built by worker processes (or threads, or inline) and finished
    on the pipeline's device; the passes, epochs, ``state_dict()`` and ranks are `LoaderBase`'s.

    After a full pass the epoch advances by itself; ``set_epoch(e)`` chooses one. A
    ``state_dict()`` taken between batches resumes at the next batch: the batches after
    it equal an uninterrupted run's, and nothing before it is decoded again.

    Iterators: each ``iter(loader)`` is a `LoaderIterator` that owns its workers. Dropping or
    closing an iterator stops them.

    Workers (``num_workers`` processes by default) start with ``multiprocessing_context``:
    None picks "forkserver" when a worker decoder uses CUDA (NVDEC; CUDA does not survive a
    fork), else "fork" only when this process runs a single thread, else "forkserver" (as with
    torch's spawn, a script then needs an ``if __name__ == "__main__":`` guard, and its ops
    must be importable); they exit when this process dies. ``persistent_workers=True`` keeps
    them from one epoch to the next (lent to one iterator at a time; a pass left early stops
    them). ``timeout`` (seconds, 0 for none): a pass that waits longer for a batch ends with
    a `WorkerError`, with process or thread workers (a stuck thread cannot be stopped: it is
    left to finish on its own).

    ``cache``: an epoch cache (`mediapipe.EpochCache`; "shm" or a folder path for one with the
    default budget), filled in the first epoch and read from the next: the decoded images,
    after the deterministic sample ops, shared by the workers and the ranks of one machine.
    Its fields are decoded whole (no op fused into their decoder), so the batches equal an
    uncached loader's of the unfused plan; see `mediapipe.stages.epoch_cache`.

    ``stats`` counts the batches delivered: worker seconds summed over workers (read, decode,
    sample_ops, collate, and batch_ops when the batch stage runs in the workers, as it does
    for a CPU device; cache_read and cache_write with a cache), the consumer's wall seconds
    (startup of workers, wait for a batch, transfer to the device, device_ops, of which
    device_decode), failed samples by reason, and ``stats.cache``: the cache's hits, misses,
    stored, skipped and rejected entries.
    """

    takes_cache = True

    def __init__(self, pipeline: Pipeline, *, num_workers: int = 0, prefetch: int = 2,
                 worker_type: WorkerType = "process", multiprocessing_context: str | None = None,
                 persistent_workers: bool = False, pin_memory: bool | None = None, timeout: float = 0.0,
                 batch_ops_in_workers: bool | None = None, cache: EpochCache | str | os.PathLike | None = None,
                 **sampling: Unpack[SamplingOptions]) -> None:
        if worker_type not in WORKER_TYPES:
            raise ValueError(f"worker_type={worker_type!r}: expected one of {WORKER_TYPES}")
        super().__init__(pipeline, num_workers=num_workers, prefetch=prefetch, pin_memory=pin_memory,
                         timeout=timeout, batch_ops_in_workers=batch_ops_in_workers, cache=cache, **sampling)
        self.worker_type = worker_type
        if multiprocessing_context is None and num_workers and worker_type == "process" and self.plan.workers_use_cuda:
            multiprocessing_context = cuda_access.worker_start_method()  # CUDA does not survive fork
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        if num_workers and worker_type == "process":
            refuse_daemonic_parent()
            warm_start(multiprocessing_context, self.builder.modules())  # imports while the caller sets up
        self._pool: ProcessPool | None = None  # the persistent workers, while no iterator borrows them
        self._pool_lent = False

    @property
    def workers_are_threads(self) -> bool:
        return self.num_workers > 0 and self.worker_type == "thread"

    def close(self) -> None:
        """Stop the persistent workers now (they stop anyway when the loader is dropped)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # -- workers ----------------------------------------------------------------------
    def _host_batches(self, tasks: Iterator[BatchTask]) -> tuple[Iterator[HostBatch], ProcessPool | None, bool]:
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
        """Keep the persistent pool when it is idle and whole, stop any other."""
        if persistent:
            self._pool_lent = False
            if pool.healthy and pool.outstanding == 0 and self._pool is None:
                self._pool = pool
                return
        pool.close()


class LoaderIterator:
    """One pass over an epoch of a `HostBatchLoader`, from where `LoaderBase.begin_pass` puts it
    (the epoch's first batch, the next epoch's, or a loaded position): its own workers (or the
    loader's persistent ones, lent), queues and bookkeeping of the shared buffers it holds.
    Closing it (or dropping it) stops them."""

    def __init__(self, loader: HostBatchLoader) -> None:
        self.loader = loader
        self.cursor, planned = loader.begin_pass()
        self._owner = os.getpid()  # a forked copy of this pass has no workers of its own
        self._threads = loader.workers_are_threads
        cursor = self.cursor
        tasks = _tasks(planned, cursor.start, cursor.epoch, may_pad(loader.sampler), loader.ranks)
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
        self.loader.batch_delivered(self.cursor)
        return batch

    def close(self) -> None:
        """Stop this pass: its threads and workers (or hand the persistent workers back)."""
        if self._closed:
            return
        self._closed = True
        self._ahead = None
        hosts, self._hosts = self._hosts, None
        pool, self._pool = self._pool, None
        try:
            if hosts is not None:
                hosts.close()
        finally:  # (a Ctrl-C while the threads stop: the workers still stop, or go back to the loader)
            if pool is not None:
                self.loader._give_back(pool, self._persistent)

    def __del__(self) -> None:
        try:  # not contextlib.suppress: at interpreter exit this module's globals may be gone
            self.close()
        except Exception:
            pass

    def _end_of_epoch(self) -> None:
        self.loader.pass_ended(self.cursor)
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
            on_host, host.data, host.params = host.data, data, params
            data = finish_batch(loader.plan, host, on_host, loader.stats)
            event = None
            if stream is not None:
                event = torch.cuda.Event()
                event.record(stream)
        loader.stats.seconds["transfer"] += t1 - t0
        loader.stats.seconds["device_ops"] += time.perf_counter() - t1
        return data, event


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
