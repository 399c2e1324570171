"""Progress (tqdm underneath): a bar on a terminal, periodic plain lines in a log, stacked bars."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import time

import pytest

from mediapipe.bench.progress import NoProgress, make_progress
from mediapipe.cli.progress import Progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr("tqdm.std.time", fake)
    return fake


def test_log_lines_come_every_log_every_seconds_and_once_more_at_close(clock):
    log = io.StringIO()
    bar = Progress(30, unit="files", desc="convert", stream=log, log_every=10.0)  # StringIO: not a TTY
    for _ in range(30):
        clock.now += 1.0
        bar.update(1, bytes=3_000_000)
    bar.close()
    bar.close()  # a second close writes nothing
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text  # no redraws, no cursor moves
    lines = text.splitlines()
    assert [line.split(",")[0] for line in lines] == ["convert: 10/30 files", "convert: 20/30 files",
                                                      "convert: 30/30 files", "convert: 30/30 files"]
    # rates are averages over the run: 1 file and 3 MB per second
    assert "1.0 files/s" in lines[-1] and "3.0 MB/s" in lines[-1] and "elapsed 00:30" in lines[-1]
    assert "ETA 00:10" in lines[1]


def test_no_line_before_the_first_interval_and_none_without_bytes(clock):
    log = io.StringIO()
    bar = Progress(None, unit="steps", desc="", stream=log, log_every=5.0)
    clock.now += 1.0
    bar.update(3)
    assert log.getvalue() == ""
    bar.close()
    assert log.getvalue() == "3 steps, 3.0 steps/s, elapsed 00:01\n"  # unknown total: no ETA, no MB/s


def test_terminal_draws_a_bar_redrawn_in_place(clock):
    screen = io.StringIO()
    bar = Progress(4, unit="files", desc="convert", stream=screen, tty=True)
    for _ in range(4):
        clock.now += 0.5
        bar.update(1, bytes=1_000_000)
    bar.close()
    text = screen.getvalue()
    frames = text.split("\r")[1:]
    assert len(frames) >= 4 and text.endswith("\n")
    assert frames[-1].startswith("[" + "#" * 24 + "] convert: 4/4 files 100%")
    assert "2.0 files/s" in frames[-1] and "2.0 MB/s" in frames[-1]


def test_a_bar_opened_under_another_is_drawn_below_it_and_cleared(clock):
    screen = io.StringIO()
    outer = Progress(10, unit="steps", desc="bench", stream=screen, tty=True)
    inner = make_progress(3, "images", "generating", stream=screen, tty=True)
    assert (outer.pos, abs(inner.pos)) == (0, 1)
    inner.update(3)
    inner.close()
    outer.update(10)
    outer.close()
    text = screen.getvalue()
    assert "\x1b[A" in text  # the inner bar moved the cursor back up to the outer one
    assert text.rstrip("\n").split("\r")[-1].startswith("[" + "#" * 24 + "] bench: 10/10 steps")


def test_disabled_bench_progress_writes_nothing(capsys):
    bar = make_progress(5, "steps", "bench", enabled=False)
    assert isinstance(bar, NoProgress)
    bar.update(2, bytes=10)
    bar.close()
    assert capsys.readouterr().err == "" and bar.count == 2


SCRIPT = """
import time
from mediapipe.cli.progress import Progress
bar = Progress(6, unit="files", desc="job", log_every=0.2)
for _ in range(6):
    time.sleep(0.1)
    bar.update(1)
bar.close()
"""


def test_stderr_to_a_pipe_gives_lines_and_to_a_terminal_a_bar():
    piped = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0, piped.stderr
    lines = piped.stderr.splitlines()
    assert "\r" not in piped.stderr and 2 <= len(lines) <= 5
    assert all(line.startswith("job: ") for line in lines) and lines[-1].startswith("job: 6/6 files")

    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stderr=follower, stdout=subprocess.DEVNULL)
        os.close(follower)
        out = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(leader)
    text = out.decode("utf-8", "replace")
    assert text.count("\r") >= 2 and "job: 6/6 files 100%" in text  # redrawn in place, then finished
