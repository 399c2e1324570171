"""The verdict: one line per scenario in words, where this library was faster or slower than each
peer, and the warning where a run was too short to trust."""

from __future__ import annotations

from typing import Any

from mediapipe.bench.core import (
    MIN_BATCHES_PER_WORKER,
    MIN_REP_BATCHES,
    MIN_TIMED_SECONDS,
    batches_to_trust,
    too_short,
)
from mediapipe.bench.report_rows import data_labels, scenarios_of

LEVEL_WITHIN = 0.02  # a ratio this close to 1 (as printed) is "level with" the peer in the verdict


# -- the verdict: where this library won and lost, in words --------------------------------------
def _group_key(r: dict[str, Any]) -> tuple:
    return r["scenario"], r["device"], r["workers"], r.get("data")


def _group_label(report: dict[str, Any], key: tuple) -> str:
    scenario, device, workers, data = key
    on = f" on {data}" if data is not None and len(data_labels(report, scenario)) > 1 else ""
    return f"{scenario}{on} ({device}, {workers} worker{'' if workers == 1 else 's'})"


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def verdict(ratios: list[dict[str, Any]], unit: str | None = None) -> str:
    """One line in words: this library's rate over each peer's ("mediapipe is <r>x dali ...; slower
    than pyav (<r>x)"), faster peers first; a ratio within `LEVEL_WITHIN` of 1 is level."""
    def metric(r: dict[str, Any]) -> str:  # named where it is not the rows' own unit
        return f" in {r['metric']}" if unit and r["metric"] != f"{unit}/s" else ""

    rounded = [(round(r["ratio"], 2), r) for r in ratios]
    faster = sorted((x for x in rounded if x[0] > 1 + LEVEL_WITHIN), key=lambda x: -x[0])
    level = [x for x in rounded if abs(x[0] - 1) <= LEVEL_WITHIN]
    slower = sorted((x for x in rounded if x[0] < 1 - LEVEL_WITHIN), key=lambda x: x[0])
    parts = []
    if faster:
        parts.append(_and([f"{v:.2f}x {r['peer']}{metric(r)}" for v, r in faster]))
    if level:
        parts.append("level with " + _and([f"{r['peer']} ({v:.2f}x{metric(r)})" for v, r in level]))
    if slower:
        parts.append("slower than " + _and([f"{r['peer']} ({v:.2f}x{metric(r)})" for v, r in slower]))
    return "mediapipe is " + "; ".join(parts)


def verdicts(report: dict[str, Any]) -> list[str]:
    """One line per scenario (and device, workers, dataset) where this library ran: how it compares
    with each peer of the same run, or why there is nothing to compare."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in report["results"]:
        groups.setdefault(_group_key(r), []).append(r)
    by_group: dict[tuple, list[dict[str, Any]]] = {}
    for r in report.get("ratios", []):
        if r.get("compare", "backend") == "backend":
            by_group.setdefault((r["scenario"], r["device"], r["workers"], r.get("data")), []).append(r)
    short = short_run_warnings(report)
    lines = []
    for key, rows in groups.items():
        ours = next((r for r in rows if r["backend"] == "mediapipe"), None)
        if ours is None:
            continue
        if ours.get("error") is not None:
            text = f"no verdict: mediapipe did not run ({ours['error']})"
        elif key in by_group:
            text = verdict(by_group[key], ours.get("unit"))
        else:
            text = "no verdict: no peer ran beside mediapipe"
        if key[0] in short and key in by_group:
            text += f" (too short to trust: see {key[0]}'s warning)"
        lines.append(f"{_group_label(report, key)}: {text}")
    return lines


def short_run_warnings(report: dict[str, Any]) -> dict[str, str]:
    """scenario -> a warning where some row's timed work is too short to trust (`too_short`):
    which rows, why, and the ``--batches`` that would do."""
    settings = report.get("settings", {})
    batches, repeats = settings.get("batches"), settings.get("repeats")
    if not batches or not repeats:
        return {}
    out = {}
    for scenario in scenarios_of(report):
        ran = [r for r in report["results"] if r["scenario"] == scenario and r.get("error") is None
               and (r.get("stages") or {}).get("total") is not None]
        short = [(r, why) for r in ran if (why := too_short(batches, r["workers"], r["stages"]["total"]))]
        if not short:
            continue
        who = ("every row" if len(short) == len(ran) else f"{len(short)} of {len(ran)} rows" if len(short) > 3
               else ", ".join(f"{r['backend']} {r['device']} w{r['workers']}" for r, _ in short))
        counts = list(dict.fromkeys(reason for _, why in short for reason in why if " timed " not in reason))
        seconds = sorted(r["stages"]["total"] for r, _ in short)
        spread = f"{seconds[0]:.2f}" + (f"-{seconds[-1]:.2f}" if seconds[-1] - seconds[0] >= 0.005 else "")
        needed = max(batches_to_trust(batches, repeats, r["workers"], r["stages"]["total"]) for r, _ in short)
        out[scenario] = (
            f"too short to trust ({who}): {'; '.join([*counts, f'{spread} s timed in all'])}. A rate needs "
            f"at least {MIN_REP_BATCHES} batches in each repetition and {MIN_BATCHES_PER_WORKER} per worker, and "
            f"{MIN_TIMED_SECONDS:.0f} s of timed work over the repetitions, or the loaders' start and the batches "
            f"in flight weigh on it: rerun with --batches {needed} or more")
    return out
