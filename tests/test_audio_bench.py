"""The audio bench scenario's data and runners, on a handful of clips."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mediapipe.bench import audio as B


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench_audio")
    B.make_sample_audio(root, 4, seed=1)
    return root


def test_make_sample_audio_is_deterministic_and_in_range(data, tmp_path):
    paths = sorted(p.name for p in data.iterdir() if p.suffix in (".flac", ".opus"))
    assert paths == ["clip00000.flac", "clip00001.opus", "clip00002.flac", "clip00003.opus"]
    rows = [json.loads(line) for line in (data / "manifest.jsonl").read_text().splitlines()]
    assert all(2.0 <= r["duration"] <= 15.0 for r in rows)
    ticks = []
    again = B.make_sample_audio(tmp_path, 2, seed=1, progress=lambda done, total: ticks.append((done, total)))
    assert ticks == [(1, 2), (2, 2)]
    assert again[0].read_bytes() == (data / "clip00000.flac").read_bytes()


@pytest.mark.parametrize("runner", ["run_mediapipe", "run_naive", "run_dali_cpu"])
def test_runners_yield_samples_and_seconds(data, runner):
    if runner == "run_dali_cpu":
        pytest.importorskip("nvidia.dali")
    rows = [json.loads(line) for line in (data / "manifest.jsonl").read_text().splitlines()]
    total = sum(r["duration"] for r in rows)
    out = list(getattr(B, runner)(data, workers=0, device="cpu", batches=2))
    assert len(out) == 2
    for samples, seconds in out:
        assert samples >= 1 and 0 < seconds <= max(total, samples * 15.1)
    assert 0.0 <= B.padding_fraction(data) < 1.0


def test_dali_missing_is_a_runtime_error(data, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    with pytest.raises(RuntimeError, match="DALI is not installed"):
        B.run_dali_cpu(data, workers=1, device="cpu", batches=1)
    assert np.isfinite(B.padding_fraction(data))


def test_a_small_dataset_is_one_long_epoch_for_the_torch_loaders(data):
    assert B.passes_for(20, 4.0) == 6 and B.passes_for(20, 4.0, repeat=False) == 1 and B.passes_for(None, 4.0) == 1
    assert B.passes_for(10**9, 1.0) == B.MAX_PASSES
    _, one = B.mediapipe_pipeline(data)
    pipe, long = B.mediapipe_pipeline(data, batches=12, repeat=True)
    assert len(one) < 12 <= len(long)  # one epoch covers the run: the workers start once
    assert len(long.durations) % len(one.durations) == 0 and len(long.durations) > len(one.durations)
    np.testing.assert_array_equal(long.durations[len(one.durations) :][: len(one.durations)], one.durations)
    refs = [pipe.source.ref(i) for i in (0, len(one.durations))]  # pass 2 reads the same file...
    assert refs[0].blob("audio").name == refs[1].blob("audio").name and refs[0].index != refs[1].index  # ...own draws
    assert B.padding_fraction(data) < 0.5


def test_mediapipe_runner_declares_what_its_loader_prefetches():
    from pathlib import Path

    from mediapipe.bench.scenarios import open_stream

    stream = open_stream("audio-asr", "mediapipe", Path("."), device="cpu", workers=2, batch_size=None,
                         options={"max_batches": 1})  # opening starts nothing: the runner runs when iterated
    assert stream.buffered == B.run_mediapipe.buffered(2) == 2 * 2 + 1  # prefetch 2 per worker, 1 held ahead


def test_the_bench_reports_the_padding_of_its_batches(data, tmp_path):
    """The issue's padding budget (< 15%) is printed with the audio dataset's line."""
    from mediapipe.cli import main

    out = tmp_path / "r.json"
    code = main(["bench", "--data", str(data), "--scenario", "audio-asr", "--backends", "mediapipe", "--workers", "0",
                 "--batches", "2", "--repeats", "1", "--warmup", "0", "--device", "cpu", "--no-progress",
                 "--json", str(out), "--markdown", str(tmp_path / "r.md")])
    assert code == 0
    report = json.loads(out.read_text())
    padding = report["datasets"]["audio-asr"]["padding"]
    assert padding == pytest.approx(B.padding_fraction(data, batches=2)) and 0.0 <= padding < 1.0
    assert f"{100 * padding:.1f}% padding in mediapipe's batches" in (tmp_path / "r.md").read_text()
