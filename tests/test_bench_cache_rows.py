"""The bench's epoch cache rows: mediapipe-cached (filled by an untimed epoch, then read) and
mediapipe-cache-fill (every sample new to the cache), their ratios and their report lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import mediapipe as mp
from mediapipe.bench import cache_folder, images, report, scenarios
from mediapipe.bench.core import CACHE_ROWS, Result, ratio_rows


def _run(backend: str, folder: Path, batches: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list, dict, Path]:
    """The first ``batches`` batches' images of a cache row, its loader's cache counts, its folder."""
    seen: list[torch.Tensor] = []

    def record(batch):
        seen.append(batch["image"].clone())
        return int(batch["image"].shape[0])

    monkeypatch.setattr(images, "touch_image", record)
    made: list[Path] = []
    real = images.bench_cache_folder
    monkeypatch.setattr(images, "bench_cache_folder", lambda: made.append(real()) or made[-1])
    loaders: list = []  # the row's loader first, then the cached row's filling one
    pipeline_loader = mp.Pipeline.loader
    monkeypatch.setattr(mp.Pipeline, "loader", lambda self, **kw: loaders.append(pipeline_loader(self, **kw))
                        or loaders[-1])
    stream = images.open_stream("image-train", backend, folder, device="cpu", workers=1, batch_size=4,
                                options={"max_batches": 12})
    try:
        it = iter(stream)
        for _ in range(batches):
            next(it)
        counts = dict(loaders[0].stats.cache)
    finally:
        stream.close()
    return seen, counts, made[0]


def test_the_cached_row_reads_what_its_first_epoch_stored_and_the_fill_row_stores_every_sample(
        image_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cached, read, folder = _run("mediapipe-cached", image_folder, 8, monkeypatch)
    assert read.get("misses", 0) == 0 and read["hits"] >= 32, read  # 24 samples, every pass a hit
    assert not folder.exists()  # removed at close
    filled, stored, folder = _run("mediapipe-cache-fill", image_folder, 8, monkeypatch)
    assert stored.get("hits", 0) == 0 and stored["stored"] >= 32, stored
    assert not folder.exists()
    # the same draws over the same decoded images: the rows differ only in where the pixels came from
    assert len(cached) == len(filled) == 8
    assert all(torch.equal(a, b) for a, b in zip(cached, filled))


def test_a_dead_bench_process_cache_folder_is_removed_and_a_live_one_kept(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_folder, "SHM", str(tmp_path))
    dead = tmp_path / f"{cache_folder.CACHE_PREFIX}{2 ** 22 + 12345}-abc"
    live = tmp_path / f"{cache_folder.CACHE_PREFIX}{os.getpid()}-def"
    other = tmp_path / "someone-else"
    for d in (dead, live, other):
        d.mkdir()
        (d / "entry").write_bytes(b"x")
    new = cache_folder.bench_cache_folder()
    assert new.parent == tmp_path and new.name.startswith(f"{cache_folder.CACHE_PREFIX}{os.getpid()}-")
    assert not dead.exists() and live.exists() and other.exists()


def test_the_cache_rows_are_image_train_rows_and_compared_apart() -> None:
    train = scenarios.SCENARIOS["image-train"]
    assert set(CACHE_ROWS) <= set(train.backends)
    for name in CACHE_ROWS:
        assert scenarios.why_not(train, name, "cpu") is None
        assert scenarios.why_not(scenarios.SCENARIOS["image-eval"], name, "cpu").startswith("not applicable")

    def row(backend: str, rate: float, data: str = "folder") -> Result:
        return Result("image-train", backend, "cpu", 2, unit="images", samples_per_s=rate, data=data)

    rows = [row("mediapipe", 1000.0), row("mediapipe-cached", 2000.0), row("mediapipe-cache-fill", 800.0),
            row("ffcv", 1250.0), row("ffcv", 500.0, data="shards")]
    ratios = ratio_rows(rows)
    backend = {(r["peer"], r["data"]): r["ratio"] for r in ratios if r["compare"] == "backend"}
    assert backend == {("ffcv", "folder"): 0.8}  # a cache row is not a peer of this library
    cache = {(r["backend"], r["peer"]): r["ratio"] for r in ratios if r["compare"] == "cache"}
    assert cache == {("mediapipe-cached", "mediapipe"): 2.0, ("mediapipe-cached", "ffcv"): 1.6,
                     ("mediapipe-cache-fill", "mediapipe"): 0.8, ("mediapipe-cache-fill", "ffcv"): 0.64}
    lines = report.cache_lines({"ratios": ratios})
    assert lines == ["image-train cpu w2 folder: mediapipe-cached is 2.00x mediapipe, 1.60x ffcv",
                     "image-train cpu w2 folder: mediapipe-cache-fill is 0.80x mediapipe, 0.64x ffcv"]


def test_the_cache_stages_reach_the_stage_table() -> None:
    """cache_read and cache_write are worker stages: summed like decode, shown where they took time."""
    from mediapipe.bench.core import Rep, stage_table

    reps = [Rep(batches=2, samples=8, seconds=1.0, wait=0.9,
                stages={"cache_read": 0.2, "cache_write": 0.3, "decode": 0.5, "wait": 0.9})] * 2
    table = stage_table(reps)
    assert table["cache_read"] == pytest.approx(0.4) and table["cache_write"] == pytest.approx(0.6)
    columns = list(report.STAGE_COLUMNS)
    assert columns.index("read") < columns.index("cache_read") < columns.index("decode") < columns.index("cache_write")

