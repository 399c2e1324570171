"""Every `mediapipe` command ends quietly, with status 141, when the reader of its output goes away."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mediapipe.cli import EXIT_CLOSED_PIPE, main
from mediapipe.synthetic import jpeg_bytes, photo_like


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Eight small JPEGs in two class folders, and their converted copy."""
    root = tmp_path_factory.mktemp("pipes")
    images = root / "images"
    for c in range(2):
        (images / f"c{c}").mkdir(parents=True)
        for i in range(4):
            (images / f"c{c}" / f"{i}.jpg").write_bytes(jpeg_bytes(photo_like(40, 56, 10 * c + i)))
    converted = root / "converted"
    assert main(["convert", str(images), str(converted), "--workers", "1", "--no-progress"]) == 0
    return images, converted


def run_into_closed_pipe(args: list[str]) -> subprocess.CompletedProcess:
    """Run ``mediapipe ARGS`` with stdout a pipe whose reading end is closed before it starts."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the only reader, gone before the command starts: every write fails with EPIPE
    try:
        proc = subprocess.Popen([sys.executable, "-m", "mediapipe.cli", *args], stdout=write_end,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    finally:
        os.close(write_end)
    try:
        err = proc.stderr.read().decode("utf-8", "replace")
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    return subprocess.CompletedProcess(args, code, "", err)


def commands(images: Path, converted: Path, tmp: Path) -> dict[str, list[str]]:
    return {
        "help": ["--help"],
        "inspect": ["inspect", str(converted)],
        "inspect --json": ["inspect", str(converted), "--json"],
        "verify": ["verify", str(converted)],
        "convert": ["convert", str(images), str(tmp / "again"), "--workers", "1", "--no-progress"],
        "bench": ["bench", "--data", str(images), "--scenario", "image-eval", "--backends", "mediapipe",
                  "--workers", "0", "--batches", "1", "--repeats", "1", "--warmup", "0", "--batch-size", "4",
                  "--device", "cpu", "--no-progress"],
    }


@pytest.mark.parametrize("name", ["help", "inspect", "inspect --json", "verify", "convert", "bench"])
def test_a_closed_stdout_ends_the_command_quietly(name: str, small_dataset, tmp_path: Path):
    result = run_into_closed_pipe(commands(*small_dataset, tmp_path)[name])
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr
    # argparse's --help swallows the failed write itself and exits 0; every command's output ends in 141
    assert result.returncode == (0 if name == "help" else EXIT_CLOSED_PIPE), result.stderr


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error(monkeypatch: pytest.MonkeyPatch, capsys):
    """A worker's or a socket's closed pipe is a real failure: it must not pass for `| head`."""
    import mediapipe.cli as cli

    def failing(argv):
        raise BrokenPipeError(32, "Broken pipe (a worker's)")

    monkeypatch.setattr(cli, "_run", failing)
    with pytest.raises(BrokenPipeError, match="a worker's"):
        cli.main(["inspect", "x"])
