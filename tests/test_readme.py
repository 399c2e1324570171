"""Every ```python block of README.md runs as written, in a fresh folder after `mediapipe sample-data data`
(the command the README's first screen gives), as a newcomer runs it.

The training snippet is written at ImageNet scale (batch 256, 90 epochs, 8 workers); the test
turns those few constants down, and fails if it no longer finds them, so that it never runs
the full-size loop by accident nor silently stops testing the snippet. A block that needs a GPU
or a cluster of several machines is named in NOT_RUN_HERE with the reason; no other is left out.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

README = Path(__file__).parents[1] / "README.md"
SMALL = {  # what the snippet says -> what the test runs
    "batch_size=256": "batch_size=8",
    "num_workers=8": "num_workers=1",
    "RandomResizedCrop(224": "RandomResizedCrop(48",
    "range(loader.epoch, 90)": "range(loader.epoch, 2)",
}
def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def small(block: str) -> str:
    for written, run in SMALL.items():
        block = block.replace(written, run)
    return block


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh folder after `mediapipe sample-data data`, with every optional writer installed."""
    for package in ("datasets", "tfrecord", "lhotse", "pycocotools"):
        pytest.importorskip(package)
    root = tmp_path_factory.mktemp("readme")
    result = subprocess.run([sys.executable, "-m", "mediapipe.cli", "sample-data", "data"], cwd=root,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "skipped" not in result.stdout + result.stderr, result.stdout  # every writer is installed here
    return root


def test_readme_first_screen_says_how_to_get_the_data_its_blocks_read():
    text = README.read_text()
    first_block = text.index("```python")
    assert "mediapipe sample-data data" in text[:first_block]


def test_readme_has_the_training_snippet_with_the_constants_the_test_turns_down():
    blocks = python_blocks(README.read_text())
    assert blocks, "README.md has no ```python block"
    training = [b for b in blocks if "mp.loaders.folder(\"data/train\")" in b]
    assert len(training) == 1
    for written in SMALL:
        assert training[0].count(written) == 1, f"the training snippet no longer says {written!r}"


@pytest.mark.parametrize("number", range(len(python_blocks(README.read_text()))))
def test_readme_python_block_runs(number: int, workdir: Path):
    block = python_blocks(README.read_text())[number]
    script = workdir / f"readme_block_{number}.py"
    script.write_text(small(block))
    (workdir / "ckpt.pt").unlink(missing_ok=True)
    result = subprocess.run([sys.executable, script.name], cwd=workdir, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"README block {number} failed:\n{result.stderr[-4000:]}"
    if "ckpt.pt" in block:  # the training snippet: a checkpoint after each of its (two) epochs
        state = torch.load(workdir / "ckpt.pt")
        assert state["loader"]["sampler"]["epoch"] == 2 and state["loader"]["sampler"]["position"] == 0
        assert set(state) == {"model", "optimizer", "loader"}


def test_every_file_the_docs_name_is_in_the_repository():
    """The README and docs/architecture.md stand on their own: each repository path they name
    in backticks exists, and nothing points outside the repository."""
    root = Path(__file__).resolve().parent.parent
    for doc in ("README.md", "docs/architecture.md", "docs/coming_from.md", "docs/api.md"):
        text = (root / doc).read_text()
        assert "DESIGN.md" not in text and not re.search(r"\.\./\w", text), doc  # nothing outside the repository
        named = set(re.findall(r"`((?:docs|examples|benchmarks|mediapipe|loaders|decoders|augment|tests)/[\w/.-]+\.(?:py|md))`",
                               text))
        missing = sorted(p for p in named if not (root / p).exists())
        assert not missing, f"{doc} names files that are not in the repository: {missing}"
    readme = (root / "README.md").read_text()
    for named in ("docs/architecture.md", "docs/api.md", "docs/coming_from.md", "CHANGELOG.md", "LICENSE"):
        assert named in readme and (root / named).is_file(), named


def test_the_readme_names_every_dependency_a_plain_install_brings():
    import tomllib

    root = Path(__file__).resolve().parent.parent
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower() for d in deps}
    shown = {"av": "PyAV", "pillow": "Pillow", "pyyaml": "PyYAML"}
    sentence = (root / "README.md").read_text().split("needs only", 1)[1].split(". Extras", 1)[0]
    listed = {w.strip(" ,\n") for w in re.split(r",|\band\b", sentence)}
    assert {shown.get(n, n) for n in names} == listed, sentence
