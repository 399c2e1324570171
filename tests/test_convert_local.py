"""The local engine's worker processes (`convert_local.Workers`): results come back in the jobs'
order however long each takes, no more than the window is in flight, an exception that escapes
`convert_item` is raised in the parent, and a worker that dies, or a parent that dies, leaves
nothing hanging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mediapipe.dataset import convert_local
from mediapipe.dataset.convert_local import Workers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the jobs below are patched in by fork")


def slow_echo(number: int, seconds: float) -> tuple[int, int]:
    time.sleep(seconds)
    if number < 0:
        os._exit(3)  # a worker killed mid-item (out of memory, a crashing decoder)
    if number == 999:
        raise KeyError("a bug in convert_item")
    return number, os.getpid()


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(convert_local, "convert_item", slow_echo)


def test_results_come_in_job_order_from_every_worker(echo: None) -> None:
    pool = Workers(3)
    try:
        delays = [0.03 if i % 3 == 0 else 0.001 for i in range(40)]  # every third job slow
        results = list(pool.imap(iter([(i, d) for i, d in enumerate(delays)]), 12))
    finally:
        pool.close()
    assert [n for n, _ in results] == list(range(40))
    assert len({pid for _, pid in results}) == 3


def test_no_more_than_the_window_is_in_flight(echo: None) -> None:
    pulled = 0

    def jobs():
        nonlocal pulled
        for i in range(30):
            pulled += 1
            yield i, 0.0

    pool = Workers(2)
    try:
        for yielded, (n, _) in enumerate(pool.imap(jobs(), 5), start=1):
            assert n == yielded - 1
            assert pulled - yielded <= 5 - 1  # this one yielded: at most window - 1 others still out
            time.sleep(0.002)
    finally:
        pool.close()


def test_an_exception_that_escapes_convert_item_is_raised_here(echo: None) -> None:
    pool = Workers(2)
    try:
        with pytest.raises(KeyError, match="a bug in convert_item"):
            list(pool.imap(iter([(0, 0.0), (999, 0.0), (2, 0.0)]), 4))
    finally:
        pool.close()


def test_a_worker_that_dies_is_an_error_not_a_hang(echo: None) -> None:
    pool = Workers(2)
    start = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"worker process died \(exit code 3\)"):
            list(pool.imap(iter([(0, 0.0), (-1, 0.01), (2, 0.0), (3, 0.0)]), 4))
    finally:
        pool.close()
    assert time.monotonic() - start < 10


def test_close_stops_workers_mid_item(echo: None) -> None:
    pool = Workers(2)
    results = pool.imap(iter([(i, 30.0 if i else 0.0) for i in range(4)]), 4)
    assert next(results)[0] == 0
    start = time.monotonic()
    pool.close()
    assert time.monotonic() - start < 10
    assert all(not proc.is_alive() for proc in pool.procs)


def test_workers_exit_when_the_parent_is_killed(tmp_path) -> None:
    """A SIGKILLed converter (the resume tests do it) leaves no worker waiting on its pipes."""
    script = textwrap.dedent("""
        import os, signal, sys
        from mediapipe.dataset.convert_local import Workers
        pool = Workers(3)
        print(" ".join(str(p.pid) for p in pool.procs), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
    assert done.returncode == -signal.SIGKILL, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 3
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
