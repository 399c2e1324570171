"""The local engine of `mediapipe convert`: inputs transcoded on worker processes, shards written here in order.

Each worker has its own pair of pipes and the main thread alone sends jobs and reads results
(`Workers`): no handler threads contending for the GIL with the shard writer, and no single
result pipe that every worker locks to send a whole image through. A worker reads its jobs on a
thread of its own, so that the parent's send of a job never waits on the worker's send of a
result; it dies with the parent (Linux) and ignores Ctrl-C, which the parent handles."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from mediapipe.dataset.convert_item import ItemResult, convert_item
from mediapipe.dataset.convert_plan import InputItem, ShardTask
from mediapipe.dataset.convert_write import ShardResult, write_shard
from mediapipe.dataset.transcode import TranscodeOptions

Job = tuple[InputItem, TranscodeOptions]
QUEUED_PER_WORKER = 2  # one converting, one waiting in its pipe: a worker never waits for the next job
RESULT_PIPE_BYTES = 1 << 20  # a worker hands a whole converted image to the pipe and goes on
TERMINATE_WAIT_S = 10.0  # how long `Workers.close` waits on a worker it sent SIGTERM before it sends SIGKILL


def run_local(out: Path, tasks: list[ShardTask], options: TranscodeOptions, workers: int,
              on_item: Callable[[ItemResult], None]) -> Iterator[ShardResult]:
    """Transcode inputs on ``workers`` processes and write shards here, one by one, in order.
    At most ``4 * workers`` inputs are in flight, so memory stays bounded however slow the disk."""
    jobs = ((item, options) for task in tasks for item in task.items)
    pool = None
    if workers <= 1:
        results: Iterator[ItemResult] = (convert_item(*job) for job in jobs)
    else:
        pool = Workers(workers)
        results = pool.imap(jobs, 4 * workers)
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
            pool.close()


class Workers:
    """``count`` processes that run `convert_item`, each fed through its own pipes."""

    def __init__(self, count: int) -> None:
        ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        forked = ctx.get_start_method() == "fork"
        parent = None if ctx.get_start_method() == "forkserver" else os.getpid()  # a forkserver's child has another
        self.jobs: list[Connection] = []  # parent ends: jobs out, results in
        self.results: list[Connection] = []
        self.procs: list[Any] = []
        try:
            with _interrupts_deferred():
                for _ in range(count):
                    job_r, job_w = ctx.Pipe(duplex=False)
                    res_r, res_w = ctx.Pipe(duplex=False)
                    _widen(res_w)
                    # a forked worker closes the parent's ends it inherits (its own and earlier workers'),
                    # so that it sees EOF and exits when the parent dies
                    inherited = [job_w, res_r, *self.jobs, *self.results] if forked else []
                    proc = ctx.Process(target=_serve, args=(job_r, res_w, inherited, parent), daemon=True)
                    proc.start()
                    job_r.close()
                    res_w.close()
                    self.jobs.append(job_w)
                    self.results.append(res_r)
                    self.procs.append(proc)
        except BaseException:  # a Ctrl-C or a failed fork: no worker is left behind
            self.close()
            raise

    def imap(self, jobs: Iterator[Job], window: int) -> Iterator[ItemResult]:
        """The results of ``jobs`` in their order. A job goes to the worker with the fewest queued
        (at most `QUEUED_PER_WORKER` each), and at most ``window`` are sent and not yet yielded."""
        queued: list[deque[int]] = [deque() for _ in self.procs]  # per worker, the job numbers it holds
        done: dict[int, ItemResult] = {}
        owner = {id(conn): w for w, conn in enumerate(self.results)}
        sent = ready = 0
        exhausted = False
        while True:
            while not exhausted and sent - ready < window:
                w = min(range(len(queued)), key=lambda i: len(queued[i]))
                if len(queued[w]) >= QUEUED_PER_WORKER:
                    break
                job = next(jobs, None)
                if job is None:
                    exhausted = True
                    break
                self._send(w, job)
                queued[w].append(sent)
                sent += 1
            if ready in done:
                yield done.pop(ready)
                ready += 1
                continue
            if ready == sent:
                return
            for conn in wait([self.results[w] for w in range(len(queued)) if queued[w]]):
                w = owner[id(conn)]
                done[queued[w].popleft()] = self._receive(w)

    def _send(self, w: int, job: Job) -> None:
        try:
            self.jobs[w].send(job)
        except OSError as err:
            raise self._died(w) from err

    def _receive(self, w: int) -> ItemResult:
        try:
            result = self.results[w].recv()
        except (EOFError, OSError) as err:
            raise self._died(w) from err
        except Exception as err:  # noqa: BLE001  a result this process cannot rebuild
            raise RuntimeError(f"a conversion worker's result could not be read: {type(err).__name__}: {err}") from err
        if isinstance(result, Escaped):  # what convert_item let escape, raised here as Pool did
            raise result.error from WorkerTraceback(result.text)
        return result

    def _died(self, w: int) -> RuntimeError:
        proc = self.procs[w]
        proc.join(timeout=1)
        return RuntimeError(f"a conversion worker process died (exit code {proc.exitcode}); rerun with "
                            "--resume to continue")

    def close(self) -> None:
        """Stop every worker now (one mid-item too: its shard is redone on resume)."""
        for conn in self.jobs + self.results:
            conn.close()
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.join(timeout=TERMINATE_WAIT_S)
            if proc.exitcode is None:  # SIGTERM caught or ignored by a library
                proc.kill()
                proc.join()


class WorkerTraceback(Exception):
    """The traceback, in a worker, of an exception that escaped `convert_item` (its cause here)."""

    def __str__(self) -> str:
        return str(self.args[0])


class Escaped:
    """An exception that escaped `convert_item` in a worker, with its traceback there; one that
    cannot be pickled, or rebuilt from its pickle, travels as a RuntimeError naming it."""

    def __init__(self, err: Exception) -> None:
        self.text = "".join(traceback.format_exception(err))
        try:
            pickle.loads(pickle.dumps(err))
            self.error: Exception = err
        except Exception:  # noqa: BLE001  anything pickle raises: the worker must not die of it
            self.error = RuntimeError(f"{type(err).__name__}: {err}")


def _serve(jobs: Connection, results: Connection, inherited: list[Connection], parent: int | None) -> None:
    """A worker: converts each job it receives, in order, until its pipe closes. Ctrl-C is the
    parent's to handle: it stops the workers. The jobs are read on a thread (`_read_jobs`): were
    they read here, a job larger than its pipe holds and a result larger than its own would leave
    the parent and this worker each blocked in a send for ever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for conn in inherited:
        conn.close()
    _die_with_parent(parent)
    received: queue.SimpleQueue[Any] = queue.SimpleQueue()
    threading.Thread(target=_read_jobs, args=(jobs, received), daemon=True).start()
    while True:
        job = received.get()
        if job is None:  # the pipe closed: the parent is done, or gone
            return
        try:
            if isinstance(job, Exception):
                raise job
            result: Any = convert_item(*job)
        except Exception as err:  # noqa: BLE001  convert_item reports failures itself: this is a bug, raised there
            result = Escaped(err)
        try:
            results.send(result)
        except OSError:  # the parent is gone
            return


def _read_jobs(jobs: Connection, received: queue.SimpleQueue[Any]) -> None:
    """Each job from the pipe onto ``received`` (an exception for one that cannot be read), then
    None once the pipe closes."""
    while True:
        try:
            received.put(jobs.recv())
        except (EOFError, OSError):
            received.put(None)
            return
        except Exception as err:  # noqa: BLE001  a job that cannot be unpickled is that job's error
            received.put(err)


def _die_with_parent(parent: int | None) -> None:
    """Have the kernel SIGKILL this worker when the process that started it dies (Linux's
    PR_SET_PDEATHSIG), rather than finish a long item for no one; a worker whose parent died
    before that took hold exits now. Elsewhere the worker exits after its item, at its pipe's EOF."""
    from mediapipe.loaders.parent_watch import set_parent_death_signal  # the loader workers' own call

    if not set_parent_death_signal():
        return
    if parent is not None and os.getppid() != parent:
        os._exit(0)


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """A Ctrl-C while workers start is raised once they have started, not during a fork: there
    Python runs the SIGINT handler inside the at-fork hooks, which swallow the KeyboardInterrupt
    (the conversion carried on). Only the main thread can set a handler, and only one that Python
    set can be put back: otherwise, no change."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        signal.raise_signal(signal.SIGINT)  # the previous handler's turn: KeyboardInterrupt by default


def _widen(conn: Connection) -> None:
    """A larger pipe buffer (Linux), so a worker's send of one converted image rarely waits."""
    with contextlib.suppress(ImportError, AttributeError, OSError):
        import fcntl

        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, RESULT_PIPE_BYTES)
