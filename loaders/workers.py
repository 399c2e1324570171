"""Worker pools that build whole batches: processes (default) or threads, or inline.

Each task is one batch; results come back in order. A worker's exception is
re-raised in the consumer, named with its worker; a worker that dies (killed, out of
memory, a crash in a C library) raises `WorkerError` instead of hanging.
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import os
import queue
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
import torch.multiprocessing as tmp

from mediapipe import memory
from mediapipe.errors import WorkerError

Task = tuple[Any, ...]
RELEASE = "release"  # a message, not a task: the consumer is done with these shared buffers
_POLL_SECONDS = 0.5


class _RemoteError:
    """An exception from a worker, with the worker's traceback as text."""

    def __init__(self, worker: int, err: BaseException) -> None:
        self.worker, self.err = worker, err
        self.trace = "".join(traceback.format_exception(type(err), err, err.__traceback__))

    def reraise(self) -> None:
        err = self.err
        if hasattr(err, "add_note"):
            err.add_note(f"raised in loader worker {self.worker}; its traceback:\n{self.trace}")
        raise err


def _worker_loop(worker: int, fn: Callable[..., Any], tasks: Any, control: Any, results: Any,
                 init: Callable | None) -> None:
    torch.set_num_threads(1)
    memory.use_shared_memory(worker)
    try:
        if init is not None:
            init(worker)
        while True:
            _apply_releases(control)
            task = tasks.get()
            if task is None:
                return
            tag, args = task
            try:
                results.put((tag, fn(*args)))
            except BaseException as err:  # noqa: BLE001 - everything goes back to the consumer
                try:
                    results.put((tag, _RemoteError(worker, err)))
                except Exception:  # the exception itself does not pickle
                    results.put((tag, _RemoteError(worker, RuntimeError(f"{type(err).__name__}: {err}"))))
    except KeyboardInterrupt:
        return


def _apply_releases(control: Any) -> None:
    """The consumer's word on which of this worker's shared buffers it has dropped."""
    while True:
        try:
            message = control.get_nowait()
        except queue.Empty:
            return
        if message[0] == RELEASE:
            memory.release(message[1])


def run_inline(fn: Callable[..., Any], tasks: Iterator[Task]) -> Iterator[Any]:
    for args in tasks:
        yield fn(*args)


def run_threads(fn: Callable[..., Any], tasks: Iterator[Task], num_workers: int, prefetch: int) -> Iterator[Any]:
    """Threads: no IPC; pays when the work releases the GIL (decoders and torch kernels do).

    Closing the iterator early cancels the queued batches and waits for the running ones,
    so no thread is left inside a decoder (a fork then could inherit its held locks)."""
    pool = ThreadPoolExecutor(num_workers, thread_name_prefix="mediapipe-loader")
    pending: collections.deque[Future] = collections.deque()
    try:
        tasks = iter(tasks)
        for args in tasks:
            pending.append(pool.submit(fn, *args))
            if len(pending) >= num_workers * prefetch:
                break
        while pending:
            result = pending.popleft().result()
            nxt = next(tasks, None)
            if nxt is not None:
                pending.append(pool.submit(fn, *nxt))
            yield result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class ProcessPool:
    """Worker processes sharing one task queue (an idle worker takes the next batch, so one
    slow batch never idles the others), one result queue, in-order delivery, and a control
    queue per worker for messages about its own shared buffers."""

    def __init__(self, fn: Callable[..., Any], num_workers: int, *, context: str | None = None,
                 init: Callable | None = None, timeout: float = 0.0) -> None:
        ctx = tmp.get_context(context or ("fork" if os.name == "posix" and "fork" in mp.get_all_start_methods()
                                          else "spawn"))
        self.num_workers, self.timeout = num_workers, timeout
        self.results = ctx.Queue()
        self.tasks = ctx.Queue()
        self.control = [ctx.Queue() for _ in range(num_workers)]
        self.procs = [
            ctx.Process(target=_worker_loop, args=(w, fn, self.tasks, self.control[w], self.results, init),
                        daemon=True, name=f"mediapipe-worker-{w}")
            for w in range(num_workers)
        ]
        for p in self.procs:
            p.start()
        self._closed = False

    def _get(self) -> tuple[Any, Any]:
        waited = 0.0
        while True:
            try:
                return self.results.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                waited += _POLL_SECONDS
                for w, p in enumerate(self.procs):
                    if not p.is_alive():
                        raise WorkerError(f"loader worker {w} (pid {p.pid}) exited unexpectedly "
                                          f"with code {p.exitcode}") from None
                if self.timeout and waited >= self.timeout:
                    raise WorkerError(f"no batch from the loader workers in {self.timeout:.0f} s") from None

    def map(self, tasks: Iterator[Task], prefetch: int) -> Iterator[Any]:
        tasks = iter(tasks)
        sent = received = 0
        done: dict[int, Any] = {}
        exhausted = False

        def send() -> bool:
            nonlocal sent
            args = next(tasks, None)
            if args is None:
                return False
            self.tasks.put((sent, args))
            sent += 1
            return True

        while sent < self.num_workers * prefetch and send():
            pass
        exhausted = sent < self.num_workers * prefetch
        while received < sent:
            while received not in done:
                tag, result = self._get()
                done[tag] = result
            result = done.pop(received)
            received += 1
            if isinstance(result, _RemoteError):
                result.reraise()
            if not exhausted:
                exhausted = not send()
            yield result

    def release(self, worker: int, keys: list[int]) -> None:
        """Tell ``worker`` that the consumer holds no tensor on these buffers any more."""
        if not self._closed:
            self.control[worker].put((RELEASE, keys))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for _ in self.procs:
            try:
                self.tasks.put(None)
            except Exception:
                pass
        for p in self.procs:
            p.join(timeout=2.0)
            if p.is_alive():
                p.terminate()
                p.join(timeout=1.0)
        for q in [self.tasks, *self.control, self.results]:
            q.cancel_join_thread()
            q.close()

