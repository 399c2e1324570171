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

from mediapipe.bench.core import DECODE_PARTS
from mediapipe.bench.legend import BACKENDS, legend_lines

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


def _ratio_of(report: dict[str, Any], row: dict[str, Any], compare: str = "backend") -> str:
    """This row's ratio of one kind: this library over it (``backend``), or it over the same
    backend on the first dataset (``data``)."""
    for r in report.get("ratios", []):
        if r.get("compare", "backend") != compare or r.get("data") != row.get("data"):
            continue
        if (r["scenario"], r["device"], r["workers"], r["peer"]) == (row["scenario"], row["device"], row["workers"],
                                                                     row["backend"]):
            return f"{r['ratio']:.2f}x"
    return ""


def _labels(report: dict[str, Any], scenario: str) -> list[str]:
    """The data labels of a scenario's rows, in the order given (the first is the baseline)."""
    seen: list[str] = []
    for r in report["results"]:
        if r["scenario"] == scenario and r.get("data") is not None and r["data"] not in seen:
            seen.append(r["data"])
    return seen


def _input_bound(row: dict[str, Any]) -> str:
    """yes/no, with the consumer's wait as a share of the simulated step time."""
    if row.get("input_bound") is None:
        return "-"
    step = (row.get("stages") or {}).get("step") or 0.0
    share = f" ({100 * row['wait_s'] / step:.0f}% wait)" if step and row.get("wait_s") is not None else ""
    return ("yes" if row["input_bound"] else "no") + share


Column = tuple[str, Callable[[dict[str, Any], dict[str, Any]], str]]

# (header, cell) for the main table
COLUMNS: list[Column] = [
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


def _fraction(row: dict[str, Any]) -> str:
    """Decoded frames/s as a share of the faster sequential ceiling (video rows)."""
    if row.get("ceiling_fraction") is None:
        return "-"
    return f"{100 * row['ceiling_fraction']:.0f}%"


# video: the "decoded" column becomes the useful and the decoded frame rates, and their share of the ceiling
VIDEO_COLUMNS: list[Column] = [
    ("useful frames/s", lambda rep, r: _num(r.get("useful_frames_per_s"))),
    ("decoded frames/s", lambda rep, r: _num(r.get("decoded_frames_per_s"))),
    ("decoded/ceiling", lambda rep, r: _fraction(r)),
]


PSNR_CAP = 100.0  # what the benchmark gives a bit-exact output (mediapipe.bench.images.PSNR_CAP)


def _fused_psnr(report: dict[str, Any], row: dict[str, Any]) -> dict[str, Any] | None:
    """The fused decode's quality on the row's dataset (`mediapipe.bench.images.fused_psnr`),
    for this library's CPU rows: what the speed was bought at."""
    if row.get("backend") != "mediapipe" or row.get("device") != "cpu":
        return None
    by_label = (report.get("data") or {}).get(row["scenario"]) or {}
    info = by_label.get(row.get("data")) or (report.get("datasets") or {}).get(row["scenario"]) or {}
    quality = (info.get("fused_psnr") or {}).get(row["scenario"])
    return quality if quality and quality.get("samples") else None


def _psnr(report: dict[str, Any], row: dict[str, Any]) -> str:
    """Median and minimum PSNR in dB against the unfused path; "exact" where every sample was."""
    quality = _fused_psnr(report, row)
    if quality is None:
        return "-"
    if quality["min_db"] >= PSNR_CAP:
        return "exact"
    median = "exact" if quality["median_db"] >= PSNR_CAP else f"{quality['median_db']:.1f}"
    return f"{median}/{quality['min_db']:.1f} dB"


# images: the fused decode's PSNR (median/min) next to the speed it bought
PSNR_COLUMN: Column = ("PSNR med/min", _psnr)


def _columns(report: dict[str, Any], scenario: str) -> list[Column]:
    """COLUMNS (for video, with `VIDEO_COLUMNS` for "decoded"; for images with the fused path's
    PSNR after it), plus the dataset and the ratio to the first dataset where a scenario ran on
    several."""
    columns = COLUMNS
    at = [h for h, _ in COLUMNS].index("decoded")
    if any(r.get("decoded_frames_per_s") is not None for r in report["results"] if r["scenario"] == scenario):
        columns = [*COLUMNS[:at], *VIDEO_COLUMNS, *COLUMNS[at + 1 :]]
    elif any(_fused_psnr(report, r) for r in report["results"] if r["scenario"] == scenario):
        columns = [*COLUMNS[: at + 1], PSNR_COLUMN, *COLUMNS[at + 1 :]]
    labels = _labels(report, scenario)
    if len(labels) < 2:
        return columns
    return [columns[0], ("data", lambda rep, r: r.get("data") or "-"), *columns[1:],
            (f"vs {labels[0]}", lambda rep, r: _ratio_of(rep, r, "data"))]


def _who(r: dict[str, Any], several: bool) -> str:
    """backend (device, N workers[, on data]) for the lists of errors."""
    on = f", on {r['data']}" if several and r.get("data") else ""
    return f"{r['backend']} ({r['device']}, {r['workers']} workers{on})"


def _data_parts(info: dict[str, Any], label: str | None = None) -> list[str]:
    parts = []
    if info.get("samples") is not None:
        name = f"{label}: " if label else ""
        parts.append(f"{name}{info['samples']} samples in {info.get('path', '?')}")
    if info.get("mean_bytes"):
        parts.append(f"{info['mean_bytes'] / 1e3:.0f} KB mean")
    if info.get("mean_megapixels"):
        parts.append(f"{info['mean_megapixels']:.2f} MP mean")
    if info.get("padding") is not None:
        parts.append(f"{100 * info['padding']:.1f}% padding in mediapipe's batches")
    return parts


def _scenario_header(report: dict[str, Any], scenario: str) -> list[str]:
    """The scenario's title line, then one line per dataset where it ran on several."""
    settings = report.get("settings", {})
    by_label = (report.get("data") or {}).get(scenario) or {}
    parts = [scenario]
    several = len(by_label) > 1
    if not several:
        parts.extend(_data_parts(report.get("datasets", {}).get(scenario, {})))
    parts.append(f"{settings.get('repeats', '?')} x {settings.get('batches', '?')} batches")
    if settings.get("cold_cache"):
        parts.append("cold page cache (dataset files evicted before each repetition)")
    if several:
        parts[-1] += f", on {len(by_label)} datasets (ratios against the first):"
    lines = [", ".join(parts)]
    if several:
        lines += [", ".join(_data_parts(info, label)) or f"{label}: {info.get('error', '?')}"
                  for label, info in by_label.items()]
    return lines


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


def _stage_columns(report: dict[str, Any], scenario: str) -> list[str]:
    """STAGE_COLUMNS, with the parts of decode some row of ``scenario`` has (video) after decode."""
    rows = [r.get("stages") or {} for r in report["results"] if r["scenario"] == scenario]
    parts = [p for p in DECODE_PARTS if any(p in st for st in rows)]
    at = STAGE_COLUMNS.index("decode") + 1
    return [*STAGE_COLUMNS[:at], *parts, *STAGE_COLUMNS[at:]]


def _stage_headers(report: dict[str, Any], scenario: str) -> list[str]:
    several = len(_labels(report, scenario)) > 1
    return ["backend", *(["data"] if several else []), "device", "workers", *_stage_columns(report, scenario), "total"]


def _stage_rows(report: dict[str, Any], scenario: str) -> list[list[str]]:
    rows = []
    several = len(_labels(report, scenario)) > 1
    columns = _stage_columns(report, scenario)
    for r in report["results"]:
        if r["scenario"] == scenario and r.get("error") is None and r.get("stages"):
            st = r["stages"]
            rows.append([r["backend"], *([r.get("data") or "-"] if several else []), r["device"], str(r["workers"]),
                         *(_num(st.get(s), "{:.2f}") if s in st else "-" for s in columns),
                         _num(st.get("total"), "{:.2f}")])
    return rows


def _legend(report: dict[str, Any]) -> list[str]:
    """What the shown columns and backends mean (`mediapipe.bench.legend`)."""
    headers: list[str] = []
    for scenario in _scenarios(report):
        if any(r["scenario"] == scenario and r.get("error") is None for r in report["results"]):
            headers += [h for h, _ in _columns(report, scenario) if h not in headers]
    backends = list(dict.fromkeys(r["backend"] for r in report["results"] if r.get("error") is None))
    return legend_lines(headers, backends)


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
        title, *data_lines = _scenario_header(report, scenario)
        out.append(title)
        out.extend("  " + line for line in data_lines)
        ok = [r for r in rows if r.get("error") is None]
        columns = _columns(report, scenario)
        several = len(_labels(report, scenario)) > 1
        if ok:
            out.extend(_grid([h for h, _ in columns], [[cell(report, r) for _, cell in columns] for r in ok]))
        else:
            out.append("no backend ran:")
        stage_rows = _stage_rows(report, scenario)
        if stage_rows:
            out.append("stage seconds (worker stages summed over workers, decode_* the parts of decode; consumer "
                       "stages add up to total):")
            out.extend("  " + line for line in _grid(_stage_headers(report, scenario), stage_rows))
        for r in rows:
            if r.get("error") is not None:
                out.append(f"  {_who(r, several)}: {r['error']}")
    ratios = report.get("ratios", [])
    peers = [r for r in ratios if r.get("compare", "backend") == "backend"]
    if peers:
        out.append("")
        out.append("mediapipe / peer, same run:")
        several = any(len(_labels(report, s)) > 1 for s in _scenarios(report))
        width = max(len(r.get("data") or "") for r in peers)
        for r in peers:
            on = f" on {r['data']:<{width}}" if several and r.get("data") else ""
            out.append(f"  {r['scenario']:<12} {r['device']:<4} w{r['workers']:<3}{on} vs {r['peer']:<15} "
                       f"{r['ratio']:.2f}x ({r['metric']})")
    across = [r for r in ratios if r.get("compare") == "data"]
    if across:
        out.append("")
        out.append("same backend across datasets, same run:")
        for r in across:
            out.append(f"  {r['scenario']:<12} {r['device']:<4} w{r['workers']:<3} {r['backend']} on {r['data']} / "
                       f"{r['backend']} on {r['peer_data']}: {r['ratio']:.2f}x ({r['metric']})")
    legend = _legend(report)
    if legend:
        out.append("")
        out.append("legend:")
        out.extend("  " + line for line in legend)
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
        title, *data_lines = _scenario_header(report, scenario)
        out += [f"## {scenario}", "", title, *(f"- {line}" for line in data_lines), ""]
        ok = [r for r in rows if r.get("error") is None]
        columns = _columns(report, scenario)
        several = len(_labels(report, scenario)) > 1
        if ok:
            out += table([h for h, _ in columns], [[cell(report, r) for _, cell in columns] for r in ok])
        stage_rows = _stage_rows(report, scenario)
        if stage_rows:
            out += ["", "Stage seconds (worker stages summed over workers):", ""]
            out += table(_stage_headers(report, scenario), stage_rows)
        errors = [r for r in rows if r.get("error") is not None]
        if errors:
            out += ["", "Not run:", ""]
            out += [f"- {_who(r, several)}: {r['error']}" for r in errors]
        out.append("")
    ratios = report.get("ratios", [])
    peers = [r for r in ratios if r.get("compare", "backend") == "backend"]
    if peers:
        out += ["## mediapipe / peer", ""]
        out += table(["scenario", "device", "workers", "data", "peer", "ratio"],
                     [[r["scenario"], r["device"], str(r["workers"]), r.get("data") or "-", r["peer"],
                       f"{r['ratio']:.2f}x"] for r in peers])
        out.append("")
    across = [r for r in ratios if r.get("compare") == "data"]
    if across:
        out += ["## Same backend across datasets", ""]
        out += table(["scenario", "device", "workers", "backend", "data", "over", "ratio"],
                     [[r["scenario"], r["device"], str(r["workers"]), r["backend"], r["data"], r["peer_data"],
                       f"{r['ratio']:.2f}x"] for r in across])
        out.append("")
    legend = _legend(report)
    if legend:
        out += ["## Legend", "", *(f"- {line}" for line in legend), ""]
    return "\n".join(out)


def write_json(report: dict[str, Any], path: Path) -> None:
    Path(path).write_text(json.dumps(report, indent=2, default=str) + "\n")


def write_markdown(report: dict[str, Any], path: Path) -> None:
    Path(path).write_text(render_markdown(report))


# one colour per backend in every panel and every plot (this library first); as many as backends
_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
            "tab:olive", "tab:cyan", "black", "gold", "teal", "navy", "lime", "maroon")


def backend_colour(backend: str) -> str:
    """The plot colour of a backend: fixed by its place in the legend's list of backends."""
    names = list(BACKENDS)
    at = names.index(backend) if backend in names else len(names) + sum(map(ord, backend))
    return _COLOURS[at % len(_COLOURS)]


def _dataset_name(report: dict[str, Any], scenario: str) -> str:
    """The dataset a scenario ran on, as the report names it (its folder's name)."""
    path = (report.get("datasets", {}).get(scenario) or {}).get("path")
    return Path(path).name if path else "?"


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
            several = len(_labels(report, scenario)) > 1
            labels = [f"{r['backend']}\n{r['device']}" + (f"\n{r.get('data')}" if several else "") for r in best]
            values = [r["samples_per_s"] for r in best]
            errors = [[v - r["samples_per_s_min"] for v, r in zip(values, best)],
                      [r["samples_per_s_max"] - v for v, r in zip(values, best)]]
            colours = [backend_colour(r["backend"]) for r in best]
            baseline = (_labels(report, scenario) or [None])[0]
            hatches = ["//" if several and r.get("data") != baseline else "" for r in best]  # not the first dataset
            bars.bar(labels, values, yerr=errors, color=colours, capsize=4, hatch=hatches, edgecolor="white")
            cold = ", cold cache" if report.get("settings", {}).get("cold_cache") else ""
            dataset = "several datasets" if several else _dataset_name(report, scenario)
            bars.set_title(f"{scenario} on {dataset}, {top} workers{cold}", fontsize=10)
            bars.set_ylabel(f"{best[0]['unit']}/s (median, min-max)")
            bars.tick_params(axis="x", labelsize=8)
            lines: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
            for r in ok:
                on = (r.get("data") or "") if several else ""
                lines.setdefault((r["backend"], r["device"], on), []).append((r["workers"], r["samples_per_s"]))
            for (backend, device, on), points in sorted(lines.items()):
                points.sort()
                scale.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=backend_colour(backend),
                           linestyle="-" if device == "cpu" else "--", label=f"{backend} {device}" + (f" on {on}" if on else ""))
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
    machine = report.get("machine", {})
    gpu = f", GPU {machine['gpu']}" if machine.get("gpu") else ", no GPU"
    fig.suptitle(f"mediapipe bench: {machine.get('cores', '?')} cores ({machine.get('cpu', '?')}){gpu}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
