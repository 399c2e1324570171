"""The local engine of `mediapipe convert`: inputs transcoded on a process pool, shards written here in order."""

from __future__ import annotations

import multiprocessing
import sys
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mediapipe.dataset.convert_item import ItemResult, convert_item
from mediapipe.dataset.convert_plan import InputItem, ShardTask
from mediapipe.dataset.convert_write import ShardResult, write_shard
from mediapipe.dataset.transcode import TranscodeOptions


def run_local(out: Path, tasks: list[ShardTask], options: TranscodeOptions, workers: int,
              on_item: Callable[[ItemResult], None]) -> Iterator[ShardResult]:
    """Transcode inputs on ``workers`` processes and write shards here, one by one, in order.
    At most ``4 * workers`` inputs are in flight, so memory stays bounded however slow the disk."""
    jobs = ((item, options) for task in tasks for item in task.items)
    pool = None
    if workers <= 1:
        results: Iterator[ItemResult] = (convert_item(*job) for job in jobs)
    else:
        method = "fork" if sys.platform.startswith("linux") else "spawn"
        pool = multiprocessing.get_context(method).Pool(workers)
        results = _bounded_imap(pool, jobs, 4 * workers)
    try:
        for task in tasks:
            def shard_items(task: ShardTask = task) -> Iterator[ItemResult]:
                for _ in task.items:
                    result = next(results)
                    on_item(result)
                    yield result
            yield write_shard(out, task, shard_items())
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()


def _bounded_imap(pool: Any, jobs: Iterator[tuple[InputItem, TranscodeOptions]], window: int) -> Iterator[ItemResult]:
    """``pool.imap`` in order, with at most ``window`` jobs submitted and not yet consumed."""
    pending: deque = deque()
    for job in jobs:
        pending.append(pool.apply_async(convert_item, job))
        if len(pending) >= window:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()
