"""What the report's parts share about its rows: the scenarios and data labels, in the order run."""

from __future__ import annotations

from typing import Any


def data_labels(report: dict[str, Any], scenario: str) -> list[str]:
    """The data labels of a scenario's rows, in the order given (the first is the baseline)."""
    seen: list[str] = []
    for r in report["results"]:
        if r["scenario"] == scenario and r.get("data") is not None and r["data"] not in seen:
            seen.append(r["data"])
    return seen


def scenarios_of(report: dict[str, Any]) -> list[str]:
    """The scenarios of the report's rows, in the order run."""
    seen: list[str] = []
    for r in report["results"]:
        if r["scenario"] not in seen:
            seen.append(r["scenario"])
    return seen
