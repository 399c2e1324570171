"""``mediapipe bench``: training-input throughput of this library and its peers, in one run.

With no arguments: the image scenarios (train and eval) on a built-in sample dataset,
generated once into the user cache directory, with every installed backend. Tells whether
a training loop would be input-bound (``--step-ms``) and which backend feeds it fastest.
Every run writes its full results as JSON (``--json``, or a new file in the cache) and prints
where that file, and the Markdown and plot asked for, went.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  mediapipe bench                                   image-train and image-eval on the sample images
  mediapipe bench --data ~/imagenet/val --workers 1,2,4,8 --plot scaling.png
  mediapipe bench --scenario image-train --backends mediapipe,dali --device cpu,cuda --json out.json
  mediapipe bench --dataset sample-video            video-clips on generated AV1 clips
  mediapipe bench --dataset sample-video-gop16      the same clips with a key frame every 16 frames (as
                                                    mediapipe convert --keyframe-interval 16 writes): short lead-ins
  mediapipe bench --step-ms 120                     would a 120 ms training step wait for input?
  mediapipe bench --data imgs/ --data imgs-converted/ --cold-cache
                                                    the folder against its shards, read from the disk
  mediapipe bench --dataset sample-images --as-shards
                                                    the sample images as a folder and as shards, same run
  mediapipe bench --backend ray --scenario image-train --workers 2
                                                    the local loader against its sample stage on Ray
  mediapipe bench --as-shards --backends mediapipe,mediapipe-http --scenario image-train
                                                    shards over HTTP (a server on 127.0.0.1) against on disk
"""


KEEP_RESULTS = 20  # result files kept in the cache's bench/results/ (the newest)


def default_json_path(cache_dir: Path | None) -> Path:
    """A new file for this run's JSON in ``<cache>/bench/results/`` (under ``--cache-dir`` when
    given), named by the time; older files beyond the newest `KEEP_RESULTS` are removed."""
    import time

    from mediapipe.bench.datasets import cache_dir as user_cache

    folder = (Path(cache_dir) if cache_dir else user_cache() / "bench") / "results"
    folder.mkdir(parents=True, exist_ok=True)
    for old in sorted(folder.glob("bench-*.json"))[: -(KEEP_RESULTS - 1) or None]:
        old.unlink(missing_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, n = folder / f"bench-{stamp}.json", 1
    while path.exists():
        n += 1
        path = folder / f"bench-{stamp}-{n}.json"
    return path


def _write_outputs(report: dict, args: argparse.Namespace) -> list[str]:
    """Write the JSON (always), Markdown and plot asked for; a line per file saying where it went,
    or why it could not be written (the table is printed either way)."""
    from mediapipe.bench import plot
    from mediapipe.bench import report as rpt

    wanted = [("results (JSON)", args.json, rpt.write_json), ("tables (Markdown)", args.markdown, rpt.write_markdown),
              ("plot", args.plot, plot.write_plot)]
    lines = []
    for what, path, write in wanted:
        if what.startswith("results") and path is None:
            try:
                path = default_json_path(args.cache_dir)
            except OSError as err:
                lines.append(f"{what}: not written ({err}); --json PATH writes it elsewhere")
                continue
        if path is None:
            continue
        try:
            write(report, path)
        except (OSError, ImportError) as err:  # a folder that is not there, no matplotlib for the plot
            lines.append(f"{what}: not written to {path} ({type(err).__name__}: {err})")
        else:
            lines.append(f"{what}: {path}")
    return lines


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected N or N,N,... (e.g. 1,2,4)") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected worker counts >= 0")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mediapipe.bench.datasets import BUILTIN
    from mediapipe.bench.scenarios import BACKENDS, SCENARIOS

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EXAMPLES
    parser.add_argument("--scenario", action="append", metavar="NAME",
                        help=f"repeatable or comma-separated: {', '.join(SCENARIOS)} (default: image-train, "
                             "image-eval; or the scenarios of --dataset)")
    parser.add_argument("--data", type=Path, action="append", metavar="PATH",
                        help="a folder (class sub-folders), a .jsonl manifest or a converted dataset; repeatable: "
                             "every scenario runs on each, alternated in the same run, and the table compares "
                             "each backend across them (the first is the baseline)")
    parser.add_argument("--dataset", choices=sorted(BUILTIN), help="a built-in sample dataset (default: sample-images)")
    parser.add_argument("--as-shards", action="store_true",
                        help="also convert the built-in sample images to shards (once, cached beside them; JPEGs "
                             "copied) and run the image scenarios on the folder and on the shards, same run")
    parser.add_argument("--cold-cache", action="store_true",
                        help="before each timed repetition, evict the dataset's files (only those) from the page "
                             "cache, so the repetition reads from the disk")
    parser.add_argument("--backend", choices=("ray",), help="ray: this library's loader locally and with its "
                        "sample stage on a local Ray (as many CPUs as workers), same run (--backends "
                        "mediapipe,mediapipe-ray)")
    parser.add_argument("--backends", type=_csv, metavar="LIST",
                        help=f"comma-separated, of {', '.join(BACKENDS)} (default: all that apply)")
    parser.add_argument("--device", type=_csv, metavar="cpu|cuda",
                        help="cpu, cuda or cpu,cuda (default: cpu, plus cuda when a GPU is present)")
    parser.add_argument("--workers", type=_int_list, metavar="N[,N...]",
                        help="loader workers (DALI threads); several give a scaling sweep (default: the core count)")
    parser.add_argument("--batches", type=int, default=10, help="batches per timed repetition (default: 10)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions per backend (default: 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed batches after the first (default: 1)")
    parser.add_argument("--batch-size", type=int, help="samples per batch (default: 64 images, 8 clips)")
    parser.add_argument("--step-ms", type=float, default=0.0,
                        help="simulate a training step of N ms per batch and report whether input is the bottleneck")
    parser.add_argument("--worker-type", choices=("process", "thread"), help="this library's loader workers")
    parser.add_argument("--real-epochs", action="store_true",
                        help="restart the loaders at each pass over the dataset, as training on this very dataset "
                             "would (default: a small dataset is repeated as one long epoch, as a large one is)")
    parser.add_argument("--count", type=int, help="samples in a generated dataset (default: 1000 images)")
    parser.add_argument("--cache-dir", type=Path, help="where built-in datasets are generated "
                                                       "(default: $MEDIAPIPE_CACHE_DIR or ~/.cache/mediapipe)")
    parser.add_argument("--json", type=Path, metavar="PATH",
                        help="where to write the full results as JSON (default: a new file in the cache's "
                             f"bench/results/, the newest {KEEP_RESULTS} kept; the path is printed at the end)")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the tables as Markdown")
    parser.add_argument("--plot", type=Path, metavar="PATH.png", help="plot throughput and the scaling curve")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds a backend may take for one step (warm-up or repetition) before it is "
                             "stopped and reported as timed out (default: 300)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--suggest", action="store_true",
                        help="measure this library's loader at each worker setting num_workers='auto' tries (worker "
                             "count, process or thread workers, prefetch) and with 'auto', rounds alternated; print "
                             "the fastest setting (image, video and audio scenarios)")


def settings_from_args(args: argparse.Namespace) -> object:
    """`Settings` from parsed arguments, with the defaults that depend on the machine."""
    import os

    from mediapipe.bench.datasets import BUILTIN
    from mediapipe.bench.harness import Settings
    from mediapipe.bench.scenarios import DEFAULT_SCENARIOS, SCENARIOS, cuda_available

    scenarios = [s for group in (args.scenario or []) for s in _csv(group)]
    if not scenarios and args.dataset:
        scenarios = [s.name for s in SCENARIOS.values() if s.kind == BUILTIN[args.dataset]]
    devices = args.device or (["cpu", "cuda"] if cuda_available() else ["cpu"])
    return Settings(
        scenarios=scenarios or list(DEFAULT_SCENARIOS), data=args.data, dataset=args.dataset,
        as_shards=args.as_shards, cold_cache=args.cold_cache,
        backends=args.backends or (["mediapipe", "mediapipe-ray"] if args.backend == "ray" else None),
        devices=devices, workers=args.workers or [os.cpu_count() or 1],
        batches=args.batches, repeats=args.repeats, warmup=args.warmup, batch_size=args.batch_size,
        step_ms=args.step_ms, count=args.count, cache_dir=args.cache_dir, progress=not args.no_progress,
        worker_type=args.worker_type, real_epochs=args.real_epochs, timeout=args.timeout,
    )


def run(args: argparse.Namespace) -> int:
    from mediapipe.bench import report as rpt
    from mediapipe.bench.harness import run as run_bench

    try:
        settings = settings_from_args(args)
    except ValueError as err:
        print(f"mediapipe bench: {err}", file=sys.stderr)
        return 2
    for path in args.data or []:
        if not path.exists():
            print(f"mediapipe bench: --data {path}: no such file or folder", file=sys.stderr)
            return 2
    if args.suggest:
        return _suggest(settings, args)
    report = run_bench(settings)
    written = _write_outputs(report, args)  # the files first: a closed terminal pipe must not lose them
    print(rpt.render_table(report))
    print()
    print("\n".join(written))
    ran = [r for r in report["results"] if r["error"] is None]
    return 0 if ran else 1


def _suggest(settings: Any, args: argparse.Namespace) -> int:
    """``--suggest``: each scenario's worker settings timed in turn (`mediapipe.bench.suggest`)."""
    import json

    from mediapipe.bench.harness import data_for
    from mediapipe.bench.scenarios import SCENARIOS
    from mediapipe.bench.suggest import SUGGEST_KINDS, render_suggestion, run_suggest

    prepared: dict[str, Path] = {}
    results = []
    for name in settings.scenarios:
        if SCENARIOS[name].kind not in SUGGEST_KINDS:
            print(f"mediapipe bench --suggest: {name} is skipped (it measures {', '.join(SUGGEST_KINDS)} "
                  "scenarios)", file=sys.stderr)
            continue
        for ds in data_for(SCENARIOS[name], settings, prepared):
            result = run_suggest(name, ds.path, device=settings.devices[0], batches=settings.batches,
                                 repeats=settings.repeats, batch_size=settings.batch_size)
            results.append(result)
            print(render_suggestion(result), flush=True)
            print()
    if args.json:
        args.json.write_text(json.dumps({"suggestions": results}, indent=2))
        print(f"results (JSON): {args.json}")
    return 0 if results else 1
