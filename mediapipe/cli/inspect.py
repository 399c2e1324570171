"""`mediapipe inspect DATASET`: counts, bytes, resolution / duration / fps histograms, codecs."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="a folder written by `mediapipe convert`")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    from mediapipe.dataset.inspect import format_summary, summarize
    from mediapipe.errors import SourceError

    try:
        summary = summarize(args.dataset)
    except SourceError as err:
        print(f"mediapipe inspect: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1) if args.json else format_summary(summary))
    return 0
