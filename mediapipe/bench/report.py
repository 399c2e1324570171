"""The report in four forms: a terminal table, JSON, Markdown and a PNG plot.

All four are made from the plain-data report that `mediapipe.bench.harness.run` returns, so
a saved ``--json`` file can be rendered again later (`render_table(json.load(f))`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

STAGE_COLUMNS = ("read", "decode", "sample_ops", "collate", "worker_batch_ops", "wait", "host_to_device",
                 "device_ops", "step", "other")


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value)


def _rate(row: dict[str, Any]) -> str:
    if row.get("samples_per_s") is None:
        return "-"
    return f"{row['samples_per_s']:.0f} ({row['samples_per_s_min']:.0f}-{row['samples_per_s_max']:.0f})"


def _secondary(row: dict[str, Any]) -> str:
    for key, fmt in (("decoded_mpix_per_s", "{:.0f} MP/s"), ("frames_per_s", "{:.0f} frames/s"),
                     ("audio_s_per_s", "{:.0f} audio s/s")):
        if row.get(key) is not None:
            return fmt.format(row[key])
    return "-"


def _ratio_of(report: dict[str, Any], row: dict[str, Any]) -> str:
    for r in report.get("ratios", []):
        if (r["scenario"], r["device"], r["workers"], r["peer"]) == (row["scenario"], row["device"], row["workers"],
                                                                     row["backend"]):
            return f"{r['ratio']:.2f}x"
    return ""


def _input_bound(row: dict[str, Any]) -> str:
    """yes/no, with the consumer's wait as a share of the simulated step time."""
    if row.get("input_bound") is None:
        return "-"
    step = (row.get("stages") or {}).get("step") or 0.0
    share = f" ({100 * row['wait_s'] / step:.0f}% wait)" if step and row.get("wait_s") is not None else ""
    return ("yes" if row["input_bound"] else "no") + share


# (header, cell) for the main table
COLUMNS: list[tuple[str, Callable[[dict[str, Any], dict[str, Any]], str]]] = [
    ("backend", lambda rep, r: r["backend"]),
    ("device", lambda rep, r: r["device"]),
    ("workers", lambda rep, r: str(r["workers"])),
    ("samples/s (min-max)", lambda rep, r: _rate(r)),
    ("MB/s", lambda rep, r: _num(r.get("input_mb_per_s"))),
    ("decoded", lambda rep, r: _secondary(r)),
    ("1st batch", lambda rep, r: _num(r.get("first_batch_s"), "{:.2f} s")),
    ("CPU", lambda rep, r: _num(r.get("cpu_util_pct"), "{:.0f}%")),
    ("peak RSS", lambda rep, r: _num(r.get("peak_rss_mb"), "{:.0f} MB")),
    ("RSS growth", lambda rep, r: _num(r.get("rss_growth_pct"), "{:+.1f}%")),
    ("private", lambda rep, r: _num((r.get("uss_mb_by_rep") or [None])[-1], "{:.0f} MB")),
    ("input-bound", lambda rep, r: _input_bound(r)),
    ("mediapipe/peer", lambda rep, r: _ratio_of(rep, r)),
]


def _scenario_header(report: dict[str, Any], scenario: str) -> str:
    info = report.get("datasets", {}).get(scenario, {})
    settings = report.get("settings", {})
    parts = [scenario]
    if info.get("samples") is not None:
        parts.append(f"{info['samples']} samples in {info.get('path', '?')}")
    if info.get("mean_bytes"):
        parts.append(f"{info['mean_bytes'] / 1e3:.0f} KB mean")
    if info.get("mean_megapixels"):
        parts.append(f"{info['mean_megapixels']:.2f} MP mean")
    parts.append(f"{settings.get('repeats', '?')} x {settings.get('batches', '?')} batches")
    return ", ".join(parts)


def _grid(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    return lines


def _scenarios(report: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for r in report["results"]:
        if r["scenario"] not in seen:
            seen.append(r["scenario"])
    return seen


def _stage_rows(report: dict[str, Any], scenario: str) -> list[list[str]]:
    rows = []
    for r in report["results"]:
        if r["scenario"] == scenario and r.get("error") is None and r.get("stages"):
            st = r["stages"]
            rows.append([r["backend"], r["device"], str(r["workers"]),
                         *(_num(st.get(s), "{:.2f}") if s in st else "-" for s in STAGE_COLUMNS),
                         _num(st.get("total"), "{:.2f}")])
    return rows


def render_table(report: dict[str, Any]) -> str:
    """The terminal report: per scenario, throughput and resources, then stage seconds,
    errors with their reasons, and the ratio of this library to each peer."""
    out: list[str] = []
    machine = report.get("machine", {})
    versions = machine.get("versions", {})
    out.append(f"machine: {machine.get('cores', '?')} cores ({machine.get('cpu', '?')}), "
               f"torch {versions.get('torch', '-')}, torchvision {versions.get('torchvision', '-')}, "
               f"DALI {versions.get('nvidia-dali-cuda130') or versions.get('nvidia-dali-cuda120') or '-'}, "
               f"CUDA {'yes: ' + machine['gpu'] if machine.get('gpu') else 'no'}")
    for scenario in _scenarios(report):
        rows = [r for r in report["results"] if r["scenario"] == scenario]
        out.append("")
        out.append(_scenario_header(report, scenario))
        ok = [r for r in rows if r.get("error") is None]
        if ok:
            out.extend(_grid([h for h, _ in COLUMNS], [[cell(report, r) for _, cell in COLUMNS] for r in ok]))
        else:
            out.append("no backend ran:")
        stage_rows = _stage_rows(report, scenario)
        if stage_rows:
            out.append("stage seconds (worker stages summed over workers; consumer stages add up to total):")
            out.extend("  " + line for line in _grid(["backend", "device", "workers", *STAGE_COLUMNS, "total"],
                                                      stage_rows))
        for r in rows:
            if r.get("error") is not None:
                out.append(f"  {r['backend']} ({r['device']}, {r['workers']} workers): {r['error']}")
    ratios = report.get("ratios", [])
    if ratios:
        out.append("")
        out.append("mediapipe / peer, same run:")
        for r in ratios:
            out.append(f"  {r['scenario']:<12} {r['device']:<4} w{r['workers']:<3} vs {r['peer']:<15} "
                       f"{r['ratio']:.2f}x ({r['metric']})")
    if report.get("elapsed_s") is not None:
        out.append("")
        out.append(f"finished in {report['elapsed_s']:.0f} s")
    return "\n".join(out)


def render_markdown(report: dict[str, Any]) -> str:
    """The same tables as GitHub Markdown."""
    def table(headers: list[str], rows: list[list[str]]) -> list[str]:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines.extend("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows)
        return lines

    machine = report.get("machine", {})
    out = ["# mediapipe bench", "",
           f"Machine: {machine.get('cores', '?')} cores, {machine.get('cpu', '?')}; "
           f"Python {machine.get('python', '?')}; "
           + ", ".join(f"{k} {v}" for k, v in machine.get("versions", {}).items()), ""]
    for scenario in _scenarios(report):
        rows = [r for r in report["results"] if r["scenario"] == scenario]
        out += [f"## {scenario}", "", _scenario_header(report, scenario), ""]
        ok = [r for r in rows if r.get("error") is None]
        if ok:
            out += table([h for h, _ in COLUMNS], [[cell(report, r) for _, cell in COLUMNS] for r in ok])
        stage_rows = _stage_rows(report, scenario)
        if stage_rows:
            out += ["", "Stage seconds (worker stages summed over workers):", ""]
            out += table(["backend", "device", "workers", *STAGE_COLUMNS, "total"], stage_rows)
        errors = [r for r in rows if r.get("error") is not None]
        if errors:
            out += ["", "Not run:", ""]
            out += [f"- {r['backend']} ({r['device']}, {r['workers']} workers): {r['error']}" for r in errors]
        out.append("")
    if report.get("ratios"):
        out += ["## mediapipe / peer", ""]
        out += table(["scenario", "device", "workers", "peer", "ratio"],
                     [[r["scenario"], r["device"], str(r["workers"]), r["peer"], f"{r['ratio']:.2f}x"]
                      for r in report["ratios"]])
        out.append("")
    return "\n".join(out)


def write_json(report: dict[str, Any], path: Path) -> None:
    Path(path).write_text(json.dumps(report, indent=2, default=str) + "\n")


def write_markdown(report: dict[str, Any], path: Path) -> None:
    Path(path).write_text(render_markdown(report))


def write_plot(report: dict[str, Any], path: Path) -> None:
    """Throughput per backend (bars, at the largest worker count) and samples/s against
    workers (the scaling curve), one column per scenario."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = _scenarios(report)
    fig, axes = plt.subplots(2, max(1, len(scenarios)), figsize=(5.5 * max(1, len(scenarios)), 8), squeeze=False)
    for col, scenario in enumerate(scenarios):
        ok = [r for r in report["results"] if r["scenario"] == scenario and r.get("samples_per_s")]
        bars, scale = axes[0][col], axes[1][col]
        if ok:
            top = max(r["workers"] for r in ok)
            best = [r for r in ok if r["workers"] == top]
            labels = [f"{r['backend']}\n{r['device']}" for r in best]
            values = [r["samples_per_s"] for r in best]
            errors = [[v - r["samples_per_s_min"] for v, r in zip(values, best)],
                      [r["samples_per_s_max"] - v for v, r in zip(values, best)]]
            colours = ["tab:blue" if r["backend"] == "mediapipe" else "tab:gray" for r in best]
            bars.bar(labels, values, yerr=errors, color=colours, capsize=4)
            bars.set_title(f"{scenario}, {top} workers")
            bars.set_ylabel(f"{best[0]['unit']}/s (median, min-max)")
            bars.tick_params(axis="x", labelsize=8)
            lines: dict[tuple[str, str], list[tuple[int, float]]] = {}
            for r in ok:
                lines.setdefault((r["backend"], r["device"]), []).append((r["workers"], r["samples_per_s"]))
            for (backend, device), points in sorted(lines.items()):
                points.sort()
                scale.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{backend} {device}")
            scale.set_xticks(sorted({r["workers"] for r in ok}))
            scale.set_ylim(bottom=0)
            scale.set_xlabel("workers")
            scale.set_ylabel(f"{ok[0]['unit']}/s")
            scale.set_title(f"{scenario}: scaling")
            scale.legend(fontsize=8)
            if len({r["workers"] for r in ok}) == 1:
                scale.text(0.5, 0.1, "one worker count: --workers 1,2,4 draws the curve", ha="center",
                           transform=scale.transAxes, fontsize=8)
        else:
            bars.text(0.5, 0.5, "no backend ran", ha="center", va="center")
            scale.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
