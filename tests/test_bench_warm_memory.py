"""The memory the harness touches before a cache-fill row: its size, its bound, and when it is touched."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest

from mediapipe.bench import harness, warm_memory


def _meminfo(tmp_path: Path, available_kb: int) -> str:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       99999999 kB\nMemFree:        1 kB\nMemAvailable:   {available_kb} kB\n")
    return str(path)


def test_fill_bytes_is_what_the_row_stores() -> None:
    info = {"mean_megapixels": 0.25}
    # batches x batch size x pixels x 3 bytes (RGB), with the stated slack for headers and spread
    assert warm_memory.fill_bytes(10, 64, info) == int(10 * 64 * 0.25e6 * 3 * 1.25)
    assert warm_memory.fill_bytes(10, 64, {}) == 0  # no sizes: nothing touched
    assert warm_memory.fill_bytes(10, 64, {"mean_megapixels": None}) == 0


def test_touch_memory_is_bounded_by_half_of_what_is_available(tmp_path: Path) -> None:
    meminfo = _meminfo(tmp_path, 8 * 1024)  # 8 MiB available
    assert warm_memory.touch_memory(64 << 20, meminfo) == 4 << 20  # half of it, not the 64 MiB asked
    assert warm_memory.touch_memory(1 << 20, meminfo) == 1 << 20
    assert warm_memory.touch_memory(mmap.PAGESIZE + 5, meminfo) == mmap.PAGESIZE  # whole pages
    assert warm_memory.touch_memory(0, meminfo) == 0
    assert warm_memory.touch_memory(1 << 20, str(tmp_path / "absent")) == 0  # unknown: touch nothing


def test_available_bytes_reads_meminfo(tmp_path: Path) -> None:
    assert warm_memory.available_bytes(_meminfo(tmp_path, 1234)) == 1234 * 1024
    (tmp_path / "junk").write_text("MemAvailable: lots\n")
    assert warm_memory.available_bytes(str(tmp_path / "junk")) == 0


@pytest.mark.parametrize(("backends", "touched"), [(["mediapipe-cache-fill"], True), (["mediapipe"], False)])
def test_the_harness_touches_what_the_fill_row_stores_before_its_group(
        image_folder: Path, monkeypatch: pytest.MonkeyPatch, backends: list[str], touched: bool) -> None:
    asked: list[int] = []
    monkeypatch.setattr(harness, "touch_memory", lambda n: asked.append(n) or 0)
    rep = harness.run(harness.Settings(scenarios=["image-train"], data=image_folder, backends=backends,
                                       workers=[1], batches=1, repeats=1, warmup=0, batch_size=4, progress=False))
    assert [r["error"] for r in rep["results"]] == [None]
    assert len(asked) == 1  # once per group, before its rows start
    info = rep["datasets"]["image-train"]  # the only dataset
    max_batches = 2 + 0 + 1 * (1 + 4 * 1 + 2)
    expected = warm_memory.fill_bytes(max_batches, 4, info) if touched else 0
    assert asked == [expected]
    assert (asked[0] > 0) == touched
