"""`mediapipe verify DATASET`: checksums, tar structure, index and a decode of every sample."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="a folder written by `mediapipe convert`")
    p.add_argument("--no-decode", dest="decode", action="store_false", help="check bytes only, decode nothing")
    p.add_argument("--json", action="store_true", help="print the problems as JSON")


def run(args: argparse.Namespace) -> int:
    from mediapipe.dataset.inspect import verify

    problems = verify(args.dataset, decode=args.decode)
    if args.json:
        print(json.dumps({"ok": not problems, "problems": problems}, indent=1))
    else:
        for p in problems:
            where = p["shard"] or args.dataset
            if p["member"]:
                where += f":{p['member']}"
            if p["offset"] is not None:
                where += f" at offset {p['offset']}"
            print(f"FAIL {where}: {p['reason']}", file=sys.stderr)
        print(f"{args.dataset}: {'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0
