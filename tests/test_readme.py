"""Every ```python block of README.md runs as written, against generated sample images in data/train.

The training snippet is written at ImageNet scale (batch 256, 90 epochs, 8 workers); the test
turns those few constants down, and fails if it no longer finds them, so that it never runs
the full-size loop by accident nor silently stops testing the snippet.
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
    """A folder holding data/train: 24 sample images in ten class folders; the same images as a
    Hugging Face dataset (data/hf, data/hf.parquet), a TFRecord and a RecordIO file;
    data/speech: three utterances with a NeMo and a Lhotse manifest; and data/coco: 16 photos
    with objects, as COCO annotations and YOLO labels."""
    from mediapipe.bench.datasets import sample_images

    root = tmp_path_factory.mktemp("readme")
    made = sample_images(root / "made", count=24, progress=False, processes=1)
    (root / "data").mkdir()
    made.rename(root / "data" / "train")
    write_other_formats(root / "data")
    from mediapipe.synthetic.detection import write_detection_dataset

    write_detection_dataset(root / "data" / "coco", count=16, yolo=True)
    return root


def write_other_formats(data: Path) -> None:
    """data/train's images by each format's own writer, and a small speech set."""
    import json

    import datasets
    import lhotse
    import numpy as np
    import soundfile
    import tfrecord

    from tests.helpers import write_rec

    source = __import__("mediapipe").loaders.folder(data / "train")
    images = [(next(iter(source.ref(i).blobs.values())).read(), source.ref(i).label) for i in range(len(source))]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=source.classes),
                                  "caption": datasets.Value("string")})
    ds = datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b, _ in images],
                                     "label": [label for _, label in images],
                                     "caption": [f"picture {i} of class {label}" for i, (_, label) in enumerate(images)]},
                                    features=features)
    ds.save_to_disk(str(data / "hf"))
    ds.to_parquet(str(data / "hf.parquet"))
    writer = tfrecord.TFRecordWriter(str(data / "train.tfrecord"))
    for image, label in images:
        writer.write({"image/encoded": (image, "byte"), "image/class/label": (label, "int")})
    writer.close()
    write_rec(data / "train.rec", [(float(label), i, image) for i, (image, label) in enumerate(images)])
    speech = data / "speech"
    speech.mkdir()
    rows, recordings = [], []
    for i, text in enumerate(["hello there", "general kenobi", "you are a bold one"]):
        t = np.arange(16000 + 8000 * i) / 16000
        soundfile.write(speech / f"utt{i}.flac", (0.3 * np.sin(2 * np.pi * (180 + 60 * i) * t)).astype("float32"), 16000)
        rows.append({"audio_filepath": f"utt{i}.flac", "duration": len(t) / 16000, "text": text})
        recordings.append(lhotse.Recording.from_file(speech / f"utt{i}.flac", recording_id=f"utt{i}"))
    (speech / "manifest.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    supervisions = [lhotse.SupervisionSegment(f"s{i}", f"utt{i}", 0.0, r["duration"], text=r["text"])
                    for i, r in enumerate(rows)]
    lhotse.CutSet.from_manifests(recordings=lhotse.RecordingSet.from_recordings(recordings),
                                 supervisions=lhotse.SupervisionSet.from_segments(supervisions)
                                 ).to_file(speech / "cuts.jsonl.gz")


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
    for doc in ("README.md", "docs/architecture.md"):
        text = (root / doc).read_text()
        assert "DESIGN.md" not in text and not re.search(r"\.\./\w", text), doc  # nothing outside the repository
        named = set(re.findall(r"`((?:docs|examples|benchmarks|mediapipe|loaders|decoders|augment|tests)/[\w/.-]+\.(?:py|md))`",
                               text))
        missing = sorted(p for p in named if not (root / p).exists())
        assert not missing, f"{doc} names files that are not in the repository: {missing}"
    assert "docs/architecture.md" in (root / "README.md").read_text()


def test_the_readme_names_every_dependency_a_plain_install_brings():
    import tomllib

    root = Path(__file__).resolve().parent.parent
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower() for d in deps}
    shown = {"av": "PyAV", "pillow": "Pillow", "pyyaml": "PyYAML"}
    sentence = (root / "README.md").read_text().split("needs only", 1)[1].split(". Extras", 1)[0]
    listed = {w.strip(" ,\n") for w in re.split(r",|\band\b", sentence)}
    assert {shown.get(n, n) for n in names} == listed, sentence
