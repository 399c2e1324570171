"""The ``mediapipe`` command: ``bench``, ``convert``, ``inspect``, ``verify``, ``selfcheck``, ``sample-data``.

Each subcommand lives in ``mediapipe.cli.<name>`` (``sample-data`` in ``sample_data``) with
``add_arguments(parser)`` and ``run(args) -> int``; it is imported only when used, so ``mediapipe bench`` does
not pay for Ray or DALI imports it does not need. A reader that goes away early
(``mediapipe inspect out | head``) ends the command quietly with status 141, as a
command killed by SIGPIPE ends in a shell.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import select
import sys
from typing import TextIO

EXIT_CLOSED_PIPE = 128 + 13  # 128 + SIGPIPE: what a shell reports for `yes | head`

COMMANDS = {
    "bench": "measure training-input throughput against peers, in the same run",
    "convert": "turn media folders, manifests and datasets of other formats into sharded, indexed, transcoded datasets",
    "inspect": "summarise a converted dataset (counts, sizes, resolutions, durations, codecs)",
    "verify": "check a converted dataset's checksums and decode every sample",
    "selfcheck": "check the GPU path on this machine: GPU tests, peers on the GPU, CPU scaling (JSON)",
    "sample-data": "write small generated datasets (images, Parquet, TFRecord, speech, COCO, video) for the README",
}


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; its exit status (141 when stdout or stderr was a pipe its reader closed)."""
    try:
        try:
            return _run(argv)
        finally:  # also after --help's SystemExit: a closed pipe shows here, not at interpreter exit
            sys.stdout.flush()
    except BrokenPipeError:
        closed = [stream for stream in (sys.stdout, sys.stderr) if _reader_gone(stream)]
        if not closed:
            raise  # some other pipe (a worker's, a socket's): a real error
        # Python's advice (signal docs, "Note on SIGPIPE"): point the closed stream at devnull,
        # so that the flush at interpreter exit does not fail a second time
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in closed:
            os.dup2(devnull, stream.fileno())
        os.close(devnull)
        return EXIT_CLOSED_PIPE


def _reader_gone(stream: TextIO) -> bool:
    """Whether ``stream`` is a pipe whose reading end is closed (poll reports an error on it)."""
    try:
        fd = stream.fileno()
    except (AttributeError, ValueError, OSError):  # replaced by a test's capture, or closed
        return False
    if not hasattr(select, "poll"):  # no poll (Windows): trust the BrokenPipeError
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _module(command: str) -> str:
    """The module of a subcommand: ``sample-data`` lives in ``mediapipe.cli.sample_data``."""
    return f"mediapipe.cli.{command.replace('-', '_')}"


def _version() -> str:
    """The installed distribution's name and version (the package's own when it runs from a checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    from mediapipe import __version__

    try:
        return f"mediapipe-loader {version('mediapipe-loader')}"
    except PackageNotFoundError:
        return f"mediapipe-loader {__version__}"


def _run(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="mediapipe", description="mediapipe-loader's commands: media files to "
                                     "batched, augmented PyTorch tensors, and the datasets they come from.",
                                     epilog="`mediapipe COMMAND --help` describes a command's options.")
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the library decides")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    argv = sys.argv[1:] if argv is None else argv
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == wanted:  # import only the module of the command being run
            importlib.import_module(_module(name)).add_arguments(p)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if args.command is None:  # bare `mediapipe`: what it can do, not an error
        parser.print_help()
        return 0
    return int(importlib.import_module(_module(args.command)).run(args) or 0)

