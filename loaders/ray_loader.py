"""The sample stage on a Ray cluster: ``pipe.loader(backend="ray")``.

Ray actors, each holding the pipeline's `BatchBuilder`, read, decode, run the sample-stage
ops and collate whole batches; each training rank's loader sends them its own batches'
`BatchTask`s and receives `HostBatch`es through Ray's object store, in order, and runs the
batch stage on its device exactly as the local `Loader` does (`LoaderIterator` is shared:
transfer, batch ops, stats, position, epochs). The batches equal the local loader's bit for
bit: the plan of an epoch and every random draw are keyed by (seed, epoch, index), not by
which process builds a batch.

Faults cost time, not data: a batch whose actor or node died (or whose result was lost
with its node) is built again on a live actor, with the same draws, and each batch number
is delivered once, in order. A replacement actor is started for each one lost, and used
once Ray has placed it. At most ``max_in_flight`` batches are asked for and not yet
delivered, so the object store holds a bounded number of batches (backpressure).

Ray is an optional extra (``pip install "mediapipe-loader[ray]"``), imported only when used
(`ray_base`); the actors and their pools are in `ray_actors`, the Ray this library connects in
`ray_connection` (its local processes' watchdog: `ray_watchdog`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mediapipe.errors import WorkerError
from mediapipe.loaders.loader import HostBatchLoader
from mediapipe.loaders.loader_base import SamplingOptions, check_count
from mediapipe.loaders.ray_actors import (
    _FORKED_KEEP,
    ActorPool,
    _Actor,
    _InFlight,
    _to_tensors,
    leave_pool,
    shared_pool,
)
from mediapipe.loaders.ray_base import _lost_errors
from mediapipe.loaders.ray_connection import check_not_forked, release_ray, use_ray
from mediapipe.stages.host_batch import BatchTask, HostBatch

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from mediapipe.loaders.workers import ProcessPool
    from mediapipe.pipeline import Pipeline


class RayLoader(HostBatchLoader):
    """The Ray backend (``pipe.loader(backend="ray")``): host batches built by Ray actors and
    finished on this process's device by `LoaderIterator`, as the torch `Loader`'s.

    ``num_workers`` actors of ``num_cpus_per_worker`` CPUs each (spread over the cluster's
    nodes) build the batches; ``prefetch`` batches per actor may be in flight
    (``max_in_flight`` overrides the total). ``ray_address``: "auto", "host:6379" or
    "ray://host:10001" joins a running cluster (an address where nothing answers is refused
    within `CONNECT_SECONDS`); None joins the one this process already initialised, else
    starts a local Ray of its own with ``num_cpus`` CPUs (default: one per actor). A Ray the
    library connected is shared by this process's Ray loaders and let go of with the last of
    them (see `use_ray`); one this process initialised itself is never shut down. The actors
    stop when the loader is closed or dropped (unless another live Ray loader of this process
    shares them). The batch stage runs on this process's device (on a CPU device, in the actors,
    as the local loader runs it in its workers; ``batch_ops_in_workers`` decides).

    A batch lost with its actor or node is built again on a live actor, at most
    ``max_retries`` times (a batch that kills every actor it meets raises `WorkerError`);
    ``timeout`` (seconds, 0: none) bounds the wait for one batch. Everything else (length,
    epochs, ``state_dict``, ranks: `LoaderBase`; ``on_error``, ``stats``: the plan's) is the
    local `Loader`'s.
    """

    min_workers = 1  # an actor at least
    default_workers = 2

    def __init__(self, pipeline: Pipeline, *, num_workers: int = 2, prefetch: int = 2, pin_memory: bool | None = None,
                 timeout: float = 0.0, batch_ops_in_workers: bool | None = None, ray_address: str | None = None,
                 num_cpus: int | None = None, num_cpus_per_worker: float = 1.0, max_in_flight: int | None = None,
                 max_retries: int = 3, spread: bool = True, **sampling: Unpack[SamplingOptions]) -> None:
        check_count("max_retries", max_retries, 0)
        super().__init__(pipeline, num_workers=num_workers, prefetch=prefetch, pin_memory=pin_memory,
                         timeout=timeout, batch_ops_in_workers=batch_ops_in_workers, **sampling)
        self.max_in_flight = max_in_flight or num_workers * prefetch
        check_count("max_in_flight", self.max_in_flight, 1)
        self.max_retries = max_retries
        self.ray_address, self.num_cpus, self.num_cpus_per_worker = ray_address, num_cpus, num_cpus_per_worker
        self.spread = spread
        self._actors: ActorPool | None = None
        self._builder_ref: Any = None  # the builder, put in the object store once per loader
        self.rebuilt = 0  # batches asked for again after their actor or node was lost

    # -- the cluster ------------------------------------------------------------------------
    def _connect(self) -> Any:
        """Ray for this loader: the Ray this process uses, else one this loader connects (shared)."""
        t0 = time.perf_counter()
        cpus = self.num_cpus or int(-(-self.num_workers * self.num_cpus_per_worker // 1))
        ray = use_ray(self, address=self.ray_address, num_cpus=cpus)
        self.stats.seconds["startup"] += time.perf_counter() - t0
        return ray

    def actors(self) -> ActorPool:
        """The actor pool (this driver's, shared with its other Ray loaders), started on first use."""
        if self._actors is not None and self._actors.pid != os.getpid():
            check_not_forked()
            raise WorkerError(f"a Ray loader used in process {os.getpid()}, forked from its driver "
                              f"({self._actors.pid}): Ray cannot be used from a forked copy of its driver")
        if self._actors is None:
            ray = self._connect()
            t0 = time.perf_counter()
            self._actors = shared_pool(self.num_cpus_per_worker, self.spread, self)
            self._actors.grow(self.num_workers)
            self._builder_ref = ray.put(self.builder)
            self.stats.seconds["startup"] += time.perf_counter() - t0
        return self._actors

    @property
    def worker_pids(self) -> list[int]:
        """The pids of the live actors (on their own nodes)."""
        return self._actors.pids if self._actors is not None else []

    def close(self) -> None:
        """Let go of the actors (they stop unless another live Ray loader of this driver uses
        them) and of the Ray this library connected (shut down with the last loader using it)."""
        pool, builder, self._actors, self._builder_ref = self._actors, self._builder_ref, None, None
        if pool is not None and pool.pid != os.getpid():  # a forked copy of the driver's loader
            _FORKED_KEEP.append(builder)  # (its release would go through the driver's connection)
        del builder
        if pool is not None:
            leave_pool(pool, self)
        release_ray(self)

    # -- the iterator's batches ----------------------------------------------------------------
    def _host_batches(self, tasks: Iterator[BatchTask]) -> tuple[Iterator[HostBatch], ProcessPool | None, bool]:
        return self._stream(tasks), None, False

    def _stream(self, tasks: Iterator[BatchTask]) -> Iterator[HostBatch]:
        """The host batches of ``tasks``, in order, each exactly once, at most ``max_in_flight`` asked ahead."""
        pool = self.actors()
        builder = self._builder_ref
        ray = pool.ray
        lost_errors = _lost_errors(ray)
        timeout = self.timeout or None
        tasks = iter(tasks)
        flight: dict[int, _InFlight] = {}
        order: deque[int] = deque()
        try:
            while True:
                for task in itertools.islice(tasks, max(0, self.max_in_flight - len(flight))):
                    ref, actor = pool.submit(builder, task, timeout)
                    flight[task.number] = _InFlight(task, ref, actor)
                    order.append(task.number)
                if not order:
                    return
                head = flight[order[0]]
                try:
                    host = ray.get(head.ref, timeout=timeout)
                except ray.exceptions.GetTimeoutError:
                    raise WorkerError(f"no batch from the Ray actors in {self.timeout} s (batch {head.task.number} "
                                      f"of epoch {head.task.epoch})") from None
                except ray.exceptions.RayTaskError as err:  # the builder raised: the sample's own error
                    cause = getattr(err, "cause", None)
                    if isinstance(cause, lost_errors):
                        self._rebuild(pool, builder, flight, head.actor, str(cause), timeout)
                        continue
                    if isinstance(cause, BaseException):
                        raise cause from None
                    raise
                except lost_errors as err:
                    self._rebuild(pool, builder, flight, head.actor, type(err).__name__, timeout)
                    continue
                order.popleft()
                del flight[head.task.number]
                head.actor.busy -= 1
                host.data = _to_tensors(host.data)
                yield host
        finally:
            for f in flight.values():  # a pass left early: its batches are not wanted any more
                with contextlib.suppress(Exception):
                    ray.cancel(f.ref)
                f.actor.busy = max(0, f.actor.busy - 1)

    def _rebuild(self, pool: ActorPool, builder: Any, flight: dict[int, _InFlight], dead: _Actor, why: str,
                 timeout: float | None) -> None:
        """``dead`` is gone with every batch it held: ask live actors for them again."""
        pool.lost(dead)
        for f in sorted((f for f in flight.values() if f.actor is dead), key=lambda f: f.task.number):
            if f.attempts > self.max_retries:
                raise WorkerError(f"batch {f.task.number} of epoch {f.task.epoch} (samples "
                                  f"{f.task.indices.tolist()}) was lost {f.attempts} times with its Ray actor or "
                                  f"node ({'; '.join([*f.lost, why])}); max_retries={self.max_retries}")
            f.lost.append(why)
            f.ref, f.actor = pool.submit(builder, f.task, timeout)
            f.attempts += 1
            self.rebuilt += 1
