"""How worker processes start: fork only when no other thread can hold a lock, else a forkserver
(its imports done once) or spawn; and the forkserver's bookkeeping across a user's fork."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import torch.multiprocessing as tmp

from mediapipe.errors import WorkerError

# What a forkserver imports once, before it forks any worker: the modules every worker runs.
FORKSERVER_PRELOAD = ("mediapipe.loaders.workers", "mediapipe.stages.batch_builder", "mediapipe.augment",
                      "mediapipe.decoders.registry", "mediapipe.loaders.sources.folder")


def os_thread_count() -> int | None:
    """Threads of this process as the kernel sees them (native ones too), or None off Linux."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def default_start_method() -> str:
    """"fork" when this process provably runs one OS thread (nothing can hold a lock across
    the fork), else "forkserver", else "spawn"."""
    methods = mp.get_all_start_methods()
    if "fork" in methods and os_thread_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def start_context(method: str | None, preload: Sequence[str] = ()) -> tuple[str, Any]:
    """(method, torch's multiprocessing context) for ``method``, or the default one. A
    forkserver not started yet will import `FORKSERVER_PRELOAD` and ``preload`` first."""
    method = method or default_start_method()
    ctx = tmp.get_context(method)
    if method == "forkserver":
        forget_inherited_forkserver()
    if method == "forkserver" and forkserver_pid() is None:  # keeps what the user preloads
        from multiprocessing import forkserver

        modules = list(getattr(forkserver._forkserver, "_preload_modules", None) or [])
        ctx.set_forkserver_preload(modules + [m for m in (*FORKSERVER_PRELOAD, *preload) if m not in modules])
    return method, ctx


_LEAN_WORKER = "mediapipe-worker-"  # name prefix of a worker that needs nothing from __main__


def _skip_main_for_lean_workers() -> None:
    """A worker started by forkserver or spawn normally runs the training script again (as
    ``__mp_main__``) before it starts: a script without an ``if __name__ == "__main__":`` guard
    would train again in every worker, and any script pays its imports once per worker. A
    worker whose task pickles no reference to ``__main__`` is started without it (the process
    name says which: `_LEAN_WORKER`); others get the standard treatment."""
    from multiprocessing import spawn

    original = spawn.get_preparation_data
    if getattr(original, "skips_main_for_lean_workers", False):
        return

    def get_preparation_data(name: str) -> dict[str, Any]:
        data = original(name)
        if name.startswith(_LEAN_WORKER):
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    get_preparation_data.skips_main_for_lean_workers = True  # type: ignore[attr-defined]
    spawn.get_preparation_data = get_preparation_data


def warm_start(method: str | None, preload: Sequence[str] = ()) -> None:
    """Start the forkserver (when ``method`` resolves to it) now, so that its imports overlap
    the caller's own set-up instead of delaying the first batch."""
    method, _ = start_context(method, preload)
    if method == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """Collect, then freeze the garbage collector's objects while forking: a forked child must
    never free garbage it inherited (a dropped DALI pipeline's destructor waits for threads
    that exist only in the parent), and collecting first leaves little to inherit."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def forkserver_pid() -> int | None:
    """The pid of this process's forkserver, when one runs."""
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def forget_inherited_forkserver() -> bool:
    """In a process forked from one that had started a forkserver, forget that forkserver (it is
    not this process's child: multiprocessing's ``ensure_running`` waits on it and fails with
    ChildProcessError), so that this process starts its own. Returns whether it forgot one."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return False
    try:  # WNOWAIT: asks without reaping; a process that is not our child raises
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return False
    except ChildProcessError:
        pass
    except (AttributeError, OSError):  # no waitid here: leave multiprocessing's state alone
        return False
    with contextlib.suppress(OSError, TypeError):
        os.close(server._forkserver_alive_fd)  # our copy only; the parent's forkserver watches its own
    server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
    server._inherited_fds = None
    server._lock = threading.Lock()  # it may have been held by another thread at the fork
    return True


def refuse_daemonic_parent() -> None:
    """Worker processes cannot start from a daemonic process (a ``multiprocessing.Pool`` worker,
    a ``Process(daemon=True)``): multiprocessing refuses with a bare AssertionError when the
    first pass starts; say so when the loader is made, with what works there instead."""
    me = mp.current_process()
    if me.daemon:
        raise WorkerError(f"loader worker processes cannot start in process {me.name!r} (pid {os.getpid()}), "
                          "which is daemonic (a multiprocessing Pool worker or a Process(daemon=True)): use "
                          "worker_type='thread' or num_workers=0 there (the batches are the same)")
