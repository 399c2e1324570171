"""What `mediapipe inspect` and `mediapipe convert` tell a person: GOP lengths as key-frame
spacing, no `None` class for flat folders, a resume summary of this run's work, each failure
once, reasons without FFmpeg's error numbers, the file a full disk stopped, progress lines in
a log."""

from __future__ import annotations

import builtins
import errno
import functools
import json
import re
import subprocess
from pathlib import Path

import pytest

import mediapipe.dataset.convert as convert_module
import mediapipe.dataset.convert_run as convert_run
from mediapipe.cli import main
from mediapipe.cli.progress import Progress
from mediapipe.dataset import safe_io, shard_writer
from mediapipe.dataset.inspect import format_summary, gop_lengths, summarize
from mediapipe.dataset.layout import MANIFEST
from mediapipe.dataset.sample_records import read_samples
from mediapipe.synthetic import jpeg_bytes, photo_like
from mediapipe.synthetic.video import render_frames, write_video
from tests.helpers import cli_argv, write_image_folder


def cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_cli(*args: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    """``mediapipe ARGS`` in a fresh interpreter (its logging configured as a user's would be)."""
    return subprocess.run(cli_argv(*args, kill_at=kill_at), capture_output=True, text=True, timeout=300)


# -- inspect ------------------------------------------------------------------------------------
def test_gop_lengths_are_key_frame_spacings_without_the_last_partial_gop() -> None:
    assert gop_lengths([0, 16, 32], 40) == [16, 16]  # frames 32..39: a partial GOP, no length
    assert gop_lengths([0, 16, 32, 48], 63) == [16, 16, 16]  # (frames / key frames said 15.75)
    assert gop_lengths([0, 16, 30, 46], 50) == [16, 14, 16]  # a scene cut's early key frame
    assert gop_lengths([0], 10) == [] and gop_lengths([], 10) == []
    assert gop_lengths([16, 0, 0, 90], 40) == [16]  # unordered, repeated, past the end: tolerated


@pytest.fixture(scope="module")
def gop16_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three AV1 clips of 40, 20 and 10 frames, converted with a key frame every 16 frames."""
    root = tmp_path_factory.mktemp("gop16")
    (root / "clips" / "walk").mkdir(parents=True)
    for name, frames, seed in (("long", 40, 1), ("mid", 20, 2), ("short", 10, 3)):
        write_video(root / "clips" / "walk" / f"{name}.mkv", render_frames(48, 64, frames, seed=seed), fps=10,
                    gop=40)
    out = root / "out"
    assert main(["convert", str(root / "clips"), str(out), "--keyframe-interval", "16", "--crf", "50",
                 "--preset", "12", "--no-progress"]) == 0
    return out


def test_inspect_reports_the_gop_length_a_keyframe_interval_gives(gop16_dataset: Path, capsys) -> None:
    keyframes = sorted(r["keyframes"] for r in read_samples(gop16_dataset))
    assert keyframes == [[0], [0, 16], [0, 16, 32]]
    summary = summarize(gop16_dataset)
    assert summary["gop"] == {"16": 3} and summary["single_keyframe_videos"] == 1
    code, out, _ = cli(capsys, "inspect", str(gop16_dataset))
    assert code == 0
    assert "  GOP: 16 frames (every video but 1 video with a single key frame)" in out.splitlines(), out
    assert "frames per key frame" not in out


def test_inspect_gop_wording_for_one_length_several_lengths_and_none() -> None:
    base = {"path": "d", "complete": True, "samples": 3, "shards": 1, "bytes": 2_000_000, "fields": ["mkv"],
            "failures": 0, "kinds": {"video": 3}, "codecs": {}, "classes": {"walk": 3}, "unlabelled": 0,
            "max_side": {}, "duration": {}, "fps": {}, "total_duration_s": 0.0}
    assert "  GOP: 16 frames (every video)" in format_summary({**base, "gop": {"16": 7}, "single_keyframe_videos": 0})
    mixed = format_summary({**base, "gop": {"14": 1, "16": 6}, "single_keyframe_videos": 2})
    assert "  GOP lengths in frames (whole GOPs): 14: 1, 16: 6; 2 videos with a single key frame" in mixed
    assert "  GOP: none (every video has a single key frame)" in format_summary(
        {**base, "gop": {}, "single_keyframe_videos": 3})
    assert "GOP" not in format_summary({**base, "gop": {}, "single_keyframe_videos": 0})  # images: no line


def test_inspect_histograms_run_in_ascending_order() -> None:
    from collections import Counter

    from mediapipe.dataset.inspect import _ascending

    assert list(_ascending(Counter({"<=512px": 1, ">4096px": 1, "<=256px": 2}))) == ["<=256px", "<=512px", ">4096px"]
    assert list(_ascending(Counter({"30": 4, "24": 1, "29.97": 2}))) == ["24", "29.97", "30"]
    assert list(_ascending(Counter({">300s": 1, "<=5s": 3, "<=1s": 1}))) == ["<=1s", "<=5s", ">300s"]


def test_inspect_of_a_flat_folder_says_there_are_no_classes(tmp_path: Path, capsys) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    for i in range(3):
        (flat / f"{i}.jpg").write_bytes(jpeg_bytes(photo_like(40, 56, i)))
    assert main(["convert", str(flat), str(tmp_path / "out"), "--no-progress"]) == 0
    capsys.readouterr()
    code, out, _ = cli(capsys, "inspect", str(tmp_path / "out"))
    assert code == 0 and "None" not in out, out
    assert "  classes: none (no class folders or labels)" in out.splitlines()
    assert "3 samples in 1 shard," in out
    summary = summarize(tmp_path / "out")
    assert summary["classes"] == {} and summary["unlabelled"] == 3


# -- convert ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six good JPEGs in two classes, and three inputs that cannot be converted: a file that
    is no image, no video and no audio for their decoders."""
    root = write_image_folder(tmp_path_factory.mktemp("mixed"), 6, classes=2, scale=0.2)
    (root / "class0" / "broken.jpg").write_bytes(b"this is not a JPEG " * 20)
    (root / "class0" / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage " * 40)
    (root / "class1" / "broken.flac").write_bytes(b"fLaC" + b"\x00" * 60)
    return root


def test_failure_reasons_carry_no_error_numbers_or_object_reprs(mixed_source: Path, tmp_path: Path) -> None:
    result = convert_module.convert(mixed_source, tmp_path / "out", shuffle=False)
    reasons = {f["input"]: f["reason"] for f in result.failures}
    assert set(reasons) == {"class0/broken.jpg", "class0/broken.mp4", "class1/broken.flac"}, reasons
    for text in reasons.values():
        assert not re.search(r"Errno|'<none>'|object at 0x|avcodec_|\(\)", text), reasons
    assert reasons["class0/broken.jpg"] == "image: not an image format Pillow recognises"
    assert reasons["class0/broken.mp4"] == "video: Invalid data found when processing input"
    assert reasons["class1/broken.flac"].startswith("audio: "), reasons


@pytest.mark.parametrize("verbose", [False, True])
def test_each_failure_is_printed_once(mixed_source: Path, tmp_path: Path, verbose: bool) -> None:
    result = run_cli(*(["-v"] if verbose else []), "convert", str(mixed_source), str(tmp_path / "out"),
                     "--no-progress")
    assert result.returncode == 1, result.stderr
    for name in ("broken.jpg", "broken.mp4", "broken.flac"):
        assert result.stderr.count(name) == 1, result.stderr
    assert "FAILED class0/broken.mp4: video: Invalid data found when processing input" in result.stderr
    assert "3 inputs could not be converted;" in result.stderr


def test_a_resume_reports_this_runs_work_not_the_whole_dataset(mixed_source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["convert", str(mixed_source), str(out), "--shard-size", "3", "--no-shuffle", "--no-progress"]
    killed = run_cli(*args, kill_at="commit:1")  # shard 0 (broken.jpg, broken.mp4, an image) done, then SIGKILL
    assert killed.returncode < 0 or killed.returncode == 137, killed.stderr
    resumed = run_cli(*args, "--resume")
    lines = resumed.stdout.splitlines()
    assert lines[0] == ("resumed: 3 of 9 inputs already converted by an earlier run (1 of 3 shards; "
                        "2 of those failed)"), resumed.stdout
    assert lines[1].startswith("this run: 5/6 inputs converted into 2 shards ("), resumed.stdout
    assert lines[1].endswith("; 1 failed"), resumed.stdout
    assert lines[2].startswith("dataset: 6 samples in 3 shards, ") and lines[2].endswith("; 3 inputs failed in all")
    assert resumed.stderr.count("FAILED") == 1, resumed.stderr  # this run's; the earlier ones are counted
    assert "FAILED class1/broken.flac: audio: " in resumed.stderr
    assert "3 inputs could not be converted (2 of them by an earlier run)" in resumed.stderr

    again = run_cli(*args, "--resume")  # nothing left: no "6/9 inputs converted ... files/s"
    lines = again.stdout.splitlines()
    assert lines[0] == ("resumed: 9 of 9 inputs already converted by an earlier run (3 of 3 shards; "
                        "3 of those failed)"), again.stdout
    assert lines[1].startswith("this run converted nothing: no input was left ("), again.stdout
    assert "files/s" not in again.stdout and "FAILED" not in again.stderr, again


def test_the_python_result_counts_a_resumed_runs_work(mixed_source: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = convert_module.convert(mixed_source, out, shard_size=3, shuffle=False)
    again = convert_module.convert(mixed_source, out, shard_size=3, shuffle=False, resume=True)
    assert (again.resumed_shards, again.resumed_inputs, again.resumed_samples) == (3, 9, 6)
    assert again.new_failures == [] and len(again.failures) == len(first.failures) == 3
    assert again.bytes_in == 0 and first.resumed_shards == 0 and first.new_failures == first.failures


@pytest.mark.parametrize("partial", [".shard-000000.tar.partial", ".manifest.json.partial",
                                     ".samples.jsonl.gz.partial"])
def test_a_full_disk_names_the_file_being_written(mixed_source: Path, tmp_path: Path, partial: str, capsys,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails with ENOSPC (the kernel's own, from Linux's /dev/full) names that file."""
    real_open = builtins.open

    def open_on_a_full_disk(path, mode="r", *args, **kwargs):
        if str(path).endswith(partial) and "w" in mode:
            return real_open("/dev/full", mode, *args, **kwargs)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(shard_writer, "open", open_on_a_full_disk, raising=False)  # the shard writer's
    monkeypatch.setattr(safe_io, "open", open_on_a_full_disk, raising=False)  # write_atomic's
    out = tmp_path / "out"
    code, _, err = cli(capsys, "convert", str(mixed_source), str(out), "--no-progress")
    assert code == 2
    assert f"mediapipe convert: error: No space left on device: {out / partial}" in err, err
    assert "Errno" not in err and "--resume" in err
    with pytest.raises(OSError) as raised:
        convert_module.convert(mixed_source, tmp_path / "again")
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path / "again" / partial)


def test_without_a_terminal_progress_is_lines_in_the_log(mixed_source: Path, tmp_path: Path, capsys,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr is not a terminal here: complete lines (no carriage returns), every interval."""
    monkeypatch.setattr(convert_run, "Progress", functools.partial(Progress, log_every=0.0))
    convert_module.convert(mixed_source, tmp_path / "out", progress=True, shuffle=False)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "\r" not in err and "\x1b" not in err, repr(err)
    counts = [int(m.group(1)) for m in map(re.compile(r"^convert: (\d+)/9 files, ").match, lines) if m]
    assert counts and counts == sorted(counts) and counts[-1] == 9 and len(counts) >= 5, lines
    assert json.loads((tmp_path / "out" / MANIFEST).read_text())["complete"]
