"""FFCV as a peer in `mediapipe bench` (issue 25, item 5): its loader on a .beton written once
per data identity, the conversion times beside ours, and the reason when FFCV is missing."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import write_image_folder
from PIL import Image

from mediapipe.bench import ffcv_peer, harness, report, scenarios
from mediapipe.bench.core import Result
from mediapipe.bench.image_data import EVAL, IMAGENET_MEAN, IMAGENET_STD, TRAIN
from mediapipe.errors import SourceError


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The bench cache, where the .beton of a user's folder goes."""
    monkeypatch.setenv("MEDIAPIPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    return write_image_folder(tmp_path / "images", 6, classes=2, scale=0.6)


def _betons(where: Path) -> list[Path]:
    return sorted(where.rglob("*.beton"))


def _in_thread(fn, timeout: float = 120.0):
    """``fn()``'s result, failing the test (not hanging it) when it does not return in time."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"did not return in {timeout:.0f} s (FFCV's writer hangs when a worker fails)"
    if "error" in out:
        raise out["error"]
    return out["value"]


# run in a process of its own: FFCV's compiled (numba) pipelines leave finalizers that fail when
# collected (KeyError in numba's dispatcher), which breaks pytest's own imports at the session's end
STREAM_SCRIPT = """
import os, sys
import torch
from pathlib import Path
from mediapipe.bench import ffcv_peer, scenarios

seen, real = [], ffcv_peer.touch_image
ffcv_peer.touch_image = lambda batch: (seen.append(batch["image"].clone()), real(batch))[1]
out = {}
for scenario in sys.argv[2:]:
    seen.clear()
    stream = scenarios.open_stream(scenario, "ffcv", Path(sys.argv[1]), device="cpu", workers=0, batch_size=4,
                                   options={"max_batches": 2})
    batches = iter(stream)
    out[scenario] = {"delivered": [next(batches) for _ in range(2)], "images": list(seen)}
    stream.close()
torch.save(out, Path(sys.argv[1]).parent / "batches.pt")
sys.stdout.flush()
os._exit(0)
"""


def _batches(data: Path, *scenario_names: str) -> dict:
    """Per scenario: what the ffcv stream delivered for 2 batches of 4, and the image tensors it touched."""
    done = subprocess.run([sys.executable, "-c", STREAM_SCRIPT, str(data), *scenario_names], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(data.parent / "batches.pt")


def test_ffcv_streams_normalised_float_batches_of_both_scenarios(folder: Path, cache: Path) -> None:
    pytest.importorskip("ffcv")
    got = _batches(folder, TRAIN, EVAL)
    assert got[TRAIN]["delivered"] == got[EVAL]["delivered"] == [(4, None), (4, None)]
    train, evals = got[TRAIN]["images"], got[EVAL]["images"]
    assert len(train) == len(evals) == 2
    for image in (*train, *evals):
        assert image.shape == (4, 3, 224, 224) and image.dtype == torch.float32
    low = min((0 - m) / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD))
    high = max((1 - m) / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD))
    assert low - 1e-3 <= float(train[0].min()) and float(train[0].max()) <= high + 1e-3
    # image-eval in order: its first image is the first of the folder, the centre 224/256 of its
    # shorter side resized to 224, RGB, normalised (the .beton re-encodes it: close, not equal)
    first = sorted(folder.rglob("*.jpg"))[0]
    with Image.open(first) as im:
        rgb = im.convert("RGB")
    side = int(min(rgb.size) * 224 / 256)
    left, top = (rgb.width - side) // 2, (rgb.height - side) // 2
    crop = np.asarray(rgb.crop((left, top, left + side, top + side)).resize((224, 224), Image.Resampling.BOX))
    expected = (crop / 255.0 - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)
    got = evals[0][0].permute(1, 2, 0).numpy()
    assert np.abs(got - expected).mean() < 0.08  # a channel swap or a flip is ~0.5 and more
    assert len(_betons(cache)) == 1  # one .beton for the folder, reused by the second scenario


def test_beton_is_reused_until_the_folder_changes(folder: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ffcv")
    writes = []
    real = ffcv_peer.write_beton
    monkeypatch.setattr(ffcv_peer, "write_beton", lambda *a, **k: (writes.append(a[1]), real(*a, **k))[1])
    first = ffcv_peer.ensure_beton(folder, workers=1)
    stamp = first.stat().st_mtime_ns
    assert ffcv_peer.ensure_beton(folder, workers=1) == first and first.stat().st_mtime_ns == stamp
    assert len(writes) == 1 and first.parent == cache / "bench" / "ffcv"
    image = sorted(folder.rglob("*.jpg"))[0]
    flipped = io.BytesIO()
    Image.open(image).transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(flipped, format="JPEG", quality=90)
    image.write_bytes(flipped.getvalue())
    second = ffcv_peer.ensure_beton(folder, workers=1)
    assert second != first and len(writes) == 2
    assert _betons(cache) == [second]  # the stale one is gone
    (folder / "class0" / "extra.jpg").write_bytes(image.read_bytes())  # one more image: rewritten again
    third = ffcv_peer.ensure_beton(folder, workers=1)
    assert third not in (first, second) and len(writes) == 3 and _betons(cache) == [third]


def test_builtin_data_gets_its_beton_beside_it(tmp_path: Path, cache: Path) -> None:
    pytest.importorskip("ffcv")
    data = write_image_folder(tmp_path / "sample-images-v3-n4-s0", 4, classes=2, scale=0.4)
    (data / ".complete").write_text("{}")  # what mediapipe.bench.datasets marks a finished dataset with
    beton = ffcv_peer.ensure_beton(data, workers=1)
    assert beton.parent == tmp_path and beton.name.startswith("sample-images-v3-n4-s0-ffcv-")
    assert not cache.exists()


def test_beton_uses_the_as_shards_max_side_and_quality(monkeypatch: pytest.MonkeyPatch) -> None:
    from mediapipe.bench import datasets
    from mediapipe.dataset.transcode import TranscodeOptions

    expected = TranscodeOptions(**datasets.SHARD_TRANSCODE)
    settings = ffcv_peer.as_shards_settings()
    assert (settings.max_resolution, settings.jpeg_quality) == (expected.image_max_side, expected.jpeg_quality)
    monkeypatch.setitem(datasets.SHARD_TRANSCODE, "image_max_side", 384)  # --as-shards changed: the .beton follows
    monkeypatch.setitem(datasets.SHARD_TRANSCODE, "jpeg_quality", 80)
    assert ffcv_peer.as_shards_settings() == ffcv_peer.BetonSettings(384, 80, "jpg")


def test_a_broken_image_fails_the_write_naming_it(folder: Path, cache: Path) -> None:
    pytest.importorskip("ffcv")
    bad = folder / "class1" / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    with pytest.raises(SourceError, match="broken.jpg") as info:
        _in_thread(lambda: ffcv_peer.ensure_beton(folder, workers=2))
    assert "FFCV's .beton" in str(info.value) and "1 of 7 images failed" in str(info.value)
    assert _betons(cache) == [] and not list(cache.rglob("*.tmp-*"))


def test_an_image_larger_than_a_page_is_written_not_hung(tmp_path: Path, cache: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """FFCV cannot split a sample over pages and its writer waits forever for a worker that
    failed on one: the page is sized to the largest image."""
    pytest.importorskip("ffcv")
    monkeypatch.setattr(ffcv_peer, "MIN_PAGE_BYTES", 1 << 21)  # FFCV's smallest page: a small image overflows it
    monkeypatch.setattr(ffcv_peer, "as_shards_settings", lambda: ffcv_peer.BetonSettings(None, 100))
    (tmp_path / "noise" / "c0").mkdir(parents=True)
    noise = np.random.default_rng(0).integers(0, 256, (1200, 1200, 3), dtype=np.uint8)  # > 2 MiB at q100
    Image.fromarray(noise).save(tmp_path / "noise" / "c0" / "noise.jpg", quality=100)
    rows = ffcv_peer.image_rows(tmp_path / "noise")
    assert ffcv_peer.page_bytes(rows, ffcv_peer.as_shards_settings()) >= 1200 * 1200 * 3
    beton = _in_thread(lambda: ffcv_peer.ensure_beton(tmp_path / "noise", workers=1))
    assert beton.is_file()


def test_why_not_names_the_install_commands_when_ffcv_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    train, evals = scenarios.SCENARIOS[TRAIN], scenarios.SCENARIOS[EVAL]
    assert "ffcv" in scenarios.BACKENDS and "ffcv" in train.backends and "ffcv" in evals.backends
    monkeypatch.setitem(sys.modules, "ffcv", None)  # importing it now fails; find_spec finds nothing
    expected = ("not installed: ffcv (apt-get install -y --no-install-recommends pkg-config libopencv-dev "
                "libturbojpeg0-dev g++; pip install ffcv==1.0.2)")
    assert scenarios.why_not(train, "ffcv", "cpu") == expected
    assert scenarios.why_not(evals, "ffcv", "cpu") == expected
    with pytest.raises(NotImplementedError, match="not available: ffcv cannot be imported"):
        ffcv_peer.import_ffcv()
    assert "CPU" in scenarios.why_not(train, "ffcv", "cuda")
    assert scenarios.why_not(scenarios.SCENARIOS["video-clips"], "ffcv", "cpu").startswith("not applicable")


def test_conversion_times_are_measured_and_printed(folder: Path, cache: Path) -> None:
    pytest.importorskip("ffcv")
    rows = _in_thread(lambda: ffcv_peer.measure_conversions(folder, workers=1))
    assert [r["tool"] for r in rows] == ["mediapipe convert", "mediapipe convert --reencode", "ffcv DatasetWriter"]
    for r in rows:
        assert r["images"] == 6 and r["workers"] == 1 and r["images_per_s"] > 0 and r["mb_written"] > 0
    assert "copy" in rows[0]["does"] and rows[1]["does"] == rows[2]["does"] == "decode + encode"
    fake = {"results": [], "conversions": [{"data": "images", **r} for r in rows]}
    table = report.render_table(fake)
    assert "conversion of images" in table and "ffcv DatasetWriter" in table
    assert f"{rows[2]['images_per_s']:.0f}" in table and f"JPEG q{ffcv_peer.as_shards_settings().jpeg_quality}" in table
    assert "ffcv DatasetWriter" in report.render_markdown(fake)


def test_bench_runs_ffcv_beside_mediapipe_with_the_conversion_table(folder: Path, cache: Path) -> None:
    pytest.importorskip("ffcv")
    settings = harness.Settings(scenarios=[TRAIN], data=folder, backends=["mediapipe", "ffcv"], workers=[1],
                                batches=2, repeats=1, warmup=0, batch_size=4, progress=False)
    rep = harness.run(settings)
    rows = {r["backend"]: r for r in rep["results"]}
    assert rows["ffcv"]["error"] is None, rows["ffcv"]["error"]
    assert rows["ffcv"]["samples_per_s"] > 0 and rows["ffcv"]["first_batch_s"] > 0
    assert {r["peer"] for r in rep["ratios"]} >= {"ffcv"}
    assert [c["tool"] for c in rep["conversions"]] == ["mediapipe convert", "mediapipe convert --reencode",
                                                       "ffcv DatasetWriter"]
    text = report.render_table(rep)
    assert "ffcv" in text and "conversion" in text
    assert len(_betons(cache)) == 1


def test_the_report_without_conversions_has_no_conversion_table() -> None:
    assert "conversion of" not in report.render_table({"results": []})


# -- FFCV's output quality against the full-decode reference ------------------------------------------
def test_the_centre_box_is_the_formula_and_ffcvs() -> None:
    # int(224/256 * 300) = 262; margins (300 - 262) // 2 = 19 and (400 - 262) // 2 = 69
    assert ffcv_peer.center_box(300, 400, 224 / 256) == (19, 69, 262, 262)
    assert ffcv_peer.center_box(401, 299, 0.5) == (126, 75, 149, 149)  # (401 - 149) // 2, (299 - 149) // 2
    rgb_image = pytest.importorskip("ffcv.fields.rgb_image")
    for h, w in [(300, 400), (401, 299), (33, 1000), (224, 224)]:
        assert ffcv_peer.center_box(h, w, 224 / 256) == tuple(rgb_image.get_center_crop(h, w, None, 224 / 256))


def test_the_reference_is_torchvisions_resized_crop_of_the_same_region() -> None:
    tvf = pytest.importorskip("torchvision.transforms.v2.functional")
    from mediapipe.synthetic import photo_like

    image = photo_like(300, 400, 5)
    got = ffcv_peer.reference_crop(image, (20, 70, 260, 260), (300, 400), 224)
    want = tvf.resized_crop(torch.from_numpy(image).permute(2, 0, 1), 20, 70, 260, 260, [224, 224],
                            antialias=True).permute(1, 2, 0).numpy()
    assert got.shape == (224, 224, 3) and np.abs(got.astype(int) - want.astype(int)).max() <= 1
    # a box in a .beton stored at half the size is the same region of the source
    assert np.array_equal(ffcv_peer.reference_crop(image, (10, 35, 130, 130), (150, 200), 224), got)


QUALITY_SCRIPT = """
import json, os, sys
from pathlib import Path
from mediapipe.bench import ffcv_peer

data = Path(sys.argv[1])
beton = ffcv_peer.ensure_beton(data, workers=1)
good = ffcv_peer.ffcv_quality(data, beton, samples=4)
box = ffcv_peer.center_box
ffcv_peer.center_box = lambda h, w, r: (lambda t, l, a, b: (t + 4, l + 4, a, b))(*box(h, w, r))
shifted = ffcv_peer.ffcv_quality(data, beton, samples=4)
print(json.dumps({"good": good, "shifted": shifted}))
sys.stdout.flush()
os._exit(0)
"""


def test_ffcv_output_is_scored_against_the_same_region_of_the_source(folder: Path, cache: Path) -> None:
    pytest.importorskip("ffcv")
    import json

    done = subprocess.run([sys.executable, "-c", QUALITY_SCRIPT, str(folder)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    scores = json.loads(done.stdout.strip().splitlines()[-1])
    good, shifted = scores["good"], scores["shifted"]
    assert good["samples"] == 4 and good["op"] == "CenterCropRGBImageDecoder"
    assert 30 < good["min_db"] <= good["median_db"] < 100  # a q90 re-encode and another resize: close, not exact
    assert shifted["median_db"] < good["median_db"] - 5  # the box is where FFCV crops: 4 pixels off is far worse


def test_the_psnr_column_shows_ffcvs_own_quality() -> None:
    row = Result(TRAIN, "ffcv", "cpu", 2, samples_per_s=10.0, samples_per_s_min=9.0, samples_per_s_max=11.0,
                 quality={"samples": 48, "median_db": 43.97, "min_db": 40.74, "p10_db": 42.2,
                          "max_abs_error": 28}).as_dict()
    text = report.render_table({"results": [row]})
    assert "PSNR med/min" in text and "44.0/40.7 dB" in text
    assert "43.97" not in report.render_table({"results": [{**row, "quality": {"samples": 0, "error": "x"}}]})
