"""What a newcomer meets in the first hour: `mediapipe --version`, bare `mediapipe`, the help of
`convert` and `sample-data`, what `verify` says it checked, the folder source's message for a path
that is not there, and the examples' defaults (checkpoints outside the working folder, a short
detector run)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

import mediapipe as mp
from mediapipe.cli import COMMANDS
from mediapipe.cli import main as cli
from mediapipe.errors import SourceError
from tests.helpers import write_image_folder

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def help_of(capsys: pytest.CaptureFixture, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli([*argv, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare words


def example(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.strip() == f"mediapipe-loader {importlib.metadata.version('mediapipe-loader')}"
    assert mp.__version__ in out


def test_bare_mediapipe_prints_the_help_with_every_subcommand_and_exits_0(capsys):
    assert cli([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: mediapipe")
    for name in COMMANDS:
        assert name in out
    assert "sample-data" in COMMANDS and "--version" in out


def test_folder_says_does_not_exist_for_a_missing_path_and_not_a_directory_for_a_file(tmp_path: Path):
    with pytest.raises(SourceError, match="does not exist") as missing:
        mp.loaders.folder(tmp_path / "imgz")
    assert "imgz" in str(missing.value) and "not a directory" not in str(missing.value)
    (tmp_path / "one.jpg").write_bytes(b"x")
    with pytest.raises(SourceError, match="not a directory") as a_file:
        mp.loaders.folder(tmp_path / "one.jpg")
    assert "one.jpg" in str(a_file.value)


def test_convert_help_lists_every_input_it_accepts(capsys):
    text = help_of(capsys, "convert")
    for accepted in ("folder", "JSON-lines manifest", "Parquet", "Hugging Face", "save_to_disk", "TFRecord",
                     "RecordIO", "NeMo", "Lhotse", "COCO", "YOLO"):
        assert accepted in text, accepted


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    images = write_image_folder(tmp_path_factory.mktemp("images"), 6)
    out = tmp_path_factory.mktemp("converted") / "out"
    assert cli(["convert", str(images), str(out), "--workers", "1", "--no-progress", "--shard-size", "4"]) == 0
    return out


def test_verify_says_what_it_checked(converted: Path, capsys):
    capsys.readouterr()
    assert cli(["verify", str(converted)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    manifest = json.loads((converted / "manifest.json").read_text())
    shard_bytes = sum(entry["bytes"] for entry in manifest["shards"])
    assert len(manifest["shards"]) == 2
    assert "OK" in out and "2 shards" in out and "6 samples" in out and f"{shard_bytes:,} bytes" in out
    assert "sha256" in out and "member digests of 2 of 2 shards" in out and "decoded every member" in out

    assert cli(["verify", "--no-decode", str(converted)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "OK" in out and "decoded nothing (--no-decode)" in out and "decoded every member" not in out

    assert cli(["verify", "--json", str(converted)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["problems"] == []
    assert report["checked"] == {"shards": 2, "samples": 6, "bytes": shard_bytes, "shards_with_digests": 2,
                                 "decoded": True}


def test_verify_of_a_damaged_dataset_still_says_what_it_checked(converted: Path, tmp_path: Path, capsys):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(converted, broken)
    tar = sorted(broken.rglob("*.tar"))[0]
    data = bytearray(tar.read_bytes())
    data[700] ^= 0xFF  # inside the first member's data
    tar.write_bytes(bytes(data))
    capsys.readouterr()
    assert cli(["verify", "--no-decode", str(broken)]) == 1
    captured = capsys.readouterr()
    assert "problem" in captured.out and "2 shards" in captured.out and "OK" not in captured.out
    assert "FAIL" in captured.err


def test_sample_data_help_names_every_dataset_and_the_packages_that_write_them(capsys):
    from mediapipe.cli.sample_data import SAMPLE_SETS

    text = help_of(capsys, "sample-data")
    assert "nothing is downloaded" in text
    for sample in SAMPLE_SETS:
        assert sample.name in text
        if sample.needs:
            assert sample.needs in text


def test_sample_data_skips_a_dataset_whose_writer_is_not_installed_and_keeps_what_is_there(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "tfrecord", None)  # `import tfrecord` fails as if not installed
    data = tmp_path / "data"
    assert cli(["sample-data", str(data), "--only", "train.tfrecord,train.rec"]) == 0
    out = capsys.readouterr().out
    assert "skipped train.tfrecord" in out and "pip install tfrecord" in out
    assert not (data / "train.tfrecord").exists()
    assert (data / "train.rec").is_file() and (data / "train.idx").is_file()  # and the images it needs:
    source = mp.loaders.folder(data / "train")
    assert len(source) >= 64 and len(source.classes) == 10
    assert len(mp.loaders.recordio(data / "train.rec")) == len(source)
    assert not [p for p in data.iterdir() if p.name.startswith(".")]  # no staging folder left behind

    assert cli(["sample-data", str(data), "--only", "train.rec"]) == 0
    assert "kept train.rec" in capsys.readouterr().out


def test_sample_data_refuses_an_unknown_name(tmp_path: Path, capsys):
    assert cli(["sample-data", str(tmp_path / "data"), "--only", "imagenet"]) == 2
    err = capsys.readouterr().err
    assert "imagenet" in err and "train" in err


def test_examples_sample_data_says_what_it_does():
    result = subprocess.run([sys.executable, str(EXAMPLES / "sample_data.py"), "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and "usage:" in result.stdout
    assert "mediapipe sample-data" in result.stdout and "cache" in result.stdout


def test_train_classifier_writes_its_checkpoints_outside_the_working_folder(monkeypatch: pytest.MonkeyPatch):
    module = example("train_classifier", monkeypatch)
    checkpoint = module.parse_args([]).checkpoint
    assert checkpoint.is_absolute() and checkpoint.is_relative_to(tempfile.gettempdir())
    assert "checkpoints/" in (ROOT / ".gitignore").read_text().splitlines()


def test_detector_default_run_is_short_and_the_long_one_is_a_flag(monkeypatch: pytest.MonkeyPatch):
    module = example("train_detector", monkeypatch)
    short, long = module.parse_args([]), module.parse_args(["--long"])
    assert short.steps * short.size ** 2 * 4 <= long.steps * long.size ** 2  # a quarter of the work or less
    assert (long.steps, long.size) == (20, 320)
    assert module.parse_args(["--long", "--steps", "7"]).steps == 7  # a number given still counts


def test_readme_says_how_to_install_cpu_torch_and_where_the_bench_cache_is():
    text = (ROOT / "README.md").read_text()
    assert re.search(r"pip install \S*torch\S* .*--index-url https://download\.pytorch\.org/whl/cpu", text)
    assert re.search(r"\[dev\]` \| \+ [\d.]+ GB", text)  # the size of each extra, in the table
    assert "~/.cache/mediapipe" in text and "MEDIAPIPE_CACHE_DIR" in text and "rm -rf ~/.cache/mediapipe" in text
    first_screen = "\n".join(text.splitlines()[:40])
    assert "mediapipe sample-data data" in first_screen


def test_license_is_the_apache_2_text_pyproject_names_and_the_changelog_names_the_version():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    text = " ".join((ROOT / "LICENSE").read_text().split())
    assert text.startswith("Apache License Version 2.0, January 2004")
    for part in ("TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "9. Accepting Warranty or Additional "
                 "Liability.", "END OF TERMS AND CONDITIONS"):
        assert part in text
    assert f"## {project['version']}" in (ROOT / "CHANGELOG.md").read_text()
