"""The ``mediapipe`` command: ``bench``, ``convert``, ``inspect``, ``verify``.

Each subcommand lives in ``mediapipe.commands.<name>`` with ``add_arguments(parser)``
and ``run(args) -> int``; it is imported only when used, so ``mediapipe bench`` does
not pay for Ray or DALI imports it does not need.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMANDS = {
    "bench": "measure training-input throughput against peers, in the same run",
    "convert": "turn a folder or manifest of media into sharded, indexed, transcoded datasets",
    "inspect": "summarise a converted dataset (counts, sizes, resolutions, durations, codecs)",
    "verify": "check a converted dataset's checksums and decode every sample",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mediapipe", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the library decides")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    argv = sys.argv[1:] if argv is None else argv
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == wanted:  # import only the module of the command being run
            importlib.import_module(f"mediapipe.commands.{name}").add_arguments(p)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if args.command is None:
        parser.print_help()
        return 2
    return int(importlib.import_module(f"mediapipe.commands.{args.command}").run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
