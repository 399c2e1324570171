"""`mediapipe bench`: end to end on a tiny dataset, the JSON fields, stage accounting, missing backends."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mediapipe.bench import core, datasets, harness, plot, report, scenarios
from mediapipe.bench.core import Rep, Result, ratio_rows, stage_table, stages_add_up, summarise
from mediapipe.cli import main

RESULT_FIELDS = {"scenario", "backend", "device", "workers", "samples_per_s", "samples_per_s_min",
                 "samples_per_s_max", "stages", "peak_rss_mb", "rss_growth_pct", "error"}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@pytest.fixture(scope="module")
def bench_run(image_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    argv = ["bench", "--data", str(image_folder), "--scenario", "image-train,image-eval", "--workers", "1",
            "--batches", "2", "--repeats", "2", "--warmup", "0", "--batch-size", "8", "--step-ms", "1",
            "--device", "cpu", "--no-progress", "--json", str(out / "r.json"), "--markdown", str(out / "r.md"),
            "--plot", str(out / "r.png")]
    code = main(argv)
    return {"code": code, "dir": out, "report": json.loads((out / "r.json").read_text())}


def test_end_to_end_json_has_the_documented_fields(bench_run: dict) -> None:
    assert bench_run["code"] == 0
    rep = bench_run["report"]
    assert rep["machine"]["cores"] == os.cpu_count()
    assert "torch" in rep["machine"]["versions"]
    rows = rep["results"]
    assert {(r["scenario"], r["backend"]) for r in rows} >= {("image-train", "mediapipe"), ("image-eval", "torchvision")}
    for r in rows:
        assert RESULT_FIELDS <= set(r), sorted(RESULT_FIELDS - set(r))
        assert r["device"] == "cpu" and r["workers"] == 1
        if r["error"] is None:
            assert 0 < r["samples_per_s_min"] <= r["samples_per_s"] <= r["samples_per_s_max"]
            assert len(r["samples_per_s_reps"]) == 2
            assert r["peak_rss_mb"] > 50  # a process with torch imported, at least
            assert r["rss_growth_pct"] is not None and r["first_batch_s"] > 0
            assert len(r["uss_mb_by_rep"]) == 2 and 0 < r["uss_mb_by_rep"][0] < r["peak_rss_mb"]
            # private <= proportional <= resident, summed over the tree after each repetition
            assert len(r["pss_mb_by_rep"]) == 2
            assert all(u <= p <= rss for u, p, rss in zip(r["uss_mb_by_rep"], r["pss_mb_by_rep"], r["rss_mb_by_rep"]))
            assert r["decoded_mpix_per_s"] > 0 and r["input_mb_per_s"] > 0
            assert r["stages"]["total"] > 0 and r["input_bound"] in (True, False)
            assert r["epochs"] > 2  # 24 images, batches of 8: the stream ran over several passes
        else:
            assert isinstance(r["error"], str) and r["error"]


def test_every_installed_backend_ran(bench_run: dict) -> None:
    by = {(r["scenario"], r["backend"]): r for r in bench_run["report"]["results"]}
    for scenario in ("image-train", "image-eval"):
        assert by[scenario, "mediapipe"]["error"] is None
        assert by[scenario, "torchvision"]["error"] is None
        if _installed("nvidia.dali"):
            assert by[scenario, "dali"]["error"] is None, by[scenario, "dali"]["error"]
        else:
            assert by[scenario, "dali"]["error"].startswith("not installed")
        if _installed("mediapipe.loaders.dali.loader") and _installed("nvidia.dali"):
            assert by[scenario, "mediapipe-dali"]["error"] is None, by[scenario, "mediapipe-dali"]["error"]
    ratios = {(r["scenario"], r["peer"]) for r in bench_run["report"]["ratios"]}
    assert ("image-train", "torchvision") in ratios


def test_stage_times_add_up_to_the_total(bench_run: dict) -> None:
    for r in bench_run["report"]["results"]:
        if r["error"] is not None:
            continue
        st = r["stages"]
        consumer = sum(st.get(k, 0.0) for k in ("wait", "host_to_device", "device_ops", "step", "other"))
        assert consumer == pytest.approx(st["total"], rel=1e-6)
        assert stages_add_up(st), (r["backend"], st)  # the harness's own time stays within the slack
        if r["backend"] == "mediapipe":  # this library reports its worker stages too
            assert st["decode"] > 0 and st["read"] >= 0
            assert st["step"] >= 2 * 2 * 0.001  # 2 repetitions x 2 batches x 1 ms


def test_each_batch_stage_op_has_its_cost_per_image(bench_run: dict) -> None:
    """image-train's batch ops run in the workers: their seconds add up to within the batch
    stage's, and the report gives each op's microseconds per image."""
    row = next(r for r in bench_run["report"]["results"] if (r["scenario"], r["backend"]) == ("image-train", "mediapipe"))
    ops = {k: v for k, v in row["stages"].items() if k.startswith("op:")}
    assert set(ops) == {"op:Normalize"}  # the flip is done by Normalize, inside its time
    assert 0 < sum(ops.values()) <= row["stages"]["worker_batch_ops"]
    lines = report.op_cost_lines(bench_run["report"], "image-train")
    assert lines[0].startswith("mediapipe (cpu, 1 workers): batch-stage ops, worker µs per image: Normalize ")
    assert all(" Normalize " in line for line in lines)  # every row of this library's loader (on HF files too)
    assert "batch-stage ops" in report.render_table(bench_run["report"])
    assert "batch-stage ops" in (bench_run["dir"] / "r.md").read_text()


def test_outputs_written(bench_run: dict) -> None:
    out = bench_run["dir"]
    md = (out / "r.md").read_text()
    assert "## image-train" in md and "mediapipe" in md
    assert (out / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = report.render_table(bench_run["report"])
    assert "mediapipe / peer" in text and "samples/s" in text


def test_the_tables_explain_their_columns_and_backends(bench_run: dict) -> None:
    rep = bench_run["report"]
    text = report.render_table(rep)
    legend = text.split("\nlegend:\n", 1)[1]
    for column in ("private", "RSS growth", "input-bound", "PSNR med/min", "mediapipe/peer"):
        assert f"\n  {column}: " in "\n" + legend, column
    ran = {r["backend"] for r in rep["results"] if r.get("error") is None}
    for backend in ran:
        assert f"\n  {backend}: " in "\n" + legend, backend
    assert "\n  pyav: " not in "\n" + legend  # only what the report shows
    assert "## Legend" in report.render_markdown(rep)


def test_every_backend_has_its_own_plot_colour() -> None:
    from mediapipe.bench.legend import BACKENDS as described

    colours = [plot.backend_colour(b) for b in scenarios.BACKENDS]
    assert len(set(colours)) == len(colours)
    assert set(scenarios.BACKENDS) <= set(described)  # and every backend is in the legend


def test_the_fused_paths_psnr_stands_next_to_its_speed(bench_run: dict) -> None:
    rep = bench_run["report"]
    for scenario, op in (("image-train", "RandomResizedCrop"), ("image-eval", "Resize")):
        quality = rep["datasets"][scenario]["fused_psnr"][scenario]
        assert quality["samples"] == 24 and quality["op"] == op  # the fixture's 24 images
        assert 38.0 <= quality["median_db"] <= 100.0 and quality["min_db"] >= 28.0
    rows = {(r["scenario"], r["backend"]): r for r in rep["results"]}
    assert report._psnr(rep, rows["image-train", "mediapipe"]) != "-"
    assert report._psnr(rep, rows["image-train", "torchvision"]) == "-"  # the peers' paths are not fused
    text = report.render_table(rep)
    assert "PSNR med/min" in text


def test_missing_backend_is_reported_with_its_reason(image_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = scenarios._installed
    monkeypatch.setattr(scenarios, "_installed", lambda m: False if m.startswith("nvidia.dali") else real(m))
    monkeypatch.setattr(scenarios, "cuda_available", lambda: False)
    rep = harness.run(harness.Settings(scenarios=["image-train"], data=image_folder, devices=["cpu", "cuda"],
                                       backends=["dali", "mediapipe-dali", "pyav"], workers=[1], progress=False))
    errors = {(r["backend"], r["device"]): r["error"] for r in rep["results"]}
    assert errors["dali", "cpu"].startswith("not installed: NVIDIA DALI")
    assert errors["mediapipe-dali", "cpu"].startswith("not installed")
    assert "no CUDA device" in errors["dali", "cuda"]
    assert errors["pyav", "cpu"].startswith("not applicable")
    assert "not installed: NVIDIA DALI" in report.render_table(rep)


def test_missing_video_module_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mediapipe.bench.video", None)  # importing it now fails
    reason = scenarios.why_not(scenarios.SCENARIOS["video-clips"], "mediapipe", "cpu")
    assert reason.startswith("not available: mediapipe.bench.video cannot be imported")
    assert scenarios.why_not(scenarios.SCENARIOS["video-clips"], "torchvision", "cpu").startswith("not applicable")
    assert "CPU only" in scenarios.why_not(scenarios.SCENARIOS["video-clips"], "dav1d", "cuda")


def test_summary_median_spread_growth_and_input_bound() -> None:
    reps = [Rep(batches=2, samples=100, seconds=1.0, wait=0.5, step=0.2, cpu_seconds=1.5, end_rss_mb=100.0,
                peak_rss_mb=120.0, stages={"wait": 0.4, "transfer": 0.1, "decode": 1.0}),
            Rep(batches=2, samples=100, seconds=0.5, wait=0.0, step=0.2, cpu_seconds=1.0, end_rss_mb=110.0,
                peak_rss_mb=130.0),
            Rep(batches=2, samples=100, seconds=0.25, wait=0.0, step=0.2, cpu_seconds=0.5, end_rss_mb=125.0)]
    row = summarise(Result("image-train", "mediapipe", "cpu", 2, unit="images", step_ms=100.0), reps,
                    dataset={"mean_bytes": 1e5, "mean_megapixels": 0.5}, cores=2)
    assert (row.samples_per_s_min, row.samples_per_s, row.samples_per_s_max) == (100.0, 200.0, 400.0)
    assert row.input_mb_per_s == pytest.approx(20.0) and row.decoded_mpix_per_s == pytest.approx(100.0)
    assert row.rss_growth_pct == pytest.approx(25.0) and row.peak_rss_mb == 130.0
    assert row.cpu_cores_used == pytest.approx(3.0 / 1.75) and row.cpu_util_pct == pytest.approx(50 * 3.0 / 1.75)
    assert row.input_bound is True  # waited 0.5 s against 0.6 s of steps
    st = row.stages
    assert st["wait"] == pytest.approx(0.4 + 0.0 + 0.0)  # the loader's own wait where it reports one
    assert st["host_to_device"] == pytest.approx(0.1) and st["decode"] == pytest.approx(1.0)
    assert st["other"] == pytest.approx(1.75 - 0.4 - 0.1 - 0.6)


def test_stage_slack_catches_stages_that_exceed_the_total() -> None:
    assert not stages_add_up(stage_table([Rep(batches=1, samples=1, seconds=1.0, wait=2.0)]))
    assert not stages_add_up(stage_table([Rep(batches=1, samples=1, seconds=1.0, wait=0.1)]))  # 0.9 s unexplained
    assert stages_add_up(stage_table([Rep(batches=1, samples=1, seconds=1.0, wait=0.95)]))


def test_ratios_compare_like_with_like() -> None:
    rows = [Result("video-clips", "mediapipe", "cpu", 2, unit="clips", samples_per_s=10.0, frames_per_s=160.0),
            Result("video-clips", "pyav", "cpu", 2, unit="clips", samples_per_s=5.0, frames_per_s=80.0),
            Result("video-clips", "ceiling", "cpu", 2, unit="frames", samples_per_s=320.0, frames_per_s=320.0),
            Result("video-clips", "dali", "cpu", 2, unit="clips", error="not available: x"),
            Result("video-clips", "pyav", "cpu", 4, unit="clips", samples_per_s=9.0)]
    got = {(r["peer"], r["workers"]): (r["ratio"], r["metric"]) for r in ratio_rows(rows)}
    assert got == {("pyav", 2): (2.0, "clips/s"), ("ceiling", 2): (0.5, "frames/s")}


def test_sample_images_are_deterministic_and_imagenet_like(tmp_path: Path) -> None:
    a = datasets.sample_images(tmp_path / "a", count=6, seed=3, progress=False, processes=1)
    b = datasets.sample_images(tmp_path / "b", count=6, seed=3, progress=False, processes=1)
    files_a = sorted(p.relative_to(a) for p in a.rglob("*.jpg"))
    assert len(files_a) == 6 and files_a == sorted(p.relative_to(b) for p in b.rglob("*.jpg"))
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files_a)
    info = datasets.describe(a, "image")
    assert info["samples"] == 6 and 0.08 < info["mean_megapixels"] < 0.8 and info["mean_bytes"] > 5000
    assert datasets.sample_images(tmp_path / "a", count=6, seed=3, progress=False) == a  # cached: not redone
    assert not list((tmp_path / "a").glob("*.tmp-*"))


def test_sample_photos_vary_as_photo_collections_do(tmp_path: Path) -> None:
    import io

    from PIL import Image

    plan = [item for items in datasets._photo_plan(300, seed=0) for item in items]
    sides = [side for item in plan for side in (item["height"], item["width"])]
    assert min(sides) >= 300 and max(sides) <= 1200 and max(sides) - min(sides) > 700
    assert {item["subsampling"] for item in plan} == {0, 1, 2}
    for trait in ("progressive", "restart", "exif", "grey"):
        assert 0 < sum(item[trait] for item in plan) < len(plan), trait
    a = datasets.sample_photos(tmp_path / "a", count=8, seed=1, progress=False, processes=1)
    b = datasets.sample_photos(tmp_path / "b", count=8, seed=1, progress=False, processes=1)
    files = sorted(p.relative_to(a) for p in a.rglob("*.jpg"))
    assert len(files) == 8 and all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    for f in files:
        data = (a / f).read_bytes()
        with Image.open(io.BytesIO(data)) as im:
            assert 300 <= min(im.size) and max(im.size) <= 1200
    assert datasets.prepare("sample-photos", root=tmp_path / "a", count=8, seed=1, progress=False).parent == tmp_path / "a"


def test_fused_psnr_sees_a_fused_path_that_is_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's PSNR measures something that can fail: a fused output shifted by a pixel shows."""
    import torch

    from mediapipe import augment as A
    from mediapipe.bench.fused_quality import fused_psnr
    from mediapipe.synthetic import jpeg_bytes, photo_like

    for i in range(6):
        (tmp_path / f"img{i}.jpg").write_bytes(jpeg_bytes(photo_like(520, 700, seed=i)))
    good = fused_psnr("image-train", tmp_path, samples=6)
    assert good["samples"] == 6 and good["min_db"] >= 28.0 and good["backend"] in ("nvimgcodec", "turbo")
    shifted = A.RandomResizedCrop.apply_decoded
    monkeypatch.setattr(A.RandomResizedCrop, "apply_decoded",
                        lambda self, x, params: torch.roll(shifted(self, x, params), 1, dims=-1))
    bad = fused_psnr("image-train", tmp_path, samples=6)
    assert bad["median_db"] < 35.0 < good["median_db"]


def test_process_tree_memory_and_cpu() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(64 << 20); time.sleep(30)"])
    try:
        for _ in range(100):
            if (core.rss_mb(child.pid) or 0) > 60:
                break
            subprocess.run([sys.executable, "-c", "pass"])  # let the child allocate
        assert child.pid in core.tree_pids(os.getpid())
        assert core.tree_rss_mb(os.getpid()) >= core.rss_mb(os.getpid()) + 60
        assert core.tree_cpu_seconds(os.getpid()) > 0
    finally:
        child.kill()
        child.wait()


def test_cli_rejects_bad_arguments(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--workers", "two"])
    assert exc.value.code == 2
    assert main(["bench", "--scenario", "image-nope", "--no-progress"]) == 2
    assert "unknown scenario 'image-nope'" in capsys.readouterr().err


def test_manifest_converted_and_flat_datasets_feed_every_image_backend(image_folder: Path, image_manifest: Path,
                                                                   converted_images: Path, tmp_path: Path) -> None:
    converted = converted_images  # (the module's conversion, shared with the two-dataset run below)
    assert len(list(converted.glob("*.tar"))) > 1
    flat = tmp_path / "flat"  # no class sub-folders
    flat.mkdir()
    for p in image_folder.rglob("*.jpg"):
        (flat / f"{p.parent.name}_{p.name}").write_bytes(p.read_bytes())
    backends = ["mediapipe", "torchvision"] + (["dali"] if _installed("nvidia.dali") else [])
    for data in (image_manifest, converted, flat):
        rep = harness.run(harness.Settings(scenarios=["image-eval"], data=data, backends=backends, workers=[1],
                                           batches=1, repeats=1, warmup=0, batch_size=8, progress=False))
        assert rep["datasets"]["image-eval"]["samples"] == 24
        assert rep["datasets"]["image-eval"]["mean_megapixels"] > 0
        for r in rep["results"]:
            assert r["error"] is None, (data.name, r["backend"], r["error"])
            assert r["samples_per_s"] > 0


def test_small_datasets_are_repeated_as_one_long_epoch(image_folder: Path) -> None:
    from mediapipe.bench import images
    from mediapipe.loaders.sources.folder import folder

    assert images.passes({"max_batches": 10}, 8, 24) == 5  # 80 samples needed: 4 passes, and one spare
    assert images.passes({"max_batches": 10, "repeat": False}, 8, 24) == 1
    assert images.passes({"max_batches": 2}, 64, 1000) == 2
    inner = folder(image_folder)
    repeated = images.RepeatedSource(inner, 3)
    assert len(repeated) == 72 and repeated.classes == inner.classes
    ref = repeated.ref(30)
    assert ref.index == 30 and ref.key == inner.ref(6).key and ref.label == inner.ref(6).label
    pipe = images.mediapipe_pipeline("image-train", image_folder, "cpu", 8, options={"max_batches": 10})
    assert len(pipe.source) == 24 * 5


def test_worker_sweep_gives_one_row_per_count_and_a_scaling_plot(image_folder: Path, tmp_path: Path) -> None:
    rep = harness.run(harness.Settings(scenarios=["image-train"], data=image_folder, backends=["mediapipe"],
                                       workers=[0, 2], batches=1, repeats=1, warmup=0, batch_size=8, progress=False))
    rows = rep["results"]
    assert [(r["workers"], r["error"]) for r in rows] == [(0, None), (2, None)]
    assert all(r["samples_per_s"] > 0 for r in rows)
    plot.write_plot(rep, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 10_000


def test_a_backend_that_fails_is_reported_and_the_run_goes_on(image_folder: Path, tmp_path: Path) -> None:
    data = tmp_path / "broken"
    (data / "a").mkdir(parents=True)
    for p in sorted(image_folder.rglob("*.jpg"))[:4]:
        (data / "a" / p.name).write_bytes(p.read_bytes())
    (data / "a" / "zz_broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    rep = harness.run(harness.Settings(scenarios=["image-eval"], data=data, backends=["mediapipe", "nope"],
                                       workers=[1], batches=1, repeats=1, warmup=0, batch_size=5, progress=False))
    errors = {r["backend"]: r["error"] for r in rep["results"]}
    assert errors["nope"].startswith("unknown backend")
    assert "failed in warm-up" in errors["mediapipe"] and "zz_broken.jpg" in errors["mediapipe"]


# -- several datasets, cold cache, --as-shards ---------------------------------------------------
@pytest.fixture(scope="module")
def converted_images(image_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("conv") / "converted"
    assert main(["convert", str(image_folder), str(out), "--shard-size", "100KB", "--workers", "1",
                 "--no-progress"]) == 0
    return out


def test_two_datasets_alternate_in_one_run_with_cold_cache(image_folder: Path, converted_images: Path,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mediapipe.dataset import measure as conversion

    evicted: list[list[Path]] = []
    real_evict = conversion.evict_from_page_cache

    def spy(paths: list[Path]) -> None:
        evicted.append([Path(p) for p in paths])
        real_evict(paths)

    monkeypatch.setattr(conversion, "evict_from_page_cache", spy)
    argv = ["bench", "--data", str(image_folder), "--data", str(converted_images), "--scenario", "image-eval",
            "--backends", "mediapipe,torchvision", "--workers", "1", "--batches", "2", "--repeats", "1",
            "--warmup", "0", "--batch-size", "8", "--device", "cpu", "--no-progress", "--cold-cache",
            "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md"), "--plot", str(tmp_path / "r.png")]
    assert main(argv) == 0
    rep = json.loads((tmp_path / "r.json").read_text())
    folder, shards = image_folder.name, converted_images.name
    rows = {(r["backend"], r["data"]): r for r in rep["results"]}
    assert set(rows) == {(b, d) for b in ("mediapipe", "torchvision") for d in (folder, shards)}
    for r in rows.values():
        assert r["error"] is None, (r["backend"], r["data"], r["error"])
        assert r["samples_per_s"] > 0 and len(r["samples_per_s_reps"]) == 1
    assert rep["data"]["image-eval"][shards]["layout"] == "converted"
    assert rep["data"]["image-eval"][folder]["layout"] == "folder"
    assert rep["datasets"]["image-eval"]["path"] == str(image_folder)  # the first dataset, as before

    across = {(r["backend"], r["data"], r["peer_data"]): r["ratio"] for r in rep["ratios"] if r["compare"] == "data"}
    assert set(across) == {("mediapipe", shards, folder), ("torchvision", shards, folder)}
    m = rows["mediapipe", shards]["samples_per_s"] / rows["mediapipe", folder]["samples_per_s"]
    assert across["mediapipe", shards, folder] == pytest.approx(m)
    peers = {(r["data"], r["peer"]) for r in rep["ratios"] if r["compare"] == "backend"}
    assert peers == {(folder, "torchvision"), (shards, "torchvision")}  # like with like: same dataset

    # --cold-cache: recorded, and each timed repetition evicted its own dataset's files, and only those
    assert rep["settings"]["cold_cache"] is True and rep["settings"]["data"] == [str(image_folder),
                                                                                 str(converted_images)]
    assert len(evicted) == 4  # 4 rows x 1 repetition
    jpgs = set(image_folder.rglob("*.jpg"))
    tars = set(converted_images.glob("*.tar"))
    assert sum(set(call) >= jpgs and not set(call) & tars for call in evicted) == 2
    assert sum(set(call) >= tars and not set(call) & jpgs for call in evicted) == 2
    assert rep["data"]["image-eval"][shards]["evicted_files"] >= len(tars)

    text = report.render_table(rep)
    assert "cold page cache" in text and f"vs {folder}" in text
    assert f"mediapipe on {shards} / mediapipe on {folder}" in text
    md = (tmp_path / "r.md").read_text()
    assert "## Same backend across datasets" in md and f"| {shards} |" in md
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_cold_cache_nothing_is_evicted(image_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mediapipe.dataset import measure as conversion

    calls: list[object] = []
    monkeypatch.setattr(conversion, "evict_from_page_cache", calls.append)
    rep = harness.run(harness.Settings(scenarios=["image-eval"], data=image_folder, backends=["mediapipe"],
                                       workers=[0], batches=1, repeats=1, warmup=0, batch_size=8, progress=False))
    assert rep["results"][0]["error"] is None and rep["results"][0]["data"] == image_folder.name
    assert calls == [] and rep["settings"]["cold_cache"] is False
    assert "cold page cache" not in report.render_table(rep)
    assert not [r for r in rep["ratios"] if r["compare"] == "data"]  # one dataset: nothing to compare across


def test_data_labels_and_bad_data_settings(image_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a, b = tmp_path / "a" / "imgs", tmp_path / "b" / "imgs"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    assert harness.data_labels([a, tmp_path / "other"]) == ["imgs", "other"]
    assert harness.data_labels([a, b]) == [f"folder:{a}", f"folder:{b}"]  # equal names: kind and path
    with pytest.raises(ValueError, match="given twice"):
        harness.Settings(data=[a, a])
    with pytest.raises(ValueError, match="--as-shards converts the built-in"):
        harness.Settings(data=[a], as_shards=True)
    with pytest.raises(ValueError, match="no image scenario"):
        harness.Settings(scenarios=["audio-asr"], as_shards=True)
    assert main(["bench", "--data", str(image_folder), "--as-shards", "--no-progress"]) == 2
    assert "--as-shards" in capsys.readouterr().err
    assert main(["bench", "--data", str(image_folder), "--data", str(tmp_path / "nope"), "--no-progress"]) == 2


def test_as_shards_converts_the_sample_images_once_and_runs_both(tmp_path: Path) -> None:
    settings = harness.Settings(scenarios=["image-eval"], dataset="sample-images", as_shards=True, count=12,
                                cache_dir=tmp_path, backends=["mediapipe"], workers=[0], batches=1, repeats=1,
                                warmup=0, batch_size=4, progress=False)
    rep = harness.run(settings)
    assert [(r["data"], r["error"]) for r in rep["results"]] == [("folder", None), ("shards", None)]
    folder = Path(rep["data"]["image-eval"]["folder"]["path"])
    shards = Path(rep["data"]["image-eval"]["shards"]["path"])
    assert shards == folder.with_name(folder.name + datasets.SHARDS_SUFFIX)
    assert rep["data"]["image-eval"]["shards"]["layout"] == "converted"
    assert rep["data"]["image-eval"]["shards"]["samples"] == 12
    tar_bytes = b"".join(p.read_bytes() for p in shards.glob("*.tar"))
    assert all(p.read_bytes() in tar_bytes for p in folder.rglob("*.jpg"))  # copied, not re-encoded
    assert {(r["backend"], r["data"], r["peer_data"]) for r in rep["ratios"]} == {("mediapipe", "shards", "folder")}
    stamp = (shards / datasets.MARKER).stat().st_mtime_ns
    assert datasets.sample_image_shards(folder, progress=False) == shards  # cached: not converted again
    assert (shards / datasets.MARKER).stat().st_mtime_ns == stamp
    assert not list(tmp_path.rglob("*.tmp-*"))


def test_a_report_without_data_labels_renders_as_before(bench_run: dict) -> None:
    old = json.loads(json.dumps(bench_run["report"]))
    for r in old["results"]:
        r.pop("data")
    old["ratios"] = [r for r in old["ratios"] if r["compare"] != "cache"]  # the epoch cache rows came later
    for r in old["ratios"]:
        r.pop("compare")
        r.pop("data")
    old.pop("data")
    text = report.render_table(old)
    assert "x torchvision" in text and "same backend across datasets" not in text  # the verdict found the ratio
    header = next(line for line in text.splitlines() if line.startswith("backend"))
    assert " data " not in header
    peer_rows = [line for line in text.splitlines() if line.startswith("torchvision ")]
    assert any(row.rstrip().endswith("x") for row in peer_rows)  # the mediapipe/peer ratio found without data labels
