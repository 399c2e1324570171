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

Ray is an optional extra (``pip install "mediapipe-loader[ray]"``), imported only here.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mediapipe.errors import WorkerError
from mediapipe.loaders.loader import Loader
from mediapipe.options import LastBatch
from mediapipe.stages import memory
from mediapipe.stages.batch_builder import BatchBuilder
from mediapipe.stages.host_batch import BatchTask, HostBatch

if TYPE_CHECKING:
    from mediapipe.loaders.workers import ProcessPool
    from mediapipe.pipeline import Pipeline

RAY_HINT = 'backend="ray" needs Ray: pip install "mediapipe-loader[ray]"'
CONNECT_SECONDS = 10.0  # how long an address may take to accept a connection before it is refused
_NUMPY_DTYPES = {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
                 torch.float64, torch.bool}


def import_ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise ImportError(RAY_HINT) from err
    return ray


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's errors that mean "the process or node that held this batch is gone": build it again."""
    ex = ray.exceptions
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "ObjectLostError", "OwnerDiedError",
             "ObjectReconstructionFailedError", "WorkerCrashedError", "NodeDiedError", "ObjectFetchTimedOutError",
             "LocalRayletDiedError", "TaskCancelledError")
    return tuple(getattr(ex, n) for n in names if isinstance(getattr(ex, n, None), type))


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


# -- the Ray this library connected: shared by its users, let go of with the last -----------
@dataclass
class _OwnRay:
    """A Ray this library connected (a local Ray it started, or the cluster at a ``ray_address``):
    the users (loaders, a convert run) holding it, and the watchdog of a local one's processes."""

    session: tuple[str, str]
    users: set[int] = field(default_factory=set)
    watchdog: subprocess.Popen | None = None
    pid: int = field(default_factory=os.getpid)  # the process that connected it


def check_not_forked() -> None:
    """Refuse Ray in a process forked from the one that connected it: the copy of the connection
    a forked process has hangs on its first call (Ray is not fork-safe)."""
    if _OWN_RAY is not None and _OWN_RAY.pid != os.getpid():
        raise WorkerError(f"a Ray loader used in process {os.getpid()}, forked from the process that connected "
                          f"Ray ({_OWN_RAY.pid}): Ray cannot be used from a forked copy of its driver (its calls "
                          "hang); make the loader in this process before Ray starts, or use it in the driver")


_OWN_RAY: _OwnRay | None = None
_OWN_RAY_LOCK = threading.RLock()  # (reentrant: a loader dropped by the collector may let go inside use_ray)
WATCHDOG_GRACE = 5.0  # seconds Ray's processes get to exit by themselves after ray.shutdown()


def session_key(ray: Any) -> tuple[str, str]:
    """Tells one Ray session of this process from another (a local Ray started again reuses job ids)."""
    context = ray.get_runtime_context()
    try:
        node = context.get_node_id()
    except Exception:  # noqa: BLE001 (a client connection may not say)
        node = ""
    return context.get_job_id(), node


def use_ray(user: object, *, address: str | None = None, num_cpus: int | None = None) -> Any:
    """Ray, connected, for ``user`` until `release_ray`: the Ray this process already uses (its
    own, never ours to stop; or one this library connected, shared), else a local Ray of
    ``num_cpus`` CPUs (``address`` None; never the cluster ``RAY_ADDRESS`` names) or the
    cluster at ``address``."""
    global _OWN_RAY
    ray = import_ray()
    with _OWN_RAY_LOCK:
        check_not_forked()
        if ray.is_initialized():
            if _OWN_RAY is not None and _OWN_RAY.session == session_key(ray):
                _OWN_RAY.users.add(id(user))
            return ray
        if _OWN_RAY is not None:  # a Ray of ours that someone else shut down: its watchdog has no work left
            _stop_watchdog(_OWN_RAY.watchdog)
            _OWN_RAY = None
        if address is None:
            own = _start_local_ray(ray, num_cpus)
        else:
            check_reachable(address)
            ray.init(address=address, log_to_driver=False, configure_logging=False)
            own = _OwnRay(session_key(ray))
        own.users.add(id(user))
        _OWN_RAY = own
        return ray


def release_ray(user: object) -> None:
    """``user`` no longer uses Ray: the last user of a Ray this library connected shuts it down
    (a local one) or disconnects from it (a cluster, which keeps running); a Ray this process
    connected itself is left as it is."""
    global _OWN_RAY
    with _OWN_RAY_LOCK:
        own = _OWN_RAY
        if own is None or id(user) not in own.users or own.pid != os.getpid():
            return  # (a forked copy of the driver: its Ray is the driver's to let go of)
        own.users.discard(id(user))
        if own.users:
            return
        _OWN_RAY = None
        ray = import_ray()
        if ray.is_initialized() and session_key(ray) == own.session:
            stop_actors()
            with contextlib.suppress(Exception):
                ray.shutdown()
        _stop_watchdog(own.watchdog)


def _start_local_ray(ray: Any, num_cpus: int | None) -> _OwnRay:
    """A local Ray of this process, without the dashboard, and a watchdog that stops its
    processes if this process dies without shutting it down (Ray's agents outlive it otherwise)."""
    before = _children(os.getpid())
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    # Ray's daemons: the children started meanwhile that run Ray's programs (another thread's
    # subprocess or worker started during ray.init is not Ray's, and outlives it)
    ray_dir = os.path.dirname(os.path.abspath(ray.__file__))
    daemons = [pid for pid, args in _children(os.getpid()).items() if pid not in before and ray_dir in args]
    try:
        watchdog = _start_watchdog(sorted(daemons))
    except OSError:  # (no interpreter to run it with: Ray still shuts down with its last user)
        watchdog = None
    return _OwnRay(session_key(ray), watchdog=watchdog)


def _children(pid: int) -> dict[int, str]:
    """The processes whose parent is ``pid``, with their command lines (from /proc, else ps)."""
    if os.path.isdir("/proc/self"):
        found = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    with open(f"/proc/{name}/stat", "rb") as f:
                        if int(f.read().rpartition(b")")[2].split()[1]) == pid:
                            with open(f"/proc/{name}/cmdline", "rb") as f:
                                found[int(name)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        return found
    try:
        out = subprocess.run(["ps", "-A", "-ww", "-o", "pid=,ppid=,args="], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    rows = [line.split(None, 2) for line in out.splitlines() if line.strip()]
    return {int(r[0]): r[2] if len(r) > 2 else "" for r in rows if len(r) > 1 and int(r[1]) == pid}


def _start_watchdog(daemons: list[int]) -> subprocess.Popen | None:
    """`_watchdog` in a process of its own session (a signal to this process's group does not stop it)."""
    if not daemons:
        return None
    code = f"{inspect.getsource(_watchdog)}\n_watchdog({os.getpid()}, {daemons!r}, {WATCHDOG_GRACE!r})\n"
    return subprocess.Popen([sys.executable, "-I", "-c", code], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _stop_watchdog(watchdog: subprocess.Popen | None) -> None:
    """Ray was shut down: the watchdog stops what is left of its processes after the grace, and exits."""
    if watchdog is None:
        return
    with contextlib.suppress(OSError):
        watchdog.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(timeout=WATCHDOG_GRACE + 5)


def _watchdog(driver: int, roots: list[int], grace: float) -> None:
    """Run alone in a process (standard library only): track Ray's daemons ``roots`` and their
    descendants; SIGKILL those still running as soon as ``driver`` dies, or ``grace`` seconds
    after a SIGTERM (Ray was shut down: they exit by themselves)."""
    import os
    import signal
    import subprocess
    import time

    def processes() -> dict[int, tuple[int, bytes]]:
        """pid -> (parent pid, start time) of every running process (a zombie has exited)."""
        if os.path.isdir("/proc/self"):
            table = {}
            for name in os.listdir("/proc"):
                if name.isdigit():
                    try:
                        with open(f"/proc/{name}/stat", "rb") as f:
                            fields = f.read().rpartition(b")")[2].split()
                        if fields[0] != b"Z":
                            table[int(name)] = (int(fields[1]), fields[19])
                    except (OSError, IndexError, ValueError):
                        continue
            return table
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat=,lstart="], capture_output=True, timeout=10).stdout
        rows = [line.split() for line in out.splitlines()]
        return {int(f[0]): (int(f[1]), b" ".join(f[3:])) for f in rows if len(f) > 3 and not f[2].startswith(b"Z")}

    table = processes()
    tracked = {pid: table[pid][1] for pid in roots if pid in table}  # pid -> start time (a pid reused is another)

    def refresh() -> None:
        """Forget the tracked processes that exited; add every descendant of those still running."""
        table = processes()
        for pid in [pid for pid, start in tracked.items() if table.get(pid, (0, None))[1] != start]:
            del tracked[pid]
        found = True
        while found:
            found = {pid: start for pid, (ppid, start) in table.items() if ppid in tracked and pid not in tracked}
            tracked.update(found)

    def kill_tracked() -> None:
        for _ in range(3):  # a daemon may start a process while the others are killed
            refresh()
            if not tracked:
                return
            for pid in tracked:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.1)

    class Stop(BaseException):
        """SIGTERM: Ray was shut down (raised to end the sleep at once)."""

    def on_term(*_: object) -> None:
        raise Stop

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, on_term)
    try:
        while tracked:
            time.sleep(0.5)
            refresh()
            if os.getppid() != driver:  # the driver died without shutting Ray down
                kill_tracked()
                return
    except Stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        deadline = time.monotonic() + grace
        while tracked and time.monotonic() < deadline:
            time.sleep(0.1)
            refresh()
        kill_tracked()


def check_reachable(address: str, seconds: float = CONNECT_SECONDS) -> None:
    """Refuse within ``seconds`` an address where nothing accepts a connection (``ray.init``
    retries such an address for minutes); "auto" is resolved as Ray resolves it."""
    target: str | None = address
    if address == "auto":
        target = os.environ.get("RAY_ADDRESS") or None
        if target is None or target == "auto":
            try:
                from ray._private.services import canonicalize_bootstrap_address_or_die
            except ImportError:  # Ray's internals moved: ray.init resolves it
                return
            try:
                target = canonicalize_bootstrap_address_or_die("auto")
            except ConnectionError as err:
                raise ConnectionError(f"ray_address='auto': {err}") from None
    if target is None:
        return
    host, _, port = target.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        return  # ray.init names what is wrong with it
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as err:
        raise ConnectionError(f"ray_address={address!r}: no Ray cluster answers at {host}:{port} ({err}); start "
                              "one (`ray start --head`) or pass ray_address=None for a local Ray") from None


class RayLoader(Loader):
    """`Loader` whose sample stage runs on Ray actors (``pipe.loader(backend="ray")``).

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
    epochs, ``state_dict``, ``on_error``, ``stats``, ranks) is the local `Loader`'s.
    """

    def __init__(self, pipeline: Pipeline, *, num_workers: int = 2, shuffle: bool = True,
                 drop_last: bool | None = None, last_batch: LastBatch = "partial", prefetch: int = 2,
                 pin_memory: bool | None = None, sampler: Any = None, rank: int | None = None,
                 world_size: int | None = None, timeout: float = 0.0, batch_ops_in_workers: bool | None = None,
                 ray_address: str | None = None, num_cpus: int | None = None, num_cpus_per_worker: float = 1.0,
                 max_in_flight: int | None = None, max_retries: int = 3, spread: bool = True) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers={num_workers}: the Ray backend needs at least one actor")
        if max_retries < 0:
            raise ValueError(f"max_retries={max_retries}: expected >= 0")
        plan = pipeline.plan
        if batch_ops_in_workers is None:
            batch_ops_in_workers = pipeline.device.type == "cpu" and not plan.deferred
        super().__init__(pipeline, num_workers=0, shuffle=shuffle, drop_last=drop_last, last_batch=last_batch,
                         prefetch=prefetch, pin_memory=pin_memory, sampler=sampler, rank=rank,
                         world_size=world_size, timeout=timeout, batch_ops_in_workers=batch_ops_in_workers)
        self.num_workers = num_workers
        self.max_in_flight = max_in_flight or num_workers * prefetch
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight={max_in_flight}: expected >= 1")
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

    def __del__(self) -> None:
        try:  # (no module globals: this may run as the interpreter exits)
            self.close()
        except Exception:  # noqa: BLE001
            pass

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
