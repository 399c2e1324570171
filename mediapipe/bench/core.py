"""What the harness measures and how: process-tree RSS and CPU from /proc, the per-backend
result row, and the summary of timed repetitions (median, spread, growth, input-boundness).

psutil is not a dependency: RSS and CPU times come from ``/proc/<pid>/status`` and
``/proc/<pid>/stat`` for a process and every descendant, because loader workers (processes)
hold much of a loader's memory and do most of its work. Off Linux these read as None.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

RESULT_VERSION = 1
INPUT_BOUND_FRACTION = 0.05  # input-bound: the consumer waited more than 5% of the simulated step time
STAGE_SLACK = 0.15  # consumer stages + harness overhead add up to the timed total within 15% (+ 50 ms)
STAGE_SLACK_SECONDS = 0.05
OP_PREFIX = "op:"  # a batch-stage op's seconds in the loader's stats
WORKER_STAGES = ("read", "cache_read", "decode", "cache_write", "sample_ops", "collate",
                 "worker_batch_ops")  # seconds summed over workers; cache_*: with an epoch cache
CONSUMER_STAGES = ("wait", "host_to_device", "device_ops", "step", "other")  # wall seconds, add up to total
LOADER_STAGE_NAMES = {"transfer": "host_to_device"}  # Loader.stats -> report
DECODE_PARTS = ("decode_open", "decode_index", "decode_seek", "decode_lead_in", "decode_useful", "decode_convert",
                "decode_resize")  # video, inside decode
CLIP_UNITS = ("clips", "videos")  # video scenarios whose samples are clips, or videos of several clips
PART_STAGES = ("device_decode", *DECODE_PARTS)  # reported, but already inside device_ops (decode for DECODE_PARTS)
# a row too short to trust: the loaders' start, their prefetch drained before a window and the batches in
# flight when it ends are of the order of a batch per worker, and weigh on a rate measured over few batches
MIN_REP_BATCHES = 10  # batches in each timed repetition
MIN_BATCHES_PER_WORKER = 2  # and at least this many per loader worker (DALI thread)
MIN_TIMED_SECONDS = 1.0  # timed seconds over all repetitions of a row

_PROC = Path("/proc")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# -- the process tree -------------------------------------------------------------------
def _children_map() -> dict[int, list[int]]:
    """ppid -> pids, for every process visible in /proc (one pass)."""
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants that are alive now (empty off Linux)."""
    if not (_PROC / str(root)).exists():
        return []
    children, out, todo = _children_map(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def rss_mb(pid: int) -> float | None:
    """Resident set size of one process (VmRSS), in MiB; None when unreadable."""
    try:
        for line in (_PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None  # a zombie has no VmRSS


def tree_rss_mb(root: int) -> float | None:
    """Sum of VmRSS over the tree, in MiB (shared pages count once per process, as `top` shows)."""
    values = [v for v in (rss_mb(p) for p in tree_pids(root)) if v is not None]
    return sum(values) if values else None


def rollup_mb(pid: int, fields: tuple[str, ...]) -> float | None:
    """The sum of ``fields`` ("Pss:", "Private_Clean:"...) of one process's smaps_rollup, in MiB. Costs a
    few milliseconds (the kernel walks the mappings): read between timed windows only."""
    try:
        text = (_PROC / str(pid) / "smaps_rollup").read_text()
    except OSError:
        return None
    return sum(int(line.split()[1]) for line in text.splitlines() if line.startswith(fields)) / 1024


def uss_mb(pid: int) -> float | None:
    """Unique set size of one process (private clean + dirty pages), in MiB: what it alone
    holds, so pages a forked worker shares with its parent are not counted twice."""
    return rollup_mb(pid, ("Private_Clean:", "Private_Dirty:"))


def tree_uss_mb(root: int) -> float | None:
    """Sum of the unique set sizes over the tree, in MiB (None without smaps_rollup)."""
    values = [v for v in (uss_mb(p) for p in tree_pids(root)) if v is not None]
    return sum(values) if values else None


def tree_pss_mb(root: int) -> float | None:
    """Sum of the proportional set sizes over the tree, in MiB: each shared page divided among the
    processes that map it (None without smaps_rollup)."""
    values = [v for v in (rollup_mb(p, ("Pss:",)) for p in tree_pids(root)) if v is not None]
    return sum(values) if values else None


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and of its children that it has reaped."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
    return (utime + stime + cutime + cstime) / _CLOCK_TICKS


def tree_cpu_seconds(root: int) -> float | None:
    """CPU seconds used so far by the tree: live processes plus the children they reaped."""
    if not (_PROC / str(root)).exists():
        if root == os.getpid():  # no /proc: this process and its reaped children only
            t = os.times()
            return t.user + t.system + t.children_user + t.children_system
        return None
    return sum(cpu_seconds(p) for p in tree_pids(root))


# -- the machine -------------------------------------------------------------------------
VERSIONED = ("mediapipe-loader", "torch", "torchvision", "torchaudio", "nvidia-dali-cuda130", "nvidia-dali-cuda120",
             "av", "numpy", "pillow", "simplejpeg", "matplotlib")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """Cores, CPU, memory, GPU and the versions of everything the backends use."""
    versions = {}
    for dist in VERSIONED:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    info: dict[str, Any] = {
        "cores": os.cpu_count(), "cores_usable": affinity, "cpu": _cpu_model(),
        "platform": platform.platform(), "python": sys.version.split()[0], "versions": versions,
    }
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        info["memory_gb"] = round(pages * size / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import torch

        info["cuda"] = torch.cuda.is_available()
        if info["cuda"]:
            info["gpu"] = torch.cuda.get_device_name(0)
    except Exception as err:  # noqa: BLE001 - a broken torch install is a fact to report
        info["cuda"] = f"unknown: {err}"
    return info


# -- one timed repetition and the summary row ----------------------------------------------
@dataclass
class Rep:
    """One timed window of one backend: N batches, consecutive, after a drain of its buffer."""

    batches: int
    samples: int
    seconds: float
    units: float | None = None  # audio seconds, or frames; None when the sample count says it all
    wait: float = 0.0  # consumer seconds inside next(): waiting for, and finishing, the next batch
    step: float = 0.0  # simulated training-step seconds (--step-ms)
    cpu_seconds: float | None = None
    stages: dict[str, float] = field(default_factory=dict)  # stage seconds in this window (this library)
    peak_rss_mb: float | None = None
    end_rss_mb: float | None = None
    end_uss_mb: float | None = None
    end_pss_mb: float | None = None
    end_gpu_mb: float | None = None  # torch's GPU memory in use (allocated) at the end; None without CUDA

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Result:
    """One row of the report: a (scenario, backend, device, workers, data) measurement, or why none."""

    scenario: str
    backend: str
    device: str
    workers: int
    data: str | None = None  # the dataset's label (see `mediapipe.bench.harness.DataSet`); None: the only one
    unit: str = "samples"
    batch_size: int | None = None
    samples_per_s: float | None = None  # median over repetitions
    samples_per_s_min: float | None = None
    samples_per_s_max: float | None = None
    samples_per_s_reps: list[float] = field(default_factory=list)
    input_mb_per_s: float | None = None
    decoded_mpix_per_s: float | None = None
    frames_per_s: float | None = None  # video: useful frames (clips x clip_len) for clips, decoded for ceilings
    useful_frames_per_s: float | None = None  # video clips: frames delivered in clips (clips/s x clip_len)
    decoded_frames_per_s: float | None = None  # video: frames the decoder produced (lead-in included)
    ceiling_fraction: float | None = None  # decoded_frames_per_s / the faster sequential ceiling's, same run
    audio_s_per_s: float | None = None
    stages: dict[str, float] = field(default_factory=dict)
    cpu_cores_used: float | None = None
    cpu_util_pct: float | None = None
    first_batch_s: float | None = None
    peak_rss_mb: float | None = None
    rss_mb_by_rep: list[float] = field(default_factory=list)
    rss_growth_pct: float | None = None
    uss_mb_by_rep: list[float] = field(default_factory=list)  # private memory: shared pages not double counted
    uss_growth_pct: float | None = None
    pss_mb_by_rep: list[float] = field(default_factory=list)  # proportional set size of the tree after each repetition
    gpu_mb_by_rep: list[float] = field(default_factory=list)  # torch.cuda.memory_allocated after each repetition
    gpu_growth_pct: float | None = None
    epochs: float | None = None
    step_ms: float | None = None
    wait_s: float | None = None
    input_bound: bool | None = None
    quality: dict[str, Any] | None = None  # ffcv: its output against the full-decode reference (PSNR)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(result: Result, reps: list[Rep], *, dataset: dict[str, Any] | None = None,
              cores: int | None = None, frames_per_sample: int | None = None) -> Result:
    """Fill ``result`` from its timed repetitions: median and spread, rates, stages, RSS, CPU."""
    if not reps:
        return result
    rates = [r.samples_per_s for r in reps]
    median = statistics.median(rates)
    result.samples_per_s, result.samples_per_s_min, result.samples_per_s_max = median, min(rates), max(rates)
    result.samples_per_s_reps = rates
    seconds = sum(r.seconds for r in reps)
    dataset = dataset or {}
    if dataset.get("mean_bytes"):
        result.input_mb_per_s = median * dataset["mean_bytes"] / 1e6
    if dataset.get("mean_megapixels") and result.unit == "images":
        result.decoded_mpix_per_s = median * dataset["mean_megapixels"]
    units = [r.units for r in reps]
    if all(u is not None for u in units):
        per_second = statistics.median(u / r.seconds for u, r in zip(units, reps))
        if result.unit in ("utterances", "audio files"):
            result.audio_s_per_s = per_second
        elif result.unit in CLIP_UNITS:  # a clip runner's units are the frames its decoder produced
            result.decoded_frames_per_s = per_second
        elif result.unit == "frames":
            result.frames_per_s = per_second
    if result.frames_per_s is None and result.unit == "frames":
        result.frames_per_s = median
    if result.unit == "frames":  # a sequential ceiling delivers every frame it decodes
        result.decoded_frames_per_s = result.frames_per_s
    if result.frames_per_s is None and result.unit in CLIP_UNITS and frames_per_sample:
        result.frames_per_s = median * frames_per_sample
    if result.unit in CLIP_UNITS:
        result.useful_frames_per_s = result.frames_per_s
    result.stages = stage_table(reps)
    cpu = [r.cpu_seconds for r in reps]
    if all(c is not None for c in cpu):
        result.cpu_cores_used = sum(cpu) / seconds
        if cores:
            result.cpu_util_pct = 100.0 * result.cpu_cores_used / cores
    peaks = [r.peak_rss_mb for r in reps if r.peak_rss_mb is not None]
    result.peak_rss_mb = max(peaks) if peaks else None
    result.rss_mb_by_rep = [r.end_rss_mb for r in reps if r.end_rss_mb is not None]
    result.rss_growth_pct = growth_pct(result.rss_mb_by_rep)
    result.uss_mb_by_rep = [r.end_uss_mb for r in reps if r.end_uss_mb is not None]
    result.uss_growth_pct = growth_pct(result.uss_mb_by_rep)
    result.pss_mb_by_rep = [r.end_pss_mb for r in reps if r.end_pss_mb is not None]
    result.gpu_mb_by_rep = [r.end_gpu_mb for r in reps if r.end_gpu_mb is not None]
    result.gpu_growth_pct = growth_pct(result.gpu_mb_by_rep)
    result.wait_s = sum(r.wait for r in reps)
    step = sum(r.step for r in reps)
    if result.step_ms:
        result.input_bound = result.wait_s > INPUT_BOUND_FRACTION * step
    return result


def too_short(batches: int, workers: int, seconds: float) -> list[str]:
    """Why a row's timed work is too short to trust (empty when it is not): ``batches`` per
    repetition against `MIN_REP_BATCHES` and `MIN_BATCHES_PER_WORKER`, ``seconds`` timed in all
    against `MIN_TIMED_SECONDS`."""
    reasons = []
    if batches < MIN_REP_BATCHES:
        reasons.append(f"{batches} batches a repetition (fewer than {MIN_REP_BATCHES})")
    elif batches < MIN_BATCHES_PER_WORKER * workers:
        reasons.append(f"{batches} batches a repetition for {workers} workers (fewer than {MIN_BATCHES_PER_WORKER} "
                       "per worker)")
    if seconds < MIN_TIMED_SECONDS:
        reasons.append(f"{seconds:.2f} s timed in all (under {MIN_TIMED_SECONDS:.0f} s)")
    return reasons


def batches_to_trust(batches: int, repeats: int, workers: int, seconds: float) -> int:
    """Batches per repetition that `too_short` would accept for a row that timed ``seconds`` over
    ``repeats`` x ``batches`` batches, rounded up to a multiple of 10."""
    per_batch = seconds / max(1, repeats * batches)
    for_time = MIN_TIMED_SECONDS / (per_batch * repeats) if per_batch > 0 else 0.0
    needed = max(MIN_REP_BATCHES, MIN_BATCHES_PER_WORKER * workers, math.ceil(for_time * 1.2))
    return -(-needed // 10) * 10


def growth_pct(values: list[float]) -> float | None:
    """Growth from the first to the last value, in percent; None with fewer than two values."""
    if len(values) < 2 or not values[0]:
        return None
    return 100.0 * (values[-1] - values[0]) / values[0]


def stage_table(reps: list[Rep]) -> dict[str, float]:
    """Stage seconds over all timed windows. Worker stages (read, decode, sample_ops, collate,
    and worker_batch_ops where the batch stage runs in the workers) are summed over workers; the consumer stages (wait, host_to_device, device_ops, step and
    ``other``, the harness's own time) add up to ``total``, the timed wall seconds. "op:<name>":
    each batch-stage op's part of worker_batch_ops."""
    total = sum(r.seconds for r in reps)
    out: dict[str, float] = {}
    for r in reps:
        for name, value in r.stages.items():
            name = LOADER_STAGE_NAMES.get(name, name)
            if name in WORKER_STAGES or name in PART_STAGES or name in ("host_to_device", "device_ops") \
                    or name.startswith(OP_PREFIX):
                out[name] = out.get(name, 0.0) + value
    out["wait"] = sum(r.stages.get("wait", r.wait) for r in reps)  # the loader's own, where it has one
    out["step"] = sum(r.step for r in reps)
    consumer = sum(out.get(n, 0.0) for n in ("wait", "host_to_device", "device_ops", "step"))
    out["other"] = total - consumer
    out["total"] = total
    return out


def stages_add_up(stages: dict[str, float], slack: float = STAGE_SLACK,
                  slack_seconds: float = STAGE_SLACK_SECONDS) -> bool:
    """True when the measured consumer stages explain the total within the stated slack:
    the harness's unexplained time (``other``) is small and no stage sum exceeds the total."""
    total = stages.get("total", 0.0)
    other = stages.get("other", 0.0)
    return -slack_seconds <= other <= slack * total + slack_seconds


def ceiling_fractions(results: list[Result], ceilings: tuple[str, ...] = ("ceiling", "dav1d")) -> None:
    """Set each video row's ``ceiling_fraction``: its decoded frames/s over the faster of the
    sequential decode ceilings measured in the same run (same scenario, workers and data)."""
    best: dict[tuple, float] = {}
    for r in results:
        if r.error is None and r.backend in ceilings and r.decoded_frames_per_s:
            key = (r.scenario, r.workers, r.data)
            best[key] = max(best.get(key, 0.0), r.decoded_frames_per_s)
    for r in results:
        top = best.get((r.scenario, r.workers, r.data))
        if r.error is None and r.decoded_frames_per_s is not None and top:
            r.ceiling_fraction = r.decoded_frames_per_s / top


def _ratio(mine: Result, peer: Result) -> tuple[float, str] | None:
    """(mine / peer, metric): audio seconds per second where both decode audio (batches that are
    bucketed by duration hold different utterance counts), else samples/s where the units
    agree, else decoded frames/s (clips against a sequential ceiling), else frames/s, else None."""
    if not mine.samples_per_s or not peer.samples_per_s:
        return None
    if mine.audio_s_per_s and peer.audio_s_per_s:
        return mine.audio_s_per_s / peer.audio_s_per_s, "audio s/s"
    if peer.unit == mine.unit:
        return mine.samples_per_s / peer.samples_per_s, f"{mine.unit}/s"
    if mine.decoded_frames_per_s and peer.decoded_frames_per_s:
        return mine.decoded_frames_per_s / peer.decoded_frames_per_s, "decoded frames/s"
    if mine.frames_per_s and peer.frames_per_s:
        return mine.frames_per_s / peer.frames_per_s, "frames/s"
    return None


CACHE_ROWS = ("mediapipe-cached", "mediapipe-cache-fill")  # this library with an epoch cache


def ratio_rows(results: list[Result], ours: str = "mediapipe") -> list[dict[str, Any]]:
    """Ratios of throughput between rows measured in the same run, of two kinds:

    ``compare="backend"``: this library over each peer, same scenario, device, workers and data.
    Rows with different units (clips against a frame-rate ceiling) are compared on frames/s.
    ``compare="data"``: each backend on each further dataset over the same backend on the first
    dataset (``--data folder --data shards``: "mediapipe on shards / mediapipe on folder").
    ``compare="cache"``: an epoch cache row (`CACHE_ROWS`) over this library uncached and over
    every other peer, same scenario, device, workers and data (FFCV's row reads its own file
    written from that data); the cache rows are not peers of the first kind."""
    rows = []
    ok = [r for r in results if r.error is None]
    key = {(r.scenario, r.device, r.workers, r.data): r for r in ok if r.backend == ours}
    cached = [r for r in ok if r.backend in CACHE_ROWS]
    for peer in ok:
        mine = key.get((peer.scenario, peer.device, peer.workers, peer.data))
        if peer.backend in (ours, *CACHE_ROWS) or mine is None or (ratio := _ratio(mine, peer)) is None:
            continue
        rows.append({"compare": "backend", "scenario": peer.scenario, "device": peer.device,
                     "workers": peer.workers, "data": peer.data, "backend": ours, "peer": peer.backend,
                     "peer_data": peer.data, "metric": ratio[1], "ratio": ratio[0]})
    for row in cached:  # an epoch cache row over this library uncached and over every other peer
        for peer in ok:
            same = (peer.scenario, peer.device, peer.workers, peer.data) == (row.scenario, row.device, row.workers,
                                                                              row.data)
            if peer.backend in CACHE_ROWS or not same or (ratio := _ratio(row, peer)) is None:
                continue
            rows.append({"compare": "cache", "scenario": row.scenario, "device": row.device, "workers": row.workers,
                         "data": row.data, "backend": row.backend, "peer": peer.backend, "peer_data": peer.data,
                         "metric": ratio[1], "ratio": ratio[0]})
    labels: dict[str, list[str]] = {}  # scenario -> data labels, in the order given
    for r in results:
        if r.data is not None and r.data not in labels.setdefault(r.scenario, []):
            labels[r.scenario].append(r.data)
    same = {(r.scenario, r.backend, r.device, r.workers, r.data): r for r in ok}
    for r in ok:
        order = labels.get(r.scenario, [])
        if len(order) < 2 or r.data == order[0]:
            continue
        base = same.get((r.scenario, r.backend, r.device, r.workers, order[0]))
        if base is None or (ratio := _ratio(r, base)) is None:
            continue
        rows.append({"compare": "data", "scenario": r.scenario, "device": r.device, "workers": r.workers,
                     "data": r.data, "backend": r.backend, "peer": r.backend, "peer_data": base.data,
                     "metric": ratio[1], "ratio": ratio[0]})
    return rows
