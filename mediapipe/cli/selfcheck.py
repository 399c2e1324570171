"""``mediapipe selfcheck --device cuda``: the GPU tests, then the benchmark against torchvision's
GPU pipeline and DALI, GPU memory, and the CPU scaling curve, in one run, written as JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cuda", "cpu"),
                   help="where the checks and the device rows run (default: cuda when a GPU is present)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the full report as JSON")
    p.add_argument("--quick", action="store_true",
                   help="every step at the smallest sizes (seconds, not minutes): what the test suite runs")
    p.add_argument("--workers", type=int, help="loader workers (DALI threads) of the device rows (default: the "
                                               "usable cores, at most 16)")
    p.add_argument("--cache-dir", type=Path, help="where sample data is generated (default: the bench's cache)")
    p.add_argument("--skip", action="append", choices=("checks", "bench", "video", "scaling"), default=[],
                   help="leave a step out (repeatable)")


def run(args: argparse.Namespace) -> int:
    import torch

    from mediapipe.checks import selfcheck

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("mediapipe selfcheck: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    missing = selfcheck.missing_needs()
    if missing:
        print(f"mediapipe selfcheck: needs {', '.join(missing)}, which cannot be imported here: "
              f"pip install {' '.join(missing)}", file=sys.stderr)
        return 2
    plan = selfcheck.Plan.make(device, args.quick, args.workers, args.cache_dir, set(args.skip))
    report = selfcheck.run(plan, say=lambda line: print(line, flush=True))
    if args.json:
        from mediapipe.bench.report import write_json

        write_json(report, args.json)
    print(selfcheck.render(report))
    return 0 if report["ok"] else 1
