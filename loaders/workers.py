"""Worker processes that build whole batches (inline and thread workers: `in_process`).

Each task is one batch; results come back in order. A worker's exception is re-raised in
the consumer, named with its worker; a worker that dies (killed, out of memory, a crash in
a C library) raises `WorkerError` instead of hanging.

Starting processes: a forked child inherits every lock as it was at the fork, held ones
too, and only the forking thread, so a lock another thread held (a DALI pipeline's, a
logging handler's, a decoder's) never unlocks in the child. The default start method is
therefore "fork" only when the training process provably runs a single OS thread, and
otherwise "forkserver" (a server started by fork and exec, so it inherits no lock, forks
each worker from its only Python thread; it imports the modules workers need once, when it
starts) or "spawn" where there is no forkserver (`start_method`).
Everything a worker receives pickles (`BatchBuilder`: the plan, source, decoder specs, ops).

Orphans: a worker exits within seconds when the training process dies, even by SIGKILL and
in the middle of a batch: a thread of each worker waits for the training process to exit
(`parent_watch.watch_owner`), backed by the kernel's parent-death signal where that applies
(a worker forked from the main thread).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util  # noqa: F401 - its exit handler is registered before ours (runs after it)
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from mediapipe import cuda_access
from mediapipe.errors import WorkerError
from mediapipe.loaders.parent_watch import (
    WATCHDOG_SECONDS,
    _orphaned,
    exit_reason,
    process_alive,
    set_parent_death_signal,
    watch_owner,
)
from mediapipe.loaders.start_method import (
    _LEAN_WORKER,
    _frozen_heap,
    _skip_main_for_lean_workers,
    start_context,
)
from mediapipe.stages import memory

Task = Any
RELEASE = "release"  # a message, not a task: the consumer is done with these shared buffers
_POLL_SECONDS = 0.5
JOIN_SECONDS = 2.0


# -- the worker -----------------------------------------------------------------------------
class _RemoteError:
    """An exception from a worker, with the worker's traceback as text."""

    def __init__(self, worker: int, err: BaseException) -> None:
        self.trace = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        try:
            pickle.loads(pickle.dumps(err))
        except Exception:  # an exception that does not pickle would be lost on the way
            err = WorkerError(f"{type(err).__name__}: {err}")
        self.worker, self.err = worker, err

    def reraise(self) -> None:
        err = self.err
        if hasattr(err, "add_note"):
            err.add_note(f"raised in loader worker {self.worker}; its traceback:\n{self.trace}")
        raise err


def _worker_loop(worker: int, fn: Callable[[Task], Any] | bytes, tasks: Any, control: Any, results: Any,
                 owner: int, parent: int | None, death_signal: bool, start_method: str = "fork") -> None:
    """Take tasks until told to stop, or until the training process ``owner`` is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the training process's; it closes us
    cuda_access.enter_worker(start_method)  # a forked worker never uses CUDA
    parent = os.getppid() if parent is None else parent  # the forkserver, when it started us
    if death_signal:
        set_parent_death_signal()
    if _orphaned(owner, parent):  # the parent died before the signal was armed
        os._exit(0)
    watch_owner(owner, parent)
    torch.set_num_threads(1)
    memory.use_shared_memory(worker)
    if isinstance(fn, bytes):
        fn = pickle.loads(fn)
    while True:
        _apply_releases(control)
        try:
            task = tasks.get(timeout=WATCHDOG_SECONDS)
        except queue.Empty:
            if _orphaned(owner, parent):
                os._exit(0)  # not a normal exit: it would wait to flush results nobody reads
            continue
        if task is None:
            results.cancel_join_thread()  # the consumer has every result it wants
            return
        tag, args = task
        try:
            out = (tag, fn(args))
        except BaseException as err:  # noqa: BLE001 - everything goes back to the consumer
            out = (tag, _RemoteError(worker, err))
        results.put(out)


def _apply_releases(control: Any) -> None:
    """The consumer's word on which of this worker's shared buffers it has dropped."""
    while True:
        try:
            message = control.get_nowait()
        except queue.Empty:
            return
        if message[0] == RELEASE:
            memory.release(message[1])



# -- processes --------------------------------------------------------------------------------
class LentBuffers:
    """The workers' shared buffers that the consumer's tensors use, watched by weak reference.

    Once no tensor uses one any more, its worker is told (before the next task is sent), so
    it writes its next batches into memory whose pages are already mapped."""

    def __init__(self) -> None:
        self.watching: list[tuple[int, int, StorageWeakRef]] = []  # (worker, buffer key, our view of it)

    def watch(self, worker: int | None, buffers: dict[str, int], data: dict[str, Any]) -> None:
        if worker is not None:
            self.watching += [(worker, key, StorageWeakRef(data[name].untyped_storage()))
                              for name, key in buffers.items()]

    def take_released(self) -> dict[int, list[int]]:
        """Worker -> keys of its buffers that no tensor here uses any more (forgotten here)."""
        done: dict[int, list[int]] = {}
        still = []
        for worker, key, ref in self.watching:
            if ref.expired():
                done.setdefault(worker, []).append(key)
            else:
                still.append((worker, key, ref))
        self.watching = still
        return done


class _Failed:
    """What the receiving thread got instead of a result: an exception to raise in the consumer."""

    def __init__(self, err: BaseException) -> None:
        self.err = err


class _Receiver:
    """Takes a pool's results off its queue on a thread of its own, into ``got``.

    Unpickling a batch fetches each of its tensors' file descriptors from the worker that made
    it (torch's file_descriptor sharing: a connection to that worker's resource-sharer thread),
    with no timeout: a stopped or wedged worker would hold whoever receives forever. Here the
    consumer keeps its timeout and its checks of the workers; such a wait ends when the pool
    kills the worker. The thread holds no reference to the pool (a dropped pool still closes)."""

    def __init__(self, results: Any) -> None:
        self.got: queue.SimpleQueue = queue.SimpleQueue()
        self.stop = threading.Event()
        threading.Thread(target=_receive, args=(results, self.got, self.stop), name="mediapipe-receive",
                         daemon=True).start()


def _receive(results: Any, got: queue.SimpleQueue, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            item = results.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            continue
        except BaseException as err:  # noqa: BLE001 - a worker died mid-transfer, or the pool closed
            if not stop.is_set():
                got.put(_Failed(err))
            return
        got.put(item)


class ProcessPool:
    """Worker processes sharing one task queue (an idle worker takes the next batch, so one
    slow batch never idles the others), one result queue, in-order delivery, and a control
    queue per worker for messages about its own shared buffers."""

    def __init__(self, fn: Callable[[Task], Any], num_workers: int, *, context: str | None = None,
                 timeout: float = 0.0, preload: Sequence[str] = ()) -> None:
        self.start_method, ctx = start_context(context, preload)
        self.num_workers, self.timeout = num_workers, timeout
        self.results = ctx.Queue()
        self.tasks = ctx.Queue()
        self.control = [ctx.Queue() for _ in range(num_workers)]
        forked = self.start_method == "fork"
        # the kernel's parent-death signal follows the thread that forked: safe from the main
        # thread, or from the forkserver's; another thread may end while its workers live on
        death_signal = self.start_method == "forkserver" or threading.current_thread() is threading.main_thread()
        payload = fn if forked else pickle.dumps(fn)  # pickled once, not once per worker
        self.needs_main = not forked and b"__main__" in payload  # an op defined in the script
        if not forked:
            _skip_main_for_lean_workers()
        name = "mediapipe-main-worker-" if self.needs_main else _LEAN_WORKER
        owner = os.getpid()
        parent = None if self.start_method == "forkserver" else owner
        self.procs = [
            ctx.Process(target=_worker_loop, name=f"{name}{w}", daemon=True,
                        args=(w, payload, self.tasks, self.control[w], self.results, owner, parent, death_signal,
                              self.start_method))
            for w in range(num_workers)
        ]
        self.lent = LentBuffers()
        self.owner = owner  # a process forked from this one (a user's fork) never stops these workers
        self._sent = self._received = 0
        self._done: dict[int, Any] = {}
        self._closed = False
        self._receiver: _Receiver | None = None
        _LIVE_POOLS.add(self)
        try:
            with _frozen_heap() if forked else contextlib.nullcontext():
                for p in self.procs:
                    p.start()
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    @property
    def outstanding(self) -> int:
        """Tasks sent whose results were not taken yet."""
        return self._sent - self._received

    @property
    def healthy(self) -> bool:
        """Not closed, and every worker runs (asked of the kernel too: a worker the forkserver
        has not reaped yet is a zombie, dead already)."""
        return (not self._closed and os.getpid() == self.owner
                and all(p.is_alive() and process_alive(p.pid) for p in self.procs))

    def submit(self, task: Task) -> None:
        self.tasks.put((self._sent, task))
        self._sent += 1

    def next_result(self) -> Any:
        """The result of the oldest task not taken yet (re-raising a worker's exception). A dead
        worker raises `WorkerError` at the next result, whether or not it held a task then."""
        self._check_alive()
        while self._received not in self._done:
            tag, result = self._get()
            self._done[tag] = result
        result = self._done.pop(self._received)
        self._received += 1
        if isinstance(result, _RemoteError):
            result.reraise()
        return result

    def _get(self) -> tuple[Any, Any]:
        if self._receiver is None:  # (started after the workers: a fork never copies it)
            self._receiver = _Receiver(self.results)
        waited = 0.0
        while True:
            try:
                got = self._receiver.got.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                waited += _POLL_SECONDS
                self._check_alive()
                if self.timeout and waited >= self.timeout:
                    raise WorkerError(f"no batch from the loader workers in {self.timeout:.0f} s") from None
                continue
            if not isinstance(got, _Failed):
                return got
            if isinstance(got.err, (ConnectionError, EOFError, FileNotFoundError)):
                # a batch's shared memory comes from its worker when received: that worker just died
                time.sleep(_POLL_SECONDS)
                self._check_alive()
                raise WorkerError(f"receiving a batch from a loader worker failed: {got.err}") from got.err
            raise got.err

    def _check_alive(self) -> None:
        for w, p in enumerate(self.procs):
            if not p.is_alive() or not process_alive(p.pid):
                if p.exitcode is None:  # dead, not reaped yet (the forkserver reports it a moment later)
                    p.join(timeout=_POLL_SECONDS)
                killed = p.exitcode is not None and p.exitcode < 0
                hint = ("; its start ran the training script again (it defines the pipeline's "
                        "ops): guard the script's entry point with if __name__ == '__main__':, "
                        "or move the ops to a module") if self.needs_main and not killed else ""
                raise WorkerError(f"loader worker {w} (pid {p.pid}) exited unexpectedly{exit_reason(p.exitcode)} "
                                  f"(started by {self.start_method}){hint}") from None

    def map(self, tasks: Iterator[Task], prefetch: int) -> Iterator[Any]:
        """The results of ``tasks`` in order, ``prefetch`` tasks per worker in flight."""
        tasks = iter(tasks)
        in_flight = 0

        def send() -> bool:
            nonlocal in_flight
            task = next(tasks, None)
            if task is None:
                return False
            self.submit(task)
            in_flight += 1
            return True

        more = True
        while more and in_flight < self.num_workers * prefetch:
            more = send()
        while in_flight:
            result = self.next_result()
            in_flight -= 1
            more = more and send()
            yield result

    def release_consumed(self) -> None:
        """Tell each worker which of its buffers the consumer holds no tensor on any more."""
        if self._closed or not self.lent.watching:
            return
        for worker, keys in self.lent.take_released().items():
            self.control[worker].put((RELEASE, keys))

    def __del__(self) -> None:
        try:  # not contextlib.suppress: at interpreter exit this module's globals may be gone
            self.close()
        except Exception:
            pass

    def close(self) -> None:
        """Stop the workers: asked to when idle, terminated when busy (their results are not
        wanted), killed if they do not go; then the queues are closed."""
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self.owner:  # a copy of the pool in a forked child: the workers are not ours
            return
        if self._receiver is not None:
            self._receiver.stop.set()  # (a receive stuck on a stopped worker ends when it is killed below)
        started = [p for p in self.procs if p.pid is not None]
        try:  # a Ctrl-C anywhere in here (a put, a terminate, a join): no worker is left running or unreaped
            if self.outstanding == 0 and not _exiting():  # (a put at exit starts a thread, which can hang)
                for _ in started:
                    try:
                        self.tasks.put(None)
                    except Exception:  # noqa: BLE001 - the queue may already be broken
                        break
            else:
                for p in started:
                    p.terminate()
            _join_all(started, JOIN_SECONDS)  # one deadline for all: those that do not go are killed together
            stuck = [p for p in started if p.is_alive()]
            if stuck:
                _kill_and_reap(stuck)
        except BaseException:
            _kill_and_reap(started)
            raise
        finally:  # the queues too, however the workers stopped
            for q in [self.tasks, *self.control, self.results]:
                with contextlib.suppress(Exception):
                    q.cancel_join_thread()
                    q.close()
            self._done.clear()
            self.lent.watching.clear()


def _join_all(procs: Sequence[Any], seconds: float) -> None:
    """Wait for ``procs`` to exit (and reap them), ``seconds`` at most for all of them together."""
    deadline = time.monotonic() + seconds
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))


def _kill_and_reap(procs: Sequence[Any]) -> None:
    """Kill every process of ``procs`` and wait for each to be reaped, ignoring further interrupts."""
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if previous is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for p in procs:
            with contextlib.suppress(Exception):
                p.kill()
        with contextlib.suppress(Exception):
            _join_all(procs, JOIN_SECONDS)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


# -- interpreter exit ---------------------------------------------------------------------------
_LIVE_POOLS: weakref.WeakSet[ProcessPool] = weakref.WeakSet()
_EXITING = False


def _exiting() -> bool:
    return _EXITING or sys.is_finalizing()


def _close_pools_at_exit() -> None:
    """Stop every pool still open when the interpreter exits, before multiprocessing's own exit
    handler (registered earlier, so run later) unlinks the queues' semaphores: a worker still
    starting would die on them with a traceback, and a pool closed later, by a finaliser, would
    start a queue's thread while the interpreter shuts down and wait for it forever."""
    global _EXITING
    _EXITING = True
    for pool in list(_LIVE_POOLS):
        with contextlib.suppress(Exception):
            pool.close()


atexit.register(_close_pools_at_exit)  # after multiprocessing.util registered its handler: runs first
