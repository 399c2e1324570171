"""``mediapipe bench --suggest``: this library's loader at each setting of the auto grid
(`mediapipe.loaders.auto_workers.worker_grid`, and the deeper prefetch it tries) and with
``num_workers="auto"``, rounds alternated in one process; the fastest fixed setting is the
suggestion, and the auto row says how close the choice made on the first batches comes.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mediapipe.bench.scenarios import SCENARIOS
from mediapipe.loaders.auto_workers import AutoLoader, WorkerSetting, worker_grid

SUGGEST_KINDS = ("image", "video", "audio")


def suggest_grid() -> list[WorkerSetting]:
    """The fixed settings timed: the auto grid, and each process setting with prefetch 4."""
    grid = worker_grid()
    deeper = [WorkerSetting(s.num_workers, s.worker_type, 4) for s in grid if s.worker_type == "process"]
    return [*grid, *deeper]


@contextlib.contextmanager
def scenario_loader_maker(scenario: str, data: Path, device: str, batches: int, batch_size: int | None = None
                          ) -> Iterator[Callable[..., Any]]:
    """make(**loader kwargs) -> this library's loader of ``scenario`` on ``data`` (the bench's
    own pipeline, repeated into one epoch of at least ``batches`` batches)."""
    kind = SCENARIOS[scenario].kind
    if kind == "image":
        from mediapipe.bench.images import mediapipe_pipeline

        pipe = mediapipe_pipeline(scenario, data, device, batch_size or SCENARIOS[scenario].batch_size or 64,
                                  options={"max_batches": batches})
        yield lambda **kw: pipe.loader(shuffle=True, drop_last=True, **kw)
    elif kind == "audio":
        from mediapipe.bench.audio import mediapipe_pipeline as audio_pipeline

        pipe, sampler = audio_pipeline(data, device, batches=batches, repeat=True)
        yield lambda **kw: pipe.loader(sampler=sampler, **kw)
    elif kind == "video":
        from mediapipe.bench.video import video_pipeline

        with tempfile.TemporaryDirectory() as tmp:
            pipe = video_pipeline(data, Path(tmp), device=device, batches=batches,
                                  batch_size=batch_size or SCENARIOS[scenario].batch_size or 8,
                                  **SCENARIOS[scenario].clip_options())
            yield lambda **kw: pipe.loader(shuffle=True, drop_last=True, **kw)
    else:
        raise ValueError(f"--suggest: scenario {scenario} ({kind}); it measures {', '.join(SUGGEST_KINDS)} scenarios")


def _samples(batch: dict[str, Any]) -> int:
    return int(batch["index"].shape[0])


def _epochs(loader: Any) -> Iterator[dict[str, Any]]:
    """The loader's batches, epoch after epoch."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise RuntimeError("--suggest: an epoch of the loader gave no batch")


def queue_depth(setting: WorkerSetting) -> int:
    """Batches a setting's workers may hold ready (and so deliver at once after an idle spell)."""
    return setting.num_workers * setting.prefetch + 1


def measure(loader: Any, batches: int) -> tuple[float, str | None]:
    """Samples per second of ``loader`` in its steady state: after its start-up, twice its queue
    depth, and for an auto loader the batches it tried settings on; over at least ``batches``
    batches and four queue depths (a window shorter than the queue times the queue). Returns
    the rate and the auto loader's choice."""
    stream = _epochs(loader)
    try:
        if isinstance(loader, AutoLoader):
            while loader.chosen is None:
                next(stream)
            setting = loader.chosen
        else:
            setting = WorkerSetting(loader.num_workers, loader.worker_type, loader.prefetch)
        for _ in range(2 * queue_depth(setting)):
            next(stream)
        t0, samples = time.perf_counter(), 0
        for _ in range(max(batches, 4 * queue_depth(setting))):
            samples += _samples(next(stream))
        return samples / (time.perf_counter() - t0), str(loader.chosen) if isinstance(loader, AutoLoader) else None
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
        loader.close()


def run_suggest(scenario: str, data: Path, *, device: str = "cpu", batches: int = 10, repeats: int = 3,
                batch_size: int | None = None, grid: list[WorkerSetting] | None = None,
                auto_grid: list[WorkerSetting] | None = None) -> dict[str, Any]:
    """Each setting of ``grid`` (default `suggest_grid`) and auto (over ``auto_grid``, default
    `worker_grid`), ``repeats`` rounds alternated:
    {"scenario", "rows": [{"setting", "samples_per_s_reps", "samples_per_s", "vs_best"}],
    "auto": {...row, "chosen": [...]}, "suggested"}."""
    grid = grid or suggest_grid()
    rates: dict[str, list[float]] = {str(s): [] for s in grid}
    auto_rates: list[float] = []
    chosen: list[str] = []
    deepest = max(queue_depth(s) for s in grid)
    per_loader = max(batches, 4 * deepest) + 2 * deepest + 30 * len(grid)  # and auto's trials
    with scenario_loader_maker(scenario, data, device, per_loader, batch_size) as make:
        for repeat in range(repeats):
            order = grid if repeat % 2 == 0 else grid[::-1]
            for setting in order:
                rate, _ = measure(make(**setting.as_kwargs()), batches)
                rates[str(setting)].append(rate)
            rate, pick = measure(make(num_workers="auto", grid=auto_grid), batches)
            auto_rates.append(rate)
            chosen.append(pick or "?")
    medians = {k: statistics.median(v) for k, v in rates.items()}
    best = max(medians, key=medians.__getitem__)
    rows = [{"setting": k, "samples_per_s_reps": v, "samples_per_s": medians[k], "vs_best": medians[k] / medians[best]}
            for k, v in rates.items()]
    auto = statistics.median(auto_rates)
    return {"scenario": scenario, "data": str(data), "device": device, "rows": rows, "suggested": best,
            "auto": {"setting": "num_workers='auto'", "samples_per_s_reps": auto_rates, "samples_per_s": auto,
                     "vs_best": auto / medians[best], "chosen": chosen}}


def render_suggestion(result: dict[str, Any]) -> str:
    """The table of settings and the suggestion, as the terminal shows it."""
    width = max(len(r["setting"]) for r in [*result["rows"], result["auto"]])
    lines = [f"{result['scenario']} on {result['data']} ({result['device']}): samples/s, median of the rounds "
             f"(each round's in brackets), and against the best fixed setting",
             f"  {'setting':<{width}}  samples/s  vs best  rounds"]
    for r in [*result["rows"], result["auto"]]:
        rounds = ", ".join(f"{v:.0f}" for v in r["samples_per_s_reps"])
        lines.append(f"  {r['setting']:<{width}}  {r['samples_per_s']:9.0f}  {r['vs_best']:6.2f}x  [{rounds}]")
    lines.append(f"  auto chose: {'; '.join(result['auto']['chosen'])}")
    lines.append(f"suggest: pipe.loader({result['suggested']})")
    return "\n".join(lines)
