"""The report as a terminal table, JSON and Markdown (the PNG plot: `mediapipe.bench.plot`).

All four are made from the plain-data report that `mediapipe.bench.harness.run` returns, so
a saved ``--json`` file can be rendered again later (`render_table(json.load(f))`). The terminal
table keeps within `WIDTH` characters and shows only the columns that hold a value; a verdict
line per scenario says in words where this library was faster or slower than each peer
(`mediapipe.bench.verdict`), and a warning where a run was too short to trust.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mediapipe.bench.core import (
    DECODE_PARTS,
    OP_PREFIX,
    WORKER_STAGES,
)
from mediapipe.bench.legend import legend_lines
from mediapipe.bench.report_rows import data_labels, scenarios_of
from mediapipe.bench.verdict import LEVEL_WITHIN, short_run_warnings, verdicts

WIDTH = 100  # the terminal report's lines: wider tables are split into blocks that repeat the row's keys
EMPTY = ("-", "")  # what a cell without a value shows

STAGE_COLUMNS = ("read", "cache_read", "decode", "cache_write", "sample_ops", "collate", "worker_batch_ops", "wait",
                 "host_to_device", "device_ops", "step", "other")


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


def _input_bound(row: dict[str, Any]) -> str:
    """yes/no, with the consumer's wait as a share of the simulated step time."""
    if row.get("input_bound") is None:
        return "-"
    step = (row.get("stages") or {}).get("step") or 0.0
    share = f" ({100 * row['wait_s'] / step:.0f}% wait)" if step and row.get("wait_s") is not None else ""
    return ("yes" if row["input_bound"] else "no") + share


Column = tuple[str, Callable[[dict[str, Any], dict[str, Any]], str]]

# (header, cell) for the main table, in two groups: what the row delivers, and what it costs
KEY_COLUMNS: list[Column] = [
    ("backend", lambda rep, r: r["backend"]),
    ("device", lambda rep, r: r["device"]),
    ("workers", lambda rep, r: str(r["workers"])),
]
SPEED_COLUMNS: list[Column] = [
    ("samples/s (min-max)", lambda rep, r: _rate(r)),
    ("MB/s", lambda rep, r: _num(r.get("input_mb_per_s"))),
    ("decoded", lambda rep, r: _secondary(r)),
    ("mediapipe/peer", lambda rep, r: _ratio_of(rep, r)),
]
COST_COLUMNS: list[Column] = [
    ("1st batch", lambda rep, r: _num(r.get("first_batch_s"), "{:.2f} s")),
    ("CPU", lambda rep, r: _num(r.get("cpu_util_pct"), "{:.0f}%")),
    ("peak RSS", lambda rep, r: _num(r.get("peak_rss_mb"), "{:.0f} MB")),
    ("RSS growth", lambda rep, r: _num(r.get("rss_growth_pct"), "{:+.1f}%")),
    ("private", lambda rep, r: _num((r.get("uss_mb_by_rep") or [None])[-1], "{:.0f} MB")),
    ("PSS", lambda rep, r: _num((r.get("pss_mb_by_rep") or [None])[-1], "{:.0f} MB")),
    ("input-bound", lambda rep, r: _input_bound(r)),
]
COLUMNS: list[Column] = [*KEY_COLUMNS, *SPEED_COLUMNS, *COST_COLUMNS]


def _fraction(row: dict[str, Any]) -> str:
    """Decoded frames/s as a share of the faster sequential ceiling (video rows)."""
    if row.get("ceiling_fraction") is None:
        return "-"
    return f"{100 * row['ceiling_fraction']:.0f}%"


# video: the "decoded" column becomes the useful and the decoded frame rates, and their share of the ceiling
VIDEO_COLUMNS: list[Column] = [
    ("useful frames/s", lambda rep, r: _num(r.get("useful_frames_per_s"))),
    ("decoded frames/s", lambda rep, r: _num(r.get("decoded_frames_per_s"))),
    ("decoded/useful", lambda rep, r: _per_useful(r)),
    ("decoded/ceiling", lambda rep, r: _fraction(r)),
]


def _per_useful(row: dict[str, Any]) -> str:
    """Frames the decoder produced per frame delivered in a clip (video rows)."""
    decoded, useful = row.get("decoded_frames_per_s"), row.get("useful_frames_per_s")
    return f"{decoded / useful:.2f}" if decoded and useful else "-"


PSNR_CAP = 100.0  # what the benchmark gives a bit-exact output (mediapipe.bench.fused_quality.PSNR_CAP)


def _fused_psnr(report: dict[str, Any], row: dict[str, Any]) -> dict[str, Any] | None:
    """The fused decode's quality on the row's dataset (`mediapipe.bench.fused_quality.fused_psnr`),
    for this library's CPU rows: what the speed was bought at; a row that scored its own output
    (an ffcv row: `mediapipe.bench.ffcv_peer.ffcv_quality`) has it in ``quality``."""
    if "quality" in row and row["quality"] is not None:
        return row["quality"] if row["quality"].get("samples") else None
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


def _column_groups(report: dict[str, Any], scenario: str) -> tuple[list[Column], list[Column], list[Column]]:
    """(keys, speed, cost) columns of a scenario's table: for video `VIDEO_COLUMNS` for "decoded",
    for images the fused path's PSNR after it; the dataset and the ratio to the first dataset
    where a scenario ran on several."""
    rows = [r for r in report["results"] if r["scenario"] == scenario]
    keys, speed = list(KEY_COLUMNS), list(SPEED_COLUMNS)
    at = [h for h, _ in speed].index("decoded")
    if any(r.get("decoded_frames_per_s") is not None for r in rows):
        speed = [*speed[:at], *VIDEO_COLUMNS, *speed[at + 1 :]]
    elif any(_fused_psnr(report, r) for r in rows):
        speed = [*speed[: at + 1], PSNR_COLUMN, *speed[at + 1 :]]
    labels = data_labels(report, scenario)
    if len(labels) >= 2:
        keys.insert(1, ("data", lambda rep, r: r.get("data") or "-"))
        speed.append((f"vs {labels[0]}", lambda rep, r: _ratio_of(rep, r, "data")))
    return keys, speed, list(COST_COLUMNS)


def _columns(report: dict[str, Any], scenario: str) -> list[Column]:
    """Every column of a scenario's table (`_column_groups` in order)."""
    keys, speed, cost = _column_groups(report, scenario)
    return [*keys, *speed, *cost]


def _filled(columns: list[Column], report: dict[str, Any], rows: list[dict[str, Any]]) -> list[Column]:
    """The columns that hold a value in some row (a column of '-' everywhere says nothing)."""
    return [c for c in columns if any(c[1](report, r) not in EMPTY for r in rows)]


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


def _pipeline(report: dict[str, Any], scenario: str) -> str:
    """The scenario's pipeline in one line (what the harness recorded), with its batch size."""
    what = (report.get("pipelines") or {}).get(scenario) or ""
    sizes = {r.get("batch_size") for r in report["results"] if r["scenario"] == scenario} - {None}
    batch = f"batches of {sizes.pop()}" if len(sizes) == 1 else ""
    return "; ".join(part for part in (what, batch) if part)


def _scenario_header(report: dict[str, Any], scenario: str) -> list[str]:
    """The scenario's title (its name and pipeline), then its dataset and what was timed; one line
    per dataset where it ran on several."""
    settings = report.get("settings", {})
    by_label = (report.get("data") or {}).get(scenario) or {}
    several = len(by_label) > 1
    pipeline = _pipeline(report, scenario)
    lines = [f"{scenario}: {pipeline}" if pipeline else scenario]
    timed = f"timed: {settings.get('repeats', '?')} x {settings.get('batches', '?')} batches"
    if settings.get("cold_cache"):
        timed += ", cold page cache (dataset files evicted before each repetition)"
    if several:
        lines.append(timed + f", on {len(by_label)} datasets (ratios against the first):")
        lines += [", ".join(_data_parts(info, label)) or f"{label}: {info.get('error', '?')}"
                  for label, info in by_label.items()]
    else:
        data = ", ".join(_data_parts(report.get("datasets", {}).get(scenario, {})))
        lines.append(f"data: {data}; {timed}" if data else timed)
    return lines


def _grid(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    return lines


def _width(headers: list[str], rows: list[list[str]], at: int) -> int:
    return max(len(headers[at]), *(len(r[at]) for r in rows)) if rows else len(headers[at])


def _blocks(headers: list[str], rows: list[list[str]], keys: int, groups: list[int], width: int = WIDTH) -> list[str]:
    """A table within ``width`` characters: whole where it fits, else one block per group of columns
    (``groups``: how many columns each has, after the ``keys`` first ones, which every block
    repeats), a group too wide for one block split where it overflows; blocks apart by an empty line."""
    if sum(_width(headers, rows, i) + 2 for i in range(len(headers))) <= width + 2:
        groups = [len(headers) - keys]  # it fits whole
    key_width = sum(_width(headers, rows, i) + 2 for i in range(keys))
    parts: list[list[int]] = []
    at = keys
    for size in groups:
        part: list[int] = []
        used = key_width
        for i in range(at, at + size):
            w = _width(headers, rows, i) + 2
            if part and used + w > width + 2:
                parts.append(part)
                part, used = [], key_width
            part.append(i)
            used += w
        if part:
            parts.append(part)
        at += size
    lines: list[str] = []
    for n, part in enumerate(parts):
        take = [*range(keys), *part]
        lines += ([""] if n else []) + _grid([headers[i] for i in take], [[r[i] for i in take] for r in rows])
    return lines or _grid(headers[:keys], [r[:keys] for r in rows])


def _wrap(text: str, indent: str = "", more: str = "    ", width: int = WIDTH) -> list[str]:
    """``text`` as lines of at most ``width`` characters (a word longer stays whole)."""
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent + more,
                         break_long_words=False, break_on_hyphens=False) or [indent]


def _table(report: dict[str, Any], scenario: str, rows: list[dict[str, Any]], width: int = WIDTH) -> list[str]:
    """The main table of a scenario's rows that ran: only the columns with a value, in blocks."""
    keys, speed, cost = (_filled(g, report, rows) for g in _column_groups(report, scenario))
    columns = [*keys, *speed, *cost]
    cells = [[cell(report, r) for _, cell in columns] for r in rows]
    return _blocks([h for h, _ in columns], cells, len(keys), [len(speed), len(cost)], width)


def _stage_columns(report: dict[str, Any], scenario: str) -> list[str]:
    """STAGE_COLUMNS, with the parts of decode some row of ``scenario`` has (video) after decode."""
    rows = [r.get("stages") or {} for r in report["results"] if r["scenario"] == scenario]
    parts = [p for p in DECODE_PARTS if any(p in st for st in rows)]
    at = STAGE_COLUMNS.index("decode") + 1
    return [*STAGE_COLUMNS[:at], *parts, *STAGE_COLUMNS[at:]]


def _stage_headers(report: dict[str, Any], scenario: str) -> list[str]:
    several = len(data_labels(report, scenario)) > 1
    return ["backend", *(["data"] if several else []), "device", "workers", *_stage_columns(report, scenario), "total"]


def _stage_rows(report: dict[str, Any], scenario: str) -> list[list[str]]:
    rows = []
    several = len(data_labels(report, scenario)) > 1
    columns = _stage_columns(report, scenario)
    for r in report["results"]:
        if r["scenario"] == scenario and r.get("error") is None and r.get("stages"):
            st = r["stages"]
            rows.append([r["backend"], *([r.get("data") or "-"] if several else []), r["device"], str(r["workers"]),
                         *(_num(st.get(s), "{:.2f}") if s in st else "-" for s in columns),
                         _num(st.get("total"), "{:.2f}")])
    return rows


def _stage_table(report: dict[str, Any], scenario: str, width: int = WIDTH) -> list[str]:
    """The stage seconds of a scenario's rows: only the stages that took time in some row, the
    workers' stages in one block and the consumer's (adding up to total) in the next."""
    headers, rows = _stage_headers(report, scenario), _stage_rows(report, scenario)
    if not rows:
        return []
    keys = headers.index("workers") + 1
    took = [i for i in range(keys, len(headers))
            if headers[i] == "total" or any(r[i] not in (*EMPTY, "0.00") for r in rows)]
    workers = [i for i in took if headers[i] in WORKER_STAGES or headers[i] in DECODE_PARTS]
    consumer = [i for i in took if i not in workers]
    keep = [*range(keys), *workers, *consumer]
    return _blocks([headers[i] for i in keep], [[r[i] for i in keep] for r in rows], keys,
                   [len(workers), len(consumer)], width)


def _shown_columns(report: dict[str, Any], scenario: str) -> list[str]:
    """The headers a scenario's table shows (its columns with a value in some row that ran)."""
    ok = [r for r in report["results"] if r["scenario"] == scenario and r.get("error") is None]
    return [h for h, _ in _filled(_columns(report, scenario), report, ok)] if ok else []


def _legend(report: dict[str, Any]) -> list[str]:
    """What the shown columns and backends mean (`mediapipe.bench.legend`)."""
    headers: list[str] = []
    for scenario in scenarios_of(report):
        headers += [h for h in _shown_columns(report, scenario) if h not in headers]
    backends = list(dict.fromkeys(r["backend"] for r in report["results"] if r.get("error") is None))
    return legend_lines(headers, backends)


def _machine_line(report: dict[str, Any]) -> str:
    machine = report.get("machine", {})
    versions = machine.get("versions", {})
    return (f"machine: {machine.get('cores', '?')} cores ({machine.get('cpu', '?')}), "
            f"torch {versions.get('torch', '-')}, torchvision {versions.get('torchvision', '-')}, "
            f"DALI {versions.get('nvidia-dali-cuda130') or versions.get('nvidia-dali-cuda120') or '-'}, "
            f"CUDA {'yes: ' + machine['gpu'] if machine.get('gpu') else 'no'}")


def _scenario_block(report: dict[str, Any], scenario: str, warning: str | None) -> list[str]:
    """A scenario's title, pipeline, data, warning, table, stage seconds and errors."""
    rows = [r for r in report["results"] if r["scenario"] == scenario]
    title, *data_lines = _scenario_header(report, scenario)
    out = _wrap(title)
    for line in data_lines:
        out += _wrap(line, "  ")
    if warning:
        out += _wrap(f"warning: {warning}", "  ")
    ok = [r for r in rows if r.get("error") is None]
    out += _table(report, scenario, ok) if ok else ["no backend ran:"]
    stages = _stage_table(report, scenario, WIDTH - 2)
    if stages:
        out += _wrap("stage seconds (worker stages summed over workers, decode_* the parts of decode; consumer "
                     "stages add up to total; stages that took no time left out):")
        out += ["  " + line if line else "" for line in stages]
    for line in op_cost_lines(report, scenario):
        out += _wrap(line, "  ")
    several = len(data_labels(report, scenario)) > 1
    for r in rows:
        if r.get("error") is not None:
            out += _wrap(f"{_who(r, several)}: {r['error']}", "  ")
    return out


def op_cost_lines(report: dict[str, Any], scenario: str) -> list[str]:
    """Per row that timed its batch-stage ops (this library's, in the workers): each op's worker
    microseconds per image, in pipeline order."""
    out = []
    several = len(data_labels(report, scenario)) > 1
    for r in report["results"]:
        st = r.get("stages") or {}
        ops = {k[len(OP_PREFIX):]: v for k, v in st.items() if k.startswith(OP_PREFIX)}
        samples = (r.get("samples_per_s") or 0.0) * (st.get("total") or 0.0)
        if r["scenario"] == scenario and r.get("error") is None and ops and samples > 0:
            costs = ", ".join(f"{name} {1e6 * v / samples:.0f}" for name, v in ops.items())
            out.append(f"{_who(r, several)}: batch-stage ops, worker µs per image: {costs}")
    return out


CONVERSION_HEADERS = ["tool", "does", "workers", "images", "seconds", "images/s", "MB written"]


def _conversion_cells(c: dict[str, Any]) -> list[str]:
    return [c.get("tool", "-"), c.get("does") or c.get("error", "-"), str(c.get("workers", "-")),
            str(c.get("images", "-")), _num(c.get("seconds"), "{:.2f}"), _num(c.get("images_per_s")),
            _num(c.get("mb_written"), "{:.1f}")]


def _conversion_title(report: dict[str, Any], data: str | None) -> str:
    """What was converted and how: the max side and JPEG quality of the rows that encode."""
    done = [c for c in report["conversions"] if c.get("data") == data and not c.get("error")]
    how = f"max side {done[0]['max_side'] or 'as is'}, JPEG q{done[0]['jpeg_quality']}" if done else "not measured"
    return f"conversion of {data} (same run, warm page cache; encode: {how})"


def _conversion_lines(report: dict[str, Any]) -> list[str]:
    """With an ffcv row: each tool converting the same folder in the run, its images/s."""
    out: list[str] = []
    for data in dict.fromkeys(c.get("data") for c in report.get("conversions") or []):
        cells = [_conversion_cells(c) for c in report["conversions"] if c.get("data") == data]
        out += ["", _conversion_title(report, data) + ":", *("  " + line for line in _grid(CONVERSION_HEADERS, cells))]
    return out


def _conversion_markdown(report: dict[str, Any], table: Callable[[list[str], list[list[str]]], list[str]]) -> list[str]:
    out: list[str] = []
    for data in dict.fromkeys(c.get("data") for c in report.get("conversions") or []):
        cells = [_conversion_cells(c) for c in report["conversions"] if c.get("data") == data]
        out += [f"## Conversion of {data}", "", _conversion_title(report, data), "", *table(CONVERSION_HEADERS, cells), ""]
    return out


CACHE_TITLE = ("epoch cache (same run): each cache row's rate over each row's; mediapipe-cached reads the "
               "cache (the second epoch on), mediapipe-cache-fill fills it (the first epoch)")


def cache_lines(report: dict[str, Any]) -> list[str]:
    """A line per epoch cache row (``compare="cache"`` ratios): its rate over this library uncached
    and over each peer of the same scenario, device, workers and data."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in report.get("ratios", []):
        if r.get("compare") == "cache":
            groups.setdefault((r["scenario"], r["device"], r["workers"], r.get("data"), r["backend"]), []).append(r)
    lines = []
    for (scenario, device, workers, data, backend), rows in groups.items():
        over = ", ".join(f"{r['ratio']:.2f}x {r['peer']}" for r in rows)
        lines.append(f"{scenario} {device} w{workers}{' ' + data if data else ''}: {backend} is {over}")
    return lines


def render_table(report: dict[str, Any]) -> str:
    """The terminal report, within `WIDTH` characters: per scenario its pipeline, throughput and
    resources (only the columns that hold a value), stage seconds, errors with their reasons and
    a warning where the run was too short to trust; then the verdict, a line per scenario."""
    out = _wrap(_machine_line(report))
    warnings = short_run_warnings(report)
    for scenario in scenarios_of(report):
        out.append("")
        out += _scenario_block(report, scenario, warnings.get(scenario))
    lines = verdicts(report)
    if lines:
        out += ["", f"verdict (mediapipe / peer: this library's rate over each peer's, same run; within "
                    f"{LEVEL_WITHIN:.0%} is level):"]
        for line in lines:
            out += _wrap(line, "  ")
    cache = cache_lines(report)
    if cache:
        out += ["", *_wrap(f"{CACHE_TITLE}:")]
        for line in cache:
            out += _wrap(line, "  ")
    across = [r for r in report.get("ratios", []) if r.get("compare") == "data"]
    if across:
        out += ["", "same backend across datasets, same run:"]
        for r in across:
            out += _wrap(f"{r['scenario']:<12} {r['device']:<4} w{r['workers']:<3} {r['backend']} on {r['data']} / "
                         f"{r['backend']} on {r['peer_data']}: {r['ratio']:.2f}x ({r['metric']})", "  ")
    out += _conversion_lines(report)
    legend = _legend(report)
    if legend:
        out += ["", "legend:"]
        for line in legend:
            out += _wrap(line, "  ")
    if report.get("elapsed_s") is not None:
        out += ["", f"finished in {report['elapsed_s']:.0f} s"]
    return "\n".join(out)


def render_markdown(report: dict[str, Any]) -> str:
    """The same tables as GitHub Markdown (only the columns that hold a value), the verdict and
    the warnings."""
    def table(headers: list[str], rows: list[list[str]]) -> list[str]:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines.extend("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows)
        return lines

    machine = report.get("machine", {})
    out = ["# mediapipe bench", "",
           f"Machine: {machine.get('cores', '?')} cores, {machine.get('cpu', '?')}; "
           f"Python {machine.get('python', '?')}; "
           + ", ".join(f"{k} {v}" for k, v in machine.get("versions", {}).items()), ""]
    warnings = short_run_warnings(report)
    for scenario in scenarios_of(report):
        rows = [r for r in report["results"] if r["scenario"] == scenario]
        title, *data_lines = _scenario_header(report, scenario)
        out += [f"## {scenario}", "", title, "", *(f"- {line}" for line in data_lines), ""]
        if scenario in warnings:
            out += [f"**Warning:** {warnings[scenario]}", ""]
        ok = [r for r in rows if r.get("error") is None]
        columns = _filled(_columns(report, scenario), report, ok)
        several = len(data_labels(report, scenario)) > 1
        if ok:
            out += table([h for h, _ in columns], [[cell(report, r) for _, cell in columns] for r in ok])
        stage_rows = _stage_rows(report, scenario)
        if stage_rows:
            headers = _stage_headers(report, scenario)
            keep = [i for i, h in enumerate(headers) if h in ("backend", "data", "device", "workers")
                    or any(r[i] not in EMPTY for r in stage_rows)]
            out += ["", "Stage seconds (worker stages summed over workers):", ""]
            out += table([headers[i] for i in keep], [[r[i] for i in keep] for r in stage_rows])
        costs = op_cost_lines(report, scenario)
        if costs:
            out += ["", *(f"- {line}" for line in costs)]
        errors = [r for r in rows if r.get("error") is not None]
        if errors:
            out += ["", "Not run:", ""]
            out += [f"- {_who(r, several)}: {r['error']}" for r in errors]
        out.append("")
    lines = verdicts(report)
    if lines:
        out += ["## Verdict", "", *(f"- {line}" for line in lines), ""]
    ratios = report.get("ratios", [])
    peers = [r for r in ratios if r.get("compare", "backend") == "backend"]
    if peers:
        out += ["## mediapipe / peer", ""]
        out += table(["scenario", "device", "workers", "data", "peer", "ratio"],
                     [[r["scenario"], r["device"], str(r["workers"]), r.get("data") or "-", r["peer"],
                       f"{r['ratio']:.2f}x"] for r in peers])
        out.append("")
    cache = cache_lines(report)
    if cache:
        out += ["## Epoch cache", "", CACHE_TITLE[0].upper() + CACHE_TITLE[1:] + ":", "", *(f"- {line}" for line in cache), ""]
    across = [r for r in ratios if r.get("compare") == "data"]
    if across:
        out += ["## Same backend across datasets", ""]
        out += table(["scenario", "device", "workers", "backend", "data", "over", "ratio"],
                     [[r["scenario"], r["device"], str(r["workers"]), r["backend"], r["data"], r["peer_data"],
                       f"{r['ratio']:.2f}x"] for r in across])
        out.append("")
    out += _conversion_markdown(report, table)
    legend = _legend(report)
    if legend:
        out += ["## Legend", "", *(f"- {line}" for line in legend), ""]
    return "\n".join(out)


def write_json(report: dict[str, Any], path: Path) -> None:
    Path(path).write_text(json.dumps(report, indent=2, default=str) + "\n")


def write_markdown(report: dict[str, Any], path: Path) -> None:
    Path(path).write_text(render_markdown(report))


# one colour per backend in every panel and every plot (this library first); as many as backends
