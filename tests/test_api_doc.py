"""docs/api.md is generated from the docstrings (mediapipe/cli/api_doc.py): the checked-in page is
what the code says now, and it holds every public op, decoder, source, sampler and loader with
each of its arguments."""

from __future__ import annotations

import difflib
import inspect
import re
from pathlib import Path

import pytest

import mediapipe as mp
from mediapipe.cli import api_doc

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def page() -> str:
    return api_doc.render()


def test_the_checked_in_reference_is_what_the_docstrings_give_now(page: str):
    written = (ROOT / "docs" / "api.md").read_text()
    if written != page:
        diff = "".join(list(difflib.unified_diff(written.splitlines(True), page.splitlines(True), "docs/api.md",
                                                 "generated"))[:60])
        pytest.fail(f"docs/api.md is out of date: run `python -m mediapipe.cli.api_doc --write`\n{diff}")


def public_names() -> list[str]:
    ops = [f"mp.augment.{n}" for n in mp.augment.__all__
           if inspect.isclass(getattr(mp.augment, n)) and issubclass(getattr(mp.augment, n), mp.augment.Op)]
    decoders = [f"mp.decoders.{n}" for n in ("image", "video", "audio", "mask")]
    sources = [f"mp.loaders.{n}" for n in mp.loaders.__all__ if inspect.isfunction(getattr(mp.loaders, n))]
    loaders = ["mediapipe.loaders.loader.Loader", "mediapipe.loaders.dali.loader.DaliLoader",
               "mediapipe.loaders.ray_loader.RayLoader", "mp.Pipeline", "pipe.loader", "loader.state_dict"]
    return ops + decoders + sources + loaders


def entry_text(page: str, name: str) -> str:
    match = re.search(rf"^### `{re.escape(name)}`\n(.*?)(?=^### |^## |\Z)", page, flags=re.S | re.M)
    assert match, f"{name} is not in the reference"
    return match.group(1)


def test_every_public_op_decoder_source_and_loader_has_an_entry_with_its_docstring(page: str):
    for name in public_names():
        text = entry_text(page, name)
        assert "```text\n" in text, f"{name}: no docstring in the reference"
    assert len(public_names()) > 60


def test_each_entry_names_every_argument_with_its_default(page: str):
    for name in mp.augment.__all__:
        cls = getattr(mp.augment, name)
        if not (inspect.isclass(cls) and issubclass(cls, mp.augment.Op)) or cls is mp.augment.Op:
            continue
        text = entry_text(page, f"mp.augment.{name}")
        for param in list(inspect.signature(cls.__init__).parameters.values())[1:]:
            written = param.name if param.default is inspect.Parameter.empty else f"{param.name}: "
            assert written in text, f"mp.augment.{name}: argument {param.name} missing"
            if param.default is not inspect.Parameter.empty:
                assert f"= {param.default!r}" in text, f"mp.augment.{name}: default of {param.name} missing"


def test_the_contents_link_to_every_section(page: str):
    headings = re.findall(r"^## (.+)$", page, flags=re.M)
    links = re.findall(r"^- \[(.+?)\]\(#([\w-]+)\)", page, flags=re.M)
    assert [title for title, _ in links] == headings[1:]  # all but "Contents" itself
    assert all(anchor == api_doc.anchor(title) for title, anchor in links)
