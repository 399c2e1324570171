"""The report as a PNG: throughput bars per scenario and, across worker counts, the scaling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mediapipe.bench.legend import BACKENDS
from mediapipe.bench.report_rows import data_labels, scenarios_of

_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
            "tab:olive", "tab:cyan", "black", "gold", "teal", "navy", "lime", "maroon", "coral", "orchid")


def backend_colour(backend: str) -> str:
    """The plot colour of a backend: fixed by its place in the legend's list of backends."""
    names = list(BACKENDS)
    at = names.index(backend) if backend in names else len(names) + sum(map(ord, backend))
    return _COLOURS[at % len(_COLOURS)]


def _dataset_name(report: dict[str, Any], scenario: str) -> str:
    """The dataset a scenario ran on, as the report names it (its folder's name)."""
    path = (report.get("datasets", {}).get(scenario) or {}).get("path")
    return Path(path).name if path else "?"


def _bars(ax: Any, report: dict[str, Any], scenario: str, ok: list[dict[str, Any]]) -> None:
    """Throughput per backend at the largest worker count: a horizontal bar each, its label at its side."""
    top = max(r["workers"] for r in ok)
    best = [r for r in ok if r["workers"] == top]
    several = len(data_labels(report, scenario)) > 1
    labels = [f"{r['backend']} {r['device']}" + (f" {r.get('data')}" if several else "") for r in best]
    values = [r["samples_per_s"] for r in best]
    errors = [[v - r["samples_per_s_min"] for v, r in zip(values, best)],
              [r["samples_per_s_max"] - v for v, r in zip(values, best)]]
    baseline = (data_labels(report, scenario) or [None])[0]
    hatches = ["//" if several and r.get("data") != baseline else "" for r in best]  # not the first dataset
    ax.barh(range(len(best)), values, xerr=errors, color=[backend_colour(r["backend"]) for r in best], capsize=3,
            hatch=hatches, edgecolor="white")
    ax.set_yticks(range(len(best)), labels, fontsize=8)
    ax.invert_yaxis()  # the first backend on top
    cold = ", cold cache" if report.get("settings", {}).get("cold_cache") else ""
    dataset = "several datasets" if several else _dataset_name(report, scenario)
    ax.set_title(f"{scenario} on {dataset}, {top} worker{'' if top == 1 else 's'}{cold}", fontsize=10)
    ax.set_xlabel(f"{best[0]['unit']}/s (median, min-max)")


def _scaling(ax: Any, report: dict[str, Any], scenario: str, ok: list[dict[str, Any]]) -> None:
    """Samples/s against workers, a line per backend and device, the legend below the axes."""
    several = len(data_labels(report, scenario)) > 1
    lines: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for r in ok:
        on = (r.get("data") or "") if several else ""
        lines.setdefault((r["backend"], r["device"], on), []).append((r["workers"], r["samples_per_s"]))
    for (backend, device, on), points in sorted(lines.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=backend_colour(backend),
                linestyle="-" if device == "cpu" else "--", label=f"{backend} {device}" + (f" on {on}" if on else ""))
    ax.set_xticks(sorted({r["workers"] for r in ok}))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("workers")
    ax.set_ylabel(f"{ok[0]['unit']}/s")
    ax.set_title(f"{scenario}: scaling", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    if len({r["workers"] for r in ok}) == 1:
        ax.text(0.5, 0.1, "one worker count: --workers 1,2,4 draws the curve", ha="center", transform=ax.transAxes,
                fontsize=8)


def plot_figure(report: dict[str, Any]) -> Any:
    """The matplotlib figure `write_plot` saves: per scenario a column, throughput per backend
    (bars, at the largest worker count) above samples/s against workers (the scaling curve)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = scenarios_of(report)
    columns = max(1, len(scenarios))
    fig, axes = plt.subplots(2, columns, figsize=(5.5 * columns, 9), squeeze=False, layout="constrained")
    for col, scenario in enumerate(scenarios):
        ok = [r for r in report["results"] if r["scenario"] == scenario and r.get("samples_per_s")]
        if ok:
            _bars(axes[0][col], report, scenario, ok)
            _scaling(axes[1][col], report, scenario, ok)
        else:
            axes[0][col].text(0.5, 0.5, "no backend ran", ha="center", va="center")
            axes[1][col].axis("off")
    machine = report.get("machine", {})
    gpu = f", GPU {machine['gpu']}" if machine.get("gpu") else ", no GPU"
    fig.suptitle(f"mediapipe bench: {machine.get('cores', '?')} cores ({machine.get('cpu', '?')}){gpu}", fontsize=11)
    return fig


def write_plot(report: dict[str, Any], path: Path) -> None:
    """Save `plot_figure` as a PNG at ``path``."""
    import matplotlib.pyplot as plt

    fig = plot_figure(report)
    try:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
