"""One backend per process: `BackendProcess` (the harness's handle) and the process it drives.

Each backend runs in its own Python process, so that its memory (the process and its
loader workers) and CPU time are its own, and one backend's imports, thread pools or leaks
cannot touch another's numbers. All backends of a comparison stay alive together so the
harness can alternate them (A B A B); an idle backend only holds its prefetched batches.

Protocol: a dict per command over a pipe (``open``, ``warmup``, ``rep``, ``close``) and a
dict per reply; what libraries print goes to a log file, quoted when the backend fails.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import signal
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from mediapipe.bench.core import (
    Rep,
    rss_mb,
    tree_cpu_seconds,
    tree_pids,
    tree_pss_mb,
    tree_rss_mb,
    tree_uss_mb,
)

RSS_SAMPLE_SECONDS = 0.1


def gpu_mb() -> float | None:
    """The GPU memory torch's allocator holds for tensors in this process, in MB; None where this
    process never initialised CUDA (a CPU backend)."""
    import torch

    if not torch.cuda.is_initialized():
        return None
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated() / 2**20


# -- inside the backend's process ---------------------------------------------------------
class _Backend:
    def __init__(self) -> None:
        self.stream: Any = None
        self.batches: Any = None
        self.open_seconds = 0.0
        self.delivered = 0

    def open(self, spec: dict[str, Any]) -> dict[str, Any]:
        from mediapipe.bench.scenarios import open_stream

        t0 = time.perf_counter()
        self.stream = open_stream(spec["scenario"], spec["backend"], Path(spec["data"]), device=spec["device"],
                                  workers=spec["workers"], batch_size=spec["batch_size"],
                                  options=spec.get("options", {}))
        self.open_seconds = time.perf_counter() - t0
        return {"buffered": self.stream.buffered}

    def _next(self) -> tuple[int, float | None]:
        item = next(self.batches)
        self.delivered += 1
        return item

    def warmup(self, batches: int) -> dict[str, Any]:
        """The first batch (its latency includes building the pipeline and starting
        workers), then ``batches`` more, untimed."""
        t0 = time.perf_counter()
        self.batches = iter(self.stream)
        self._next()
        first = self.open_seconds + time.perf_counter() - t0
        for _ in range(batches):
            self._next()
        return {"first_batch_s": first}

    def rep(self, batches: int, drain: int, step_ms: float) -> dict[str, Any]:
        """Drain what was prefetched while idle, then time ``batches`` consecutive batches."""
        for _ in range(drain):
            self._next()
        me = os.getpid()
        stages0 = self.stream.stages() or {}
        cpu0 = tree_cpu_seconds(me)
        samples, units, wait, step = 0, 0.0, 0.0, 0.0
        have_units = True
        t0 = time.perf_counter()
        for _ in range(batches):
            t1 = time.perf_counter()
            n, u = self._next()
            t2 = time.perf_counter()
            wait += t2 - t1
            samples += n
            if u is None:
                have_units = False
            else:
                units += u
            if step_ms > 0:
                time.sleep(step_ms / 1000)
                step += time.perf_counter() - t2
        seconds = time.perf_counter() - t0
        cpu1 = tree_cpu_seconds(me)
        stages1 = self.stream.stages() or {}
        stages = {k: v - stages0.get(k, 0.0) for k, v in stages1.items()}
        rep = Rep(batches=batches, samples=samples, seconds=seconds, units=units if have_units else None,
                  wait=wait, step=step, cpu_seconds=None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
                  stages=stages, end_rss_mb=tree_rss_mb(me), end_uss_mb=tree_uss_mb(me),
                  end_pss_mb=tree_pss_mb(me), end_gpu_mb=gpu_mb())
        return {"rep": rep.__dict__, "delivered": self.delivered}

    def close(self) -> dict[str, Any]:
        if self.stream is not None:
            self.stream.close()
        return {}


def serve(conn: Any, log_path: str, start_method: str | None) -> None:
    """The backend process: answer the harness's commands until ``close``."""
    if start_method is not None:  # a forkserver child defaults to forkserver: give loaders what
        multiprocessing.set_start_method(start_method, force=True)  # a training script would get
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)  # what libraries print goes to the log, quoted when the backend fails
    os.dup2(log, 2)
    backend = _Backend()
    while True:
        try:
            msg = conn.recv()
        except EOFError:  # the harness went away
            break
        cmd = msg.pop("cmd")
        try:
            reply = {"ok": True, **getattr(backend, cmd)(**msg)}
        except BaseException as err:  # noqa: BLE001 - every failure goes back as the row's reason
            reply = {"ok": False, "error": _reason(err), "trace": traceback.format_exc()}
        conn.send(reply)
        if cmd == "close":
            break


def _reason(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    if isinstance(err, NotImplementedError) and text.startswith(("not available", "not installed", "not applicable")):
        return text
    return f"{type(err).__name__}: {text}".splitlines()[0][:500]


# -- the harness's handle -------------------------------------------------------------------
class BackendError(RuntimeError):
    """A backend process failed a command; ``str()`` is the reason for the report."""


BASE_PRELOAD = ("torch", "mediapipe", "mediapipe.bench.worker")
PRELOAD_BY_BACKEND = {
    "torchvision": ("torchvision", "torchvision.transforms.v2"),
    "torchvision-gpu": ("torchvision", "torchvision.transforms.v2", "mediapipe.bench.torchvision_gpu"),
    "dali": ("nvidia.dali", "nvidia.dali.plugin.pytorch"),
    "mediapipe-dali": ("nvidia.dali", "nvidia.dali.plugin.pytorch", "mediapipe.loaders.dali.loader"),
}
_preload: list[str] = list(BASE_PRELOAD)


def set_preload(kinds: set[str], backends: set[str]) -> None:
    """What the backend server imports once, before it forks the first backend: only what the
    run's backends use (DALI alone costs seconds of CPU). Later calls change nothing."""
    modules = list(BASE_PRELOAD)
    modules += [f"mediapipe.bench.{'images' if k == 'image' else k}" for k in sorted(kinds)]
    for b in sorted(backends):
        modules += [m for m in PRELOAD_BY_BACKEND.get(b, ()) if m not in modules]
    _preload[:] = modules


def _context() -> Any:
    """Backend processes fork from a server that imported torch, torchvision, DALI and this
    library once (seconds each on a small machine) and never touched CUDA, so each backend
    starts in milliseconds and may still use the GPU."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([m for m in _preload if _installed(m)])
    return ctx


def _default_start_method() -> str:
    """The start method a fresh interpreter would use (without fixing this process's)."""
    return multiprocessing.get_all_start_methods()[0]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class BackendProcess:
    """A live backend process; `call` sends a command and waits for its reply, sampling
    the process tree's RSS meanwhile (the peak so far is ``peak_rss_mb``)."""

    def __init__(self, label: str) -> None:
        self.label = label
        fd, self._log = tempfile.mkstemp(prefix="mediapipe-bench-", suffix=".log")
        os.close(fd)
        ctx = _context()
        self._conn, child = ctx.Pipe()
        start_method = multiprocessing.get_start_method(allow_none=True) or _default_start_method()
        self.proc = ctx.Process(target=serve, args=(child, self._log, start_method), name=f"mediapipe-bench {label}")
        self.proc.start()
        child.close()
        self.peak_rss_mb: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, cmd: str, **args: Any) -> None:
        try:
            self._conn.send({"cmd": cmd, **args})
        except (BrokenPipeError, OSError) as err:
            raise BackendError(self._died(f"could not take {cmd!r} ({err})")) from None

    def receive(self, timeout: float, sample_rss: bool = False) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        peak, pids, pids_at = None, [], 0.0
        while True:
            if sample_rss:
                now = time.monotonic()
                if now - pids_at > 0.5:  # the tree changes when a loader restarts its workers
                    pids, pids_at = tree_pids(self.pid), now
                values = [v for v in (rss_mb(p) for p in pids) if v is not None]
                if values:
                    peak = max(peak or 0.0, sum(values))
            try:
                ready = self._conn.poll(RSS_SAMPLE_SECONDS)
                reply = self._conn.recv() if ready else None
            except (EOFError, OSError):
                self.proc.join(timeout=2)
                raise BackendError(self._died(f"exited with code {self.proc.exitcode}")) from None
            if reply is not None:
                if peak is not None:
                    self.peak_rss_mb = max(self.peak_rss_mb or 0.0, peak)
                if not reply.pop("ok"):
                    raise BackendError(reply["error"])
                return reply
            if not self.proc.is_alive():
                raise BackendError(self._died(f"exited with code {self.proc.exitcode}"))
            if time.monotonic() > deadline:
                self.kill()
                raise BackendError(f"timed out after {timeout:.0f} s")

    def call(self, cmd: str, timeout: float = 600.0, sample_rss: bool = False, **args: Any) -> dict[str, Any]:
        self.send(cmd, **args)
        return self.receive(timeout, sample_rss)

    def log_text(self) -> str:
        try:
            return Path(self._log).read_text(errors="replace")
        except OSError:
            return ""

    def _died(self, what: str) -> str:
        lines = [line for line in self.log_text().splitlines() if line.strip()]
        return f"backend process {what}: {lines[-1][:300] if lines else 'no output'}"

    def close(self, timeout: float = 30.0) -> None:
        if self.proc.is_alive():
            try:
                self.call("close", timeout=timeout)
            except BackendError:
                pass
            self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.kill()
        self._conn.close()
        Path(self._log).unlink(missing_ok=True)

    def kill(self) -> None:
        """Stop the backend process and its loader workers (this run started them all)."""
        for pid in reversed(tree_pids(self.pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.join(timeout=5)
