"""``mediapipe bench --suggest``: each worker setting of the grid and auto measured in the same
rounds; the suggestion is the fastest fixed setting; image and audio pipelines."""

from __future__ import annotations

import json

import pytest

from mediapipe.bench import audio as B
from mediapipe.bench.suggest import render_suggestion, run_suggest, suggest_grid
from mediapipe.cli import main
from mediapipe.loaders.auto_workers import WorkerSetting, worker_grid

GRID = [WorkerSetting(1, "process"), WorkerSetting(1, "thread")]


def _check(result: dict, grid: list[WorkerSetting], repeats: int) -> None:
    rows = {r["setting"]: r for r in result["rows"]}
    assert list(rows) == [str(s) for s in grid]
    assert all(len(r["samples_per_s_reps"]) == repeats and r["samples_per_s"] > 0 for r in rows.values())
    best = max(rows.values(), key=lambda r: r["samples_per_s"])
    assert result["suggested"] == best["setting"] and best["vs_best"] == 1.0
    assert all(0 < r["vs_best"] <= 1.0 for r in rows.values())
    auto = result["auto"]
    assert len(auto["chosen"]) == repeats and auto["samples_per_s"] > 0
    assert auto["vs_best"] == pytest.approx(auto["samples_per_s"] / best["samples_per_s"])


def test_the_grid_is_autos_and_each_process_setting_deeper():
    grid = suggest_grid()
    assert grid[: len(worker_grid())] == worker_grid()
    assert {s for s in grid if s.prefetch == 4} == {WorkerSetting(s.num_workers, "process", 4)
                                                     for s in worker_grid() if s.worker_type == "process"}


def test_an_image_scenario_gives_each_setting_and_auto_and_the_fastest(image_folder):
    result = run_suggest("image-train", image_folder, batches=2, repeats=2, batch_size=4, grid=GRID, auto_grid=GRID)
    _check(result, GRID, 2)
    text = render_suggestion(result)
    assert f"suggest: pipe.loader({result['suggested']})" in text and "num_workers='auto'" in text


def test_audio_and_video_scenarios_give_their_loaders(tmp_path):
    """The loaders --suggest measures on an audio and a video scenario: the bench's own pipelines."""
    from mediapipe.bench.suggest import scenario_loader_maker
    from mediapipe.bench.video_sets import make_sample_videos

    B.make_sample_audio(tmp_path / "audio", 4, seed=1)
    with scenario_loader_maker("audio-asr", tmp_path / "audio", "cpu", 3) as make:
        batch = next(iter(make(num_workers=1, worker_type="thread")))
        assert batch["audio"].shape[-2] == B.N_MELS and batch["index"].numel() >= 1  # log-mel (B, ..., mels, frames)
    make_sample_videos(tmp_path / "video", 2, seed=1, height=64, seconds=1.0)
    with scenario_loader_maker("video-clips", tmp_path / "video", "cpu", 2, batch_size=2) as make:
        batch = next(iter(make(num_workers=1)))
        assert tuple(batch["video"].shape[:2]) == (2, 16)
    with scenario_loader_maker("video-multiclip", tmp_path / "video", "cpu", 2, batch_size=2) as make:
        batch = next(iter(make(num_workers=1)))
        assert tuple(batch["video"].shape[:3]) == (2, 4, 8)  # the scenario's 4 clips of 8 frames, not one of 16


def test_the_command_prints_the_suggestion_and_writes_json(image_folder, tmp_path, capsys, monkeypatch):
    import mediapipe.bench.suggest as S

    monkeypatch.setattr(S, "suggest_grid", lambda: list(GRID))
    monkeypatch.setattr("mediapipe.loaders.auto_workers.worker_grid", lambda: list(GRID))
    code = main(["bench", "--suggest", "--data", str(image_folder), "--scenario", "image-train,detection-train",
                 "--batches", "2", "--repeats", "1", "--batch-size", "4", "--no-progress",
                 "--json", str(tmp_path / "s.json")])
    out = capsys.readouterr()
    assert code == 0 and "suggest: pipe.loader(num_workers=1" in out.out
    assert "detection-train is skipped" in out.err
    saved = json.loads((tmp_path / "s.json").read_text())["suggestions"]
    assert [s["scenario"] for s in saved] == ["image-train"]
