"""Docstrings and comments say what and why; measurements (timings, speed-ups, shares of CPU,
page-fault counts) go stale there and belong to the bench and commit messages. Checked on every
module of the library but the bench harness, whose subject is measurement."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the bench's harness modules define what is measured (thresholds, "measured in the same run")
HARNESS = {"mediapipe/bench/__init__.py", "mediapipe/bench/core.py", "mediapipe/bench/harness.py"}
CHECKED = sorted(str(p.relative_to(ROOT)) for package in ("augment", "decoders", "loaders", "mediapipe")
                 for p in (ROOT / package).rglob("*.py") if str(p.relative_to(ROOT)) not in HARNESS)
FIGURE = re.compile(
    r"\b\d+(\.\d+)?\s?(ms|µs|us|microseconds?)\b|\babout an? (micro|milli)second"  # a timing
    r"|\b\d+(\.\d+)?x\b"  # a speed-up
    r"|\b\d+(\.\d+)?\s?% of\b"  # a share of something measured
    r"|\b\d+(\.\d+)?\s?[KMG]i?B (per (frame|image|sample|batch)|for \d)"  # a footprint
    r"|\b\d+(\.\d+)? (against|vs\.?) \d"  # a comparison
    r"|\b\d[\d,]* (page )?faults\b|\bmeasured\b",
    re.IGNORECASE)


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python source."""
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
    return found


@pytest.mark.parametrize("name", CHECKED)
def test_no_measurements_in_docstrings_or_comments(name: str) -> None:
    figures = [f"{name}:{line}: ...{text[max(0, m.start() - 40):m.end() + 20]!r}..."
               for line, text in prose((ROOT / name).read_text()) for m in FIGURE.finditer(text)]
    assert not figures, "\n".join(figures)


def test_no_measurements_in_the_dependency_comments() -> None:
    comments = [line.split("#", 1)[1] for line in (ROOT / "pyproject.toml").read_text().splitlines() if "#" in line]
    assert not [c for c in comments if FIGURE.search(c)], comments


@pytest.mark.parametrize("text", ["about 4x swresample's speed", "0.07 ms per second", "~6% of a JPEG sample's CPU",
                                  "400 against 850 seconds", "~4,300 faults a batch", "measured the same",
                                  "1.6 KB per frame", "30 MB for 200 s of audio",
                                  "costs about a microsecond"])
def test_the_check_recognises_a_benchmark_diary(text: str) -> None:
    assert FIGURE.search(text), text
