"""The benchmark run: datasets, one process per backend, warm-up, alternating timed
repetitions, and the report as plain data (what ``--json`` writes).

For each scenario and worker count, every applicable backend is started in its own process
(see `mediapipe.bench.worker`); each is warmed up (first-batch latency measured apart), then
the repetitions alternate between backends (A B C, C B A, A B C...) so that drift of a shared
machine falls on every backend alike. Before each timed window a backend first hands over
the batches it prefetched while idle, so that no window starts with free batches; and after
each step the harness waits until the backend's processes go idle (its loader refilling its
prefetch), so that this work does not fall in the next backend's timed window.

Several datasets (``--data a --data b``, or ``--as-shards``) join the same comparison: each
(backend, dataset) pair is one more row alternated with the others, so the same backend on
a folder and on its converted shards is compared under the same drift. With ``cold_cache``,
the files of a row's dataset are evicted from the page cache (`mediapipe.dataset.measure.
evict_from_page_cache`: only these files, never the system-wide cache) just before each of
its timed repetitions, so the repetition reads from the disk.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mediapipe.bench import datasets
from mediapipe.bench.core import (
    INPUT_BOUND_FRACTION,
    MIN_BATCHES_PER_WORKER,
    MIN_REP_BATCHES,
    MIN_TIMED_SECONDS,
    RESULT_VERSION,
    STAGE_SLACK,
    STAGE_SLACK_SECONDS,
    Rep,
    Result,
    ceiling_fractions,
    machine_info,
    ratio_rows,
    summarise,
    tree_cpu_seconds,
)
from mediapipe.bench.ffcv_peer import bench_conversions
from mediapipe.bench.progress import make_progress
from mediapipe.bench.scenarios import GPU_ONLY, SCENARIOS, Scenario, unit_of, why_not
from mediapipe.bench.verdict import short_run_warnings
from mediapipe.bench.worker import BackendError, BackendProcess, set_preload

OURS = "mediapipe"
NOTES = {
    "samples_per_s": "median over the timed repetitions; min and max give the spread",
    "stages": ("seconds over all timed windows. read, decode, sample_ops and collate (and an epoch cache's "
               "cache_read and cache_write) run in the loader workers and are summed over workers; wait (for a batch from the workers), host_to_device, "
               "device_ops, step (--step-ms) and other (the rest: harness and loader overhead) are the "
               f"consumer's wall seconds and add up to total; 'other' stays within {STAGE_SLACK:.0%} of total "
               f"+ {STAGE_SLACK_SECONDS * 1000:.0f} ms. Peers report wait (time inside next()) and total only"),
    "peak_rss_mb": "largest sum of VmRSS over the backend's process and its loader workers, sampled every 0.1 s",
    "rss_growth_pct": "tree RSS after the last timed repetition against after the first (the stream runs on "
                      "across epochs)",
    "uss_mb_by_rep": "private memory (smaps_rollup Private_Clean + Private_Dirty) of the tree after each "
                     "repetition: pages a forked worker shares with its parent count once; uss_growth_pct as "
                     "rss_growth_pct",
    "pss_mb_by_rep": "proportional set size (smaps_rollup Pss) of the tree after each repetition: each shared "
                     "page divided among the processes mapping it, the other rows' processes too",
    "frames_per_s": ("video: useful_frames_per_s (clips/s x clip_len) for clip rows, decoded frames/s for the "
                     "sequential ceilings; decoded_frames_per_s counts every frame the decoder produced (lead-in "
                     "from the key frame included, frames skip_frame='NONREF' skipped not); ceiling_fraction is "
                     "decoded_frames_per_s over the faster ceiling (pyav sequential or dav1d) with the same threads"),
    "padding": ("audio datasets: the share of mediapipe's duration-bucketed batches (time x batch) that is "
                "padding, from its sampler's plan over the repeated epoch the run reads"),
    "gpu_mb_by_rep": ("GPU memory torch's allocator holds for tensors in the backend's process (memory_allocated) "
                      "after each repetition, on cuda rows; gpu_growth_pct as rss_growth_pct"),
    "cpu_util_pct": "CPU seconds of the backend's process tree over the timed windows / wall seconds / cores",
    "first_batch_s": "building the pipeline, starting workers and the first batch",
    "epochs": ("passes over the dataset during the run. Unless --real-epochs, the image backends see a small "
               "dataset repeated as one long epoch (as a large dataset is), so loaders are not restarted "
               "every few batches"),
    "input_bound": f"with --step-ms: the consumer waited for input more than {INPUT_BOUND_FRACTION:.0%} of the "
                   "simulated step time",
    "ratios": ("compare=backend: this library's samples/s over the peer's, same scenario, device, workers and "
               "data; compare=data: a backend on a further dataset over the same backend on the first dataset "
               "(e.g. shards / folder); compare=cache: an epoch cache row (mediapipe-cached, mediapipe-cache-fill) "
               "over this library uncached and over each peer, same scenario, device, workers and data; always "
               "rows of the same run"),
    "warnings": (f"scenario -> why its rates are too short to trust: a repetition of fewer than {MIN_REP_BATCHES} "
                 f"batches or {MIN_BATCHES_PER_WORKER} per worker, or under {MIN_TIMED_SECONDS:.0f} s timed over "
                 "the repetitions, in some row"),
    "pipelines": "scenario -> what its samples go through, in one line",
    "conversions": ("with an ffcv row: images/s converting the row's folder, once each in the run, warm page cache, "
                    "the row's workers: mediapipe convert as --as-shards runs it (JPEGs copied), the same with "
                    "--reencode at its max side and quality (the work FFCV's writer does), and FFCV's DatasetWriter"),
    "cold_cache": ("with --cold-cache, the files of the row's dataset were evicted from the page cache "
                   "(posix_fadvise DONTNEED, these files only) before each timed repetition. Files read twice "
                   "within one repetition (a dataset smaller than what a repetition reads) are warm the second "
                   "time, and batches prefetched before the eviction are drained untimed"),
}


@dataclass(frozen=True)
class DataSet:
    """One dataset a scenario runs on: its label in the report and where it is."""

    label: str
    path: Path


@dataclass
class Settings:
    """What to run; the command line fills it (see ``mediapipe bench --help``)."""

    scenarios: list[str] = field(default_factory=lambda: ["image-train", "image-eval"])
    data: list[Path] | Path | None = None  # several: every scenario runs on each, in the same comparison
    dataset: str | None = None
    as_shards: bool = False  # the built-in sample images as a folder and as converted shards
    cold_cache: bool = False  # evict the dataset's files from the page cache before each timed repetition
    backends: list[str] | None = None
    devices: list[str] = field(default_factory=lambda: ["cpu"])
    workers: list[int] = field(default_factory=lambda: [os.cpu_count() or 1])
    batches: int = 10
    repeats: int = 3
    warmup: int = 1
    batch_size: int | None = None
    step_ms: float = 0.0
    count: int | None = None
    seed: int = 0
    cache_dir: Path | None = None
    progress: bool = True
    worker_type: str | None = None
    real_epochs: bool = False  # restart loaders at each pass over a small dataset
    timeout: float = 300.0

    def __post_init__(self) -> None:
        unknown = [s for s in self.scenarios if s not in SCENARIOS]
        if unknown:
            raise ValueError(f"unknown scenario {unknown[0]!r}; known: {', '.join(SCENARIOS)}")
        if self.batches < 1 or self.repeats < 1 or self.warmup < 0:
            raise ValueError("--batches and --repeats must be >= 1, --warmup >= 0")
        if any(w < 0 for w in self.workers) or not self.workers:
            raise ValueError(f"--workers {self.workers}: expected counts >= 0")
        if self.step_ms < 0:
            raise ValueError(f"--step-ms {self.step_ms}: expected >= 0")
        if isinstance(self.data, (str, Path)):
            self.data = [self.data]
        self.data = [Path(p) for p in self.data or []]
        if len({p.resolve() for p in self.data}) < len(self.data):
            raise ValueError(f"--data {' '.join(map(str, self.data))}: a dataset is given twice")
        if self.as_shards:
            if self.data:
                raise ValueError("--as-shards converts the built-in sample images; with --data, convert the "
                                 "folder (mediapipe convert) and pass both: --data FOLDER --data CONVERTED")
            if self.dataset not in (None, "sample-images"):
                raise ValueError(f"--as-shards: only for --dataset sample-images, not {self.dataset}")
            if not any(SCENARIOS[s].kind == "image" for s in self.scenarios):
                raise ValueError("--as-shards: no image scenario to run (the shards hold images)")


def data_labels(paths: list[Path]) -> list[str]:
    """A short label per dataset: its name, or "<layout>:<path>" where two names are equal."""
    names = [p.name or str(p) for p in paths]
    labels = []
    for path, name in zip(paths, names):
        if names.count(name) > 1:
            try:
                from mediapipe.bench.image_data import dataset_layout

                layout = dataset_layout(path)
            except (FileNotFoundError, ImportError):
                layout = "data"
            name = f"{layout}:{path}"
        labels.append(name)
    return labels

def data_for(scenario: Scenario, settings: Settings, prepared: dict[str, Path]) -> list[DataSet]:
    """The datasets ``scenario`` runs on: every ``--data``, or its built-in dataset (made once),
    with ``--as-shards`` also that dataset's converted copy."""
    if settings.data:
        return [DataSet(label, path) for label, path in zip(data_labels(settings.data), settings.data)]
    name = settings.dataset if settings.dataset and datasets.BUILTIN.get(settings.dataset) == scenario.kind \
        else scenario.dataset
    if name not in prepared:
        root = Path(settings.cache_dir) if settings.cache_dir else None
        prepared[name] = datasets.prepare(name, root=root, count=settings.count, seed=settings.seed,
                                          progress=settings.progress)
    if not (settings.as_shards and name == "sample-images"):
        return [DataSet(name, prepared[name])]
    shards = name + datasets.SHARDS_SUFFIX
    if shards not in prepared:
        prepared[shards] = datasets.sample_image_shards(prepared[name], progress=settings.progress)
    return [DataSet("folder", prepared[name]), DataSet("shards", prepared[shards])]


def _settings_dict(settings: Settings) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        return [plain(v) for v in value] if isinstance(value, list) else value

    return {k: plain(v) for k, v in asdict(settings).items()}


def run(settings: Settings) -> dict[str, Any]:
    """Run the benchmark; return the report (machine, settings, datasets, results, ratios)."""
    started = time.perf_counter()
    machine = machine_info()
    cores = machine.get("cores_usable") or machine.get("cores")
    prepared: dict[str, Path] = {}
    data_info: dict[str, dict[str, dict[str, Any]]] = {}  # scenario -> data label -> describe()
    data_sets: dict[str, dict[str, DataSet]] = {}  # scenario -> data label -> dataset
    results: list[Result] = []
    groups: list[tuple[Scenario, int, list[Result]]] = []
    for name in settings.scenarios:
        scenario = SCENARIOS[name]
        try:
            sets = data_for(scenario, settings, prepared)
        except Exception as err:  # noqa: BLE001 - a dataset that cannot be made fails its rows, not the run
            sets = [DataSet(settings.dataset or scenario.dataset, Path("?"))]
            data_info[name] = {sets[0].label: {"error": f"{type(err).__name__}: {err}"}}
        else:
            data_info[name] = {}
            for ds in sets:
                try:
                    data_info[name][ds.label] = datasets.describe(ds.path, scenario.kind)
                    if scenario.kind == "audio":  # the padding budget, for this run's epoch
                        from mediapipe.bench.audio import padding_fraction

                        data_info[name][ds.label]["padding"] = padding_fraction(
                            ds.path, batches=settings.warmup + settings.repeats * settings.batches)
                except Exception as err:  # noqa: BLE001 - as above, for this dataset's rows only
                    data_info[name][ds.label] = {"path": str(ds.path), "error": f"{type(err).__name__}: {err}"}
        data_sets[name] = {ds.label: ds for ds in sets}
        for workers in settings.workers:
            rows = []
            for backend in settings.backends or scenario.backends:
                for device in settings.devices:
                    if not settings.backends and (scenario.kind, backend) in GPU_ONLY and device != "cuda":
                        continue  # a GPU peer is a row of the cuda runs only, unless asked for by name
                    for ds in sets:
                        row = Result(scenario=name, backend=backend, device=device, workers=workers, data=ds.label,
                                     unit=unit_of(scenario, backend),
                                     batch_size=settings.batch_size or scenario.batch_size,
                                     step_ms=settings.step_ms or None)
                        row.error = data_info[name][ds.label].get("error") or why_not(scenario, backend, device)
                        rows.append(row)
            groups.append((scenario, workers, rows))
            results.extend(rows)
    # with a live ffcv row: its .beton written before any timed row, and conversion times beside ours
    conversions = bench_conversions([(SCENARIOS[r.scenario], r) for r in results if r.error is None], data_sets,
                                    settings.progress)
    evict: dict[tuple[str, str], list[Path]] = {}  # (scenario, data label) -> files, with --cold-cache
    if settings.cold_cache:
        for name, sets in data_sets.items():
            for label, ds in sets.items():
                if any(r.scenario == name and r.data == label and r.error is None for r in results):
                    evict[name, label] = datasets.data_files(ds.path)
                    data_info[name][label]["evicted_files"] = len(evict[name, label])
    steps = sum((1 + settings.repeats) * sum(r.error is None for r in rows) for _, _, rows in groups)
    live = [(scenario, r) for scenario, _, rows in groups for r in rows if r.error is None]
    set_preload({s.kind for s, _ in live}, {r.backend for _, r in live})
    bar = make_progress(steps, "steps", "bench", settings.progress)
    try:
        for scenario, workers, rows in groups:
            live = [r for r in rows if r.error is None]
            if live:
                _run_group(scenario, workers, live, data_sets[scenario.name], settings, bar,
                           data_info[scenario.name], cores, evict)
    finally:
        bar.close()
    ceiling_fractions(results)
    report = {
        "version": RESULT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine,
        "settings": _settings_dict(settings),
        "datasets": {name: next(iter(infos.values())) for name, infos in data_info.items()},  # the first dataset
        "data": data_info,  # scenario -> data label -> the dataset's description
        "pipelines": {name: SCENARIOS[name].description for name in settings.scenarios},  # each in one line
        "results": [r.as_dict() for r in results],
        "ratios": ratio_rows(results, OURS),
        "conversions": conversions,
        "notes": NOTES,
        "elapsed_s": time.perf_counter() - started,
    }
    report["warnings"] = short_run_warnings(report)  # scenario -> why its rates are too short to trust
    return report


SETTLE_POLL_SECONDS = 0.1
SETTLE_MAX_SECONDS = 10.0


def settle(pid: int, max_seconds: float = SETTLE_MAX_SECONDS) -> float:
    """Wait until the process tree of ``pid`` is idle: at most two clock ticks (20 ms) of CPU in a
    poll of 0.1 s, or ``max_seconds``; returns the seconds waited. A backend's loader keeps
    working after its last timed batch until its prefetch is full: without this wait, that
    work competes with the next backend's timed repetition (a deeper prefetch, more so)."""
    t0 = time.perf_counter()
    last = tree_cpu_seconds(pid)
    while last is not None and time.perf_counter() - t0 < max_seconds:
        time.sleep(SETTLE_POLL_SECONDS)
        now = tree_cpu_seconds(pid)
        if now is None or now - last <= 0.021:
            break
        last = now
    return time.perf_counter() - t0


def _when(err: BaseException, where: str) -> str:
    """The row's reason: a backend that says it is not available (NotImplementedError("not
    available: ...")) is reported as such, not as a failure."""
    text = str(err)
    return text if text.startswith(("not available", "not installed", "not applicable")) else f"{where}: {text}"


def _run_group(scenario: Scenario, workers: int, rows: list[Result], data: dict[str, DataSet], settings: Settings,
               bar: Any, data_info: dict[str, dict[str, Any]], cores: int | None,
               evict: dict[tuple[str, str], list[Path]]) -> None:
    """Every (backend, dataset) row of one (scenario, workers) comparison, alive together, alternated."""
    # batches a stream must be able to give: generous, since drains depend on each backend's prefetch
    max_batches = 2 + settings.warmup + settings.repeats * (settings.batches + 4 * max(1, workers) + 2)
    procs: dict[int, BackendProcess] = {}
    reps: dict[int, list[Rep]] = {id(r): [] for r in rows}
    drains: dict[int, int] = {}
    delivered: dict[int, int] = {}

    def fail(row: Result, reason: str, ticks: int) -> None:
        row.error = reason
        proc = procs.pop(id(row), None)
        if proc is not None:
            proc.kill()
            proc.close()
        bar.update(ticks)

    try:
        for row in rows:  # start every process first: their imports overlap
            procs[id(row)] = BackendProcess(f"{scenario.name}/{row.backend}/{row.device}/w{workers}/{row.data}")
            spec = {"scenario": scenario.name, "backend": row.backend, "device": row.device, "workers": workers,
                    "batch_size": row.batch_size, "data": str(data[row.data].path),
                    "options": {"max_batches": max_batches, "worker_type": settings.worker_type,
                                "repeat": not settings.real_epochs}}
            try:
                procs[id(row)].send("open", spec=spec)
            except BackendError as err:
                fail(row, str(err), 1 + settings.repeats)
        for row in rows:
            if id(row) not in procs:
                continue
            try:
                drains[id(row)] = procs[id(row)].receive(settings.timeout)["buffered"]
            except BackendError as err:
                fail(row, str(err), 1 + settings.repeats)
        for row in rows:
            if id(row) not in procs:
                continue
            bar.desc = f"bench {scenario.name} {row.backend}/{row.device} w{workers} warm-up"
            try:
                reply = procs[id(row)].call("warmup", timeout=settings.timeout, sample_rss=True,
                                            batches=settings.warmup)
                row.first_batch_s = reply["first_batch_s"]
                settle(procs[id(row)].pid)
                bar.update(1)
            except BackendError as err:
                fail(row, _when(err, "failed in warm-up"), 1 + settings.repeats)
        for repeat in range(settings.repeats):
            order = rows if repeat % 2 == 0 else rows[::-1]
            for row in order:
                proc = procs.get(id(row))
                if proc is None:
                    continue
                bar.desc = f"bench {scenario.name} {row.backend}/{row.device} w{workers} {repeat + 1}/{settings.repeats}"
                files = evict.get((scenario.name, row.data))
                if files is not None:  # before the call: the drain of prefetched batches is not timed
                    from mediapipe.dataset.measure import evict_from_page_cache  # not before: it needs tqdm

                    evict_from_page_cache(files)
                try:
                    reply = proc.call("rep", timeout=settings.timeout, sample_rss=True, batches=settings.batches,
                                      drain=drains[id(row)], step_ms=settings.step_ms)
                except BackendError as err:
                    fail(row, _when(err, f"failed in repetition {repeat + 1}"), settings.repeats - repeat)
                    continue
                rep = Rep(**reply["rep"])
                rep.peak_rss_mb = max(proc.peak_rss_mb or 0.0, rep.end_rss_mb or 0.0) or None
                reps[id(row)].append(rep)
                delivered[id(row)] = reply["delivered"]
                settle(proc.pid)
                bar.update(1)
    except BaseException:  # interrupted (Ctrl-C) or a bug: stop the backends now, do not wait for them
        for proc in procs.values():
            proc.kill()
            proc.close()
        raise
    else:
        for proc in procs.values():
            proc.close()
    for row in rows:
        if row.error is None:
            dataset = dict(data_info[row.data])
            per_epoch = (dataset.get("samples") or 0) // (row.batch_size or 1)
            if not scenario.whole_files:
                dataset.pop("mean_bytes", None)  # a clip reads part of a file: no honest MB/s from file sizes
            summarise(row, reps[id(row)], dataset=dataset, cores=cores, frames_per_sample=scenario.frames_per_sample)
            if per_epoch and scenario.fixed_batches:
                row.epochs = delivered.get(id(row), 0) / per_epoch
