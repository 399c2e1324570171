"""``mediapipe selfcheck``: the GPU path checked on one machine in one command, written as JSON.

In order: the GPU checks (`mediapipe.checks.gpu`), then the
benchmark in the same run: image-train and image-eval on the device against torchvision's
GPU pipeline (``decode_jpeg(device="cuda")`` + transforms v2 on the GPU) and DALI's GPU
pipeline where DALI is installed, video-clips on the device, and image-train on the CPU at
1, 2, 4, 8 and 16 workers against DALI with as many threads (the scaling curve). GPU memory
is read before and after, and per repetition in each backend. The issue's targets are
reported beside the figures, never asserted: the exit status says whether the checks passed.

It needs torch, torchvision, torchaudio, PyAV, nvImageCodec, simplejpeg, soxr and this
library (DALI only for its rows). ``--quick`` runs every step at the smallest sizes: the test
suite runs it so on the CPU, so that this code runs in CI.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from mediapipe.checks import gpu as gpu_checks

SELFCHECK_VERSION = 1
SCALING_WORKERS = (1, 2, 4, 8, 16)
# targets of issue 13 on a GPU machine: mediapipe's image-train on the GPU over each peer's
TARGETS = {"dali": 1.0, "torchvision-gpu": 1.5}


@dataclass
class Plan:
    """The sizes of a self-check run (full, or ``quick`` for CI)."""

    device: str
    quick: bool = False
    workers: int = 8  # loader workers (DALI threads) of the device rows
    scaling: tuple[int, ...] = SCALING_WORKERS
    images: int = 1000  # the built-in sample images
    batch_size: int = 256  # of the device rows (the CPU scaling keeps the scenario's)
    batches: int = 10
    repeats: int = 2
    timeout: float = 120.0  # per backend step
    cache_dir: Path | None = None
    skip: set[str] = field(default_factory=set)  # "checks", "bench", "video", "scaling"

    @classmethod
    def make(cls, device: str, quick: bool, workers: int | None = None, cache_dir: Path | None = None,
             skip: set[str] | None = None) -> Plan:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if quick:
            return cls(device, True, workers or 1, (1, 2), 16, 8, 1, 1, 120.0, cache_dir, set(skip or ()))
        return cls(device, False, workers or min(16, cores), SCALING_WORKERS, 1000, 256, 10, 2, 120.0, cache_dir,
                   set(skip or ()))


def gpu_memory(device: str) -> dict[str, Any] | None:
    """This process's allocated and reserved GPU memory and the whole GPU's use, in MB; None off CUDA."""
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    mb = 2**20
    return {"allocated_mb": round(torch.cuda.memory_allocated() / mb, 1),
            "reserved_mb": round(torch.cuda.memory_reserved() / mb, 1),
            "device_used_mb": round((total - free) / mb, 1), "device_total_mb": round(total / mb, 1)}


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


NEEDS = {"av": "av", "nvidia.nvimgcodec": "nvidia-nvimgcodec-cu13", "simplejpeg": "simplejpeg", "soxr": "soxr"}


def missing_needs() -> list[str]:
    """The pip names of the self-check's needs that fail to import here (absent or broken)."""
    import importlib

    missing = []
    for module, package in NEEDS.items():
        try:
            importlib.import_module(module)
        except Exception:  # not installed, or its native libraries fail to load
            missing.append(package)
    return missing


def _bench(plan: Plan, scenarios: list[str], device: str, backends: list[str], workers: list[int],
           data: Path | None = None, batch_size: int | None = None) -> dict[str, Any]:
    from mediapipe.bench.harness import Settings, run

    settings = Settings(scenarios=scenarios, data=data, backends=backends, devices=[device], workers=workers,
                        batches=plan.batches, repeats=plan.repeats, warmup=0 if plan.quick else 1,
                        batch_size=batch_size, count=plan.images, cache_dir=plan.cache_dir, progress=False,
                        timeout=plan.timeout)
    return run(settings)


def targets(bench: dict[str, Any], checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets next to this run's figures: met or not (None where not run)."""
    out = []
    for row in bench.get("ratios", []):
        if row["scenario"] == "image-train" and row["device"] == "cuda" and row["peer"] in TARGETS:
            out.append({"what": f"image-train on cuda, mediapipe / {row['peer']}", "value": round(row["ratio"], 3),
                        "target": TARGETS[row["peer"]], "met": row["ratio"] >= TARGETS[row["peer"]]})
    for check in checks:
        facts = check.get("facts") or {}
        if check["name"] == "batch_stage_speed" and facts.get("target_images_per_s"):
            out.append({"what": "batch-stage ops alone at 224x224, images/s", "value": facts["images_per_s"],
                        "target": facts["target_images_per_s"], "met": facts["meets_target"]})
    return out


def run(plan: Plan, say: Any = print) -> dict[str, Any]:
    """Every step of the self-check; the report (what ``--json`` writes)."""
    from mediapipe.bench.core import machine_info

    started = time.perf_counter()
    device = torch.device(plan.device)
    work = Path(plan.cache_dir) if plan.cache_dir else gpu_checks_cache()
    report: dict[str, Any] = {"selfcheck": SELFCHECK_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "device": plan.device, "plan": {k: sorted(v) if isinstance(v, set) else
                                                              str(v) if isinstance(v, Path) else v
                                                              for k, v in asdict(plan).items()},
                              "machine": machine_info(), "gpu_memory": {"before": gpu_memory(plan.device)}}
    folder = gpu_checks.sample_folder(work, plan.quick)
    checks = []
    if "checks" not in plan.skip:
        for name in gpu_checks.CHECKS:
            result = gpu_checks.run_check(name, work, device, quick=plan.quick)
            say(f"check {name}: {'ok' if result.ok else 'FAILED'} ({result.seconds:.1f} s)"
                + (f" {result.error}" if result.error else ""))
            checks.append(asdict(result))
    report["checks"] = checks
    report["gpu_memory"]["after_checks"] = gpu_memory(plan.device)
    dali = ["dali"] if _installed("nvidia.dali") else []
    bench: dict[str, Any] = {}
    on_gpu = plan.device.startswith("cuda")
    if "bench" not in plan.skip:
        peers = ["torchvision-gpu"] if on_gpu else ["torchvision"]
        peers = [p for p in peers if _installed("torchvision")]
        scenarios = ["image-train"] if plan.quick else ["image-train", "image-eval"]
        bench["device"] = _bench(plan, scenarios, "cuda" if on_gpu else "cpu",
                                 ["mediapipe", *peers, *dali], [plan.workers],
                                 data=folder if plan.quick else None, batch_size=plan.batch_size)
    if "video" not in plan.skip:
        clips = gpu_checks.sample_clips(work) if plan.quick else None
        bench["video"] = _bench(plan, ["video-clips"], "cuda" if on_gpu else "cpu", ["mediapipe", "pyav", *dali],
                                [plan.workers], data=clips, batch_size=2 if plan.quick else None)
    if "scaling" not in plan.skip:
        bench["cpu_scaling"] = _bench(plan, ["image-train"], "cpu", ["mediapipe", *dali], list(plan.scaling),
                                      data=folder if plan.quick else None,
                                      batch_size=plan.batch_size if plan.quick else None)  # the scenario's 64
    report["bench"] = bench
    report["gpu_memory"]["after"] = gpu_memory(plan.device)
    report["gpu_memory"]["by_backend"] = [
        {k: r[k] for k in ("scenario", "backend", "device", "workers", "gpu_mb_by_rep", "gpu_growth_pct")}
        for part in bench.values() for r in part["results"] if r.get("gpu_mb_by_rep")]
    report["targets"] = targets(bench.get("device", {}), checks)
    report["ok"] = all(c["ok"] for c in checks)
    report["elapsed_s"] = time.perf_counter() - started
    return report


def gpu_checks_cache() -> Path:
    from mediapipe.bench.datasets import cache_dir

    return cache_dir() / "selfcheck"


def render(report: dict[str, Any]) -> str:
    """The terminal summary: checks, the benchmark's tables, memory and targets."""
    from mediapipe.bench.report import render_table

    lines = [f"mediapipe selfcheck on {report['device']} ({report['machine'].get('gpu') or report['machine'].get('cpu')})"]
    for c in report["checks"]:
        lines.append(f"  {'ok    ' if c['ok'] else 'FAILED'} {c['name']:<22} {c['seconds']:6.1f} s  "
                     + (c["error"] or json.dumps(c["facts"], default=str)))
    for name, part in report["bench"].items():
        lines += ["", f"== {name} ==", render_table(part)]
    memory = report["gpu_memory"]
    if memory.get("before") is not None:
        lines += ["", f"GPU memory before: {memory['before']}", f"GPU memory after: {memory['after']}"]
        for row in memory["by_backend"]:
            lines.append(f"  {row['scenario']} {row['backend']} w{row['workers']}: {row['gpu_mb_by_rep']} MB "
                         f"(growth {row['gpu_growth_pct']}%)")
    for t in report["targets"]:
        lines.append(f"target {t['what']}: {t['value']} (target {t['target']}): {'met' if t['met'] else 'NOT met'}")
    lines.append(f"\nchecks {'passed' if report['ok'] else 'FAILED'}; finished in {report['elapsed_s']:.0f} s")
    return "\n".join(lines)
