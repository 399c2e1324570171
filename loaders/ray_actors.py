"""The Ray actors that build host batches, and this driver's pools of them (shared by its Ray
loaders, grown, replaced when lost, stopped with the last user); batches travel as numpy arrays."""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mediapipe.errors import WorkerError
from mediapipe.loaders.ray_base import _lost_errors, import_ray, session_key
from mediapipe.stages import memory
from mediapipe.stages.batch_builder import BatchBuilder
from mediapipe.stages.host_batch import BatchTask, HostBatch

_NUMPY_DTYPES = {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
                 torch.float64, torch.bool}


# -- what travels: numpy arrays (zero-copy in Ray's object store), tensors again here ------
def _to_arrays(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v.numpy() if isinstance(v, torch.Tensor) and v.dtype in _NUMPY_DTYPES and v.device.type == "cpu"
            else v for k, v in data.items()}


def _to_tensors(data: dict[str, Any]) -> dict[str, Any]:
    """Tensors on the object store's memory, not copied (as the local loader hands over its
    workers' shared buffers): the batch stays in the store while a tensor of it is alive, and
    goes when the training loop drops it. Ray marks the arrays read-only, but each batch is
    read once, by this loader alone, so writing to it in place harms nothing."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
        return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in data.items()}


class BatchActor:
    """A Ray actor: builds host batches (the local loader's worker job) for any loader of this
    driver; each loader's `BatchBuilder` comes once by reference and is kept (a few at most).

    As in a loader worker, the batch kernels write into buffers recycled from one batch to the
    next (fresh memory costs a page fault per page, a large part of a CPU Normalize): a batch
    is copied into the object store as its call returns, so its buffers are free at the next."""

    KEEP = 4

    def __init__(self) -> None:
        self.builders: dict[str, BatchBuilder] = {}
        self.lent: list[int] = []
        memory.use_shared_memory(0)

    def ready(self) -> tuple[int, str]:
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def build(self, builder: list[Any], task: BatchTask) -> HostBatch:
        import ray

        ref = builder[0]  # in a list, so Ray hands over the reference, not the object
        key = ref.hex()
        found = self.builders.pop(key, None)
        if found is None:
            found = ray.get(ref)
            while len(self.builders) >= self.KEEP:
                self.builders.pop(next(iter(self.builders)))
        self.builders[key] = found  # most recently used last
        memory.release(self.lent)
        host = found(task)
        self.lent, host.buffers = list(host.buffers.values()), {}
        host.data = _to_arrays(host.data)
        return host


@dataclass
class _Actor:
    handle: Any
    ready_ref: Any
    ready: bool = False
    dead: bool = False
    pid: int | None = None
    node: str | None = None
    busy: int = 0


@dataclass
class _InFlight:
    task: BatchTask
    ref: Any
    actor: _Actor
    attempts: int = 1
    lost: list[str] = field(default_factory=list)


class ActorPool:
    """Ray actors that build batches, shared by the live loaders of this driver with the same
    CPUs per actor (a training and an evaluation loader do not ask the cluster for twice the
    CPUs); the pool grows to the most actors a loader asked for, a lost actor is replaced, and
    the actors stop when the last loader using them is closed or dropped."""

    def __init__(self, *, num_cpus: float, spread: bool) -> None:
        ray = import_ray()
        self.ray, self.size = ray, 0
        self.session = session_key(ray)
        self.pid = os.getpid()  # the process whose Ray connection the handles belong to
        self.users: set[int] = set()  # ids of the loaders using the pool
        options: dict[str, Any] = {"num_cpus": num_cpus, "max_restarts": 0, "max_concurrency": 1}
        if spread:
            options["scheduling_strategy"] = "SPREAD"
        self._cls = ray.remote(**options)(BatchActor)
        self.actors: list[_Actor] = []
        self.replaced = 0
        self.closed = False

    def grow(self, size: int) -> None:
        """At least ``size`` actors from now on."""
        while self.size < size:
            self.size += 1
            self._start()

    def _start(self) -> _Actor:
        handle = self._cls.remote()
        actor = _Actor(handle, handle.ready.remote())
        self.actors.append(actor)
        return actor

    def _poll_ready(self, timeout: float = 0.0) -> None:
        pending = [a for a in self.actors if not a.ready and not a.dead]
        if not pending:
            return
        done, _ = self.ray.wait([a.ready_ref for a in pending], num_returns=1 if timeout else len(pending),
                                timeout=timeout, fetch_local=True)
        done_ids = set(done)
        for a in pending:
            if a.ready_ref in done_ids:
                try:
                    a.pid, a.node = self.ray.get(a.ready_ref)
                    a.ready = True
                except _lost_errors(self.ray):
                    self.lost(a)

    def live(self) -> list[_Actor]:
        return [a for a in self.actors if a.ready and not a.dead]

    def pick(self, timeout: float | None) -> _Actor:
        """The live actor with the fewest batches in flight (waiting for one to start if none is up)."""
        if self.closed:
            raise WorkerError("the Ray loader was closed: its actors are stopped")
        self._poll_ready()
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.live():
            if not any(not a.dead for a in self.actors):
                raise WorkerError("every Ray actor of the loader died and none could be started again")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise WorkerError(f"no Ray actor of the loader started within {timeout} s: the cluster has no "
                                  "free CPU for one (see ray.cluster_resources())")
            self._poll_ready(timeout=min(left, 1.0) if left is not None else 1.0)
        return min(self.live(), key=lambda a: a.busy)

    def submit(self, builder: Any, task: BatchTask, timeout: float | None) -> tuple[Any, _Actor]:
        """Ask the least busy live actor for ``task``'s batch (``builder``: the builder's object ref)."""
        actor = self.pick(timeout)
        actor.busy += 1
        return actor.handle.build.remote([builder], task), actor

    def lost(self, actor: _Actor) -> None:
        """``actor`` is gone: forget it and start a replacement (Ray places it where there is room)."""
        if actor.dead:
            return
        actor.dead = True
        with contextlib.suppress(Exception):
            self.ray.kill(actor.handle, no_restart=True)
        self.actors.remove(actor)
        self.replaced += 1
        self._start()

    @property
    def pids(self) -> list[int]:
        self._poll_ready()
        return [a.pid for a in self.live() if a.pid is not None]

    @property
    def nodes(self) -> list[str]:
        self._poll_ready()
        return [a.node for a in self.live() if a.node is not None]

    def close(self) -> None:
        """Stop the actors, if their Ray session is still the one connected (Ray would start a
        new local Ray to kill a handle of a session gone) in this process (a process forked
        from the driver has a copy of its connection, which hangs: its actors are not its own)."""
        self.closed = True
        if self.pid != os.getpid():
            _FORKED_KEEP.append(self.actors)  # (dropping a handle here would stop the driver's actor)
        elif self.ray.is_initialized() and session_key(self.ray) == self.session:
            for a in self.actors:
                with contextlib.suppress(Exception):
                    self.ray.kill(a.handle, no_restart=True)
        self.actors, self.size = [], 0


_POOLS: dict[tuple[tuple[str, str], float, bool], ActorPool] = {}
# Ray objects (actor handles, object refs) a process forked from the driver let go of: kept, as
# their release in the fork goes through the driver's connection and stops the driver's actors
_FORKED_KEEP: list[Any] = []


def shared_pool(num_cpus: float, spread: bool, user: object) -> ActorPool:
    """This driver's pool for actors of ``num_cpus`` CPUs, in the Ray session now connected,
    used by ``user`` (a loader) until `leave_pool`."""
    ray = import_ray()
    key = (session_key(ray), num_cpus, spread)
    pool = _POOLS.get(key)
    if pool is None:
        for old in [k for k in _POOLS if k[0] != key[0]]:  # pools of an earlier session: gone with it
            del _POOLS[old]
        pool = _POOLS[key] = ActorPool(num_cpus=num_cpus, spread=spread)
    pool.users.add(id(user))
    return pool


def leave_pool(pool: ActorPool, user: object) -> None:
    """``user`` no longer uses ``pool``: its actors stop when no other loader does."""
    pool.users.discard(id(user))
    if not pool.users:
        pool.close()
        for key in [k for k, p in _POOLS.items() if p is pool]:
            del _POOLS[key]


def stop_actors() -> None:
    """Stop every batch actor this driver started (they stop anyway with ``ray.shutdown()``)."""
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()
