"""Batches built in the training process: inline (no workers), or on a pool of threads."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from mediapipe.errors import WorkerError

Task = Any


def run_inline(fn: Callable[[Task], Any], tasks: Iterator[Task]) -> Iterator[Any]:
    for task in tasks:
        yield fn(task)


def run_threads(fn: Callable[[Task], Any], tasks: Iterator[Task], num_workers: int, prefetch: int,
                timeout: float = 0.0) -> Iterator[Any]:
    """Threads: no IPC; pays when the work releases the GIL (decoders and torch kernels do).

    Closing the iterator early cancels the queued batches and waits for the running ones,
    so no thread is left inside a decoder (a fork then could inherit its held locks).
    ``timeout`` (seconds, 0 for none) bounds the wait for each batch: past it a `WorkerError`
    is raised and the stuck thread, which cannot be stopped, is left to finish on its own."""
    pool = ThreadPoolExecutor(num_workers, thread_name_prefix="mediapipe-loader")
    pending: collections.deque[Future] = collections.deque()
    stuck = False
    try:
        tasks = iter(tasks)
        for task in tasks:
            pending.append(pool.submit(fn, task))
            if len(pending) >= num_workers * prefetch:
                break
        while pending:
            try:
                result = pending.popleft().result(timeout=timeout or None)
            except FutureTimeout:
                stuck = True
                raise WorkerError(f"no batch from the loader's thread workers in {timeout:.0f} s (a read or "
                                  "decode is stuck; its thread cannot be stopped and is left running)") from None
            nxt = next(tasks, None)
            if nxt is not None:
                pending.append(pool.submit(fn, nxt))
            yield result
    finally:
        pool.shutdown(wait=not stuck, cancel_futures=True)
