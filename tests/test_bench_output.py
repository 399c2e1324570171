"""What `mediapipe bench` prints and writes (issue 28, item 3): a verdict in words per scenario,
each scenario's pipeline, only the columns that hold something within 100 characters, the JSON
written by default and every file's path printed, a plot whose labels and legend hide nothing,
and a warning where a run is too short to trust."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mediapipe.bench import plot, report
from mediapipe.bench import verdict as verdicts_of
from mediapipe.bench.core import Rep, Result, ratio_rows, summarise
from mediapipe.cli import main

SETTINGS = {"repeats": 3, "batches": 40}


def row(scenario: str, backend: str, rate: float, *, workers: int = 8, device: str = "cpu", seconds: float = 5.0,
        data: str | None = None, **fields: Any) -> Result:
    """A measured row: ``rate`` samples/s over 3 repetitions of 40 batches that took ``seconds`` in all."""
    samples = int(rate * seconds / 3)
    reps = [Rep(batches=40, samples=samples, seconds=seconds / 3) for _ in range(3)]
    result = summarise(Result(scenario, backend, device, workers, data=data, unit="images", batch_size=64), reps)
    for name, value in fields.items():
        setattr(result, name, value)
    return result


def as_report(results: list[Result], settings: dict[str, Any] = SETTINGS, **extra: Any) -> dict[str, Any]:
    return {"settings": settings, "results": [r.as_dict() for r in results], "ratios": ratio_rows(results), **extra}


def lines_of(text: str, start: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(start)]


# -- the verdict ---------------------------------------------------------------------------------
def test_the_verdict_says_where_this_library_wins_and_loses_by_how_much() -> None:
    results = [row("image-train", "mediapipe", 1490), row("image-train", "dali", 1000),
               row("image-train", "torchvision", 573),
               row("image-eval", "mediapipe", 950), row("image-eval", "dali", 1000),
               row("image-eval", "torchvision", 365), row("image-eval", "hf-datasets", 940)]
    rep = as_report(results)
    assert verdicts_of.verdicts(rep) == [
        "image-train (cpu, 8 workers): mediapipe is 2.60x torchvision and 1.49x dali",
        "image-eval (cpu, 8 workers): mediapipe is 2.60x torchvision; level with hf-datasets (1.01x); "
        "slower than dali (0.95x)",
    ]
    text = report.render_table(rep)
    verdict = text.split("\nverdict (", 1)[1]
    assert "image-eval (cpu, 8 workers): mediapipe is 2.60x torchvision" in verdict
    assert "slower than dali (0.95x)" in " ".join(verdict.split())  # wrapped lines read the same
    assert "## Verdict" in report.render_markdown(rep) and "slower than dali (0.95x)" in report.render_markdown(rep)


def test_no_verdict_says_why() -> None:
    failed = row("image-train", "mediapipe", 0)
    failed.samples_per_s, failed.error = None, "failed in warm-up: boom"
    results = [failed, row("image-train", "dali", 1000), row("image-eval", "mediapipe", 900),
               row("video-clips", "dali", 50, workers=2)]  # no mediapipe row: nothing to say
    assert verdicts_of.verdicts(as_report(results)) == [
        "image-train (cpu, 8 workers): no verdict: mediapipe did not run (failed in warm-up: boom)",
        "image-eval (cpu, 8 workers): no verdict: no peer ran beside mediapipe",
    ]


def test_a_verdict_per_device_worker_count_and_dataset_names_another_metric() -> None:
    results = [row("image-eval", "mediapipe", 800, workers=2, data="folder"),
               row("image-eval", "dali", 400, workers=2, data="folder"),
               row("image-eval", "mediapipe", 900, workers=2, data="shards"),
               row("image-eval", "dali", 1000, workers=2, data="shards"),
               row("image-eval", "mediapipe", 3000, workers=1, device="cuda", data="folder"),
               row("image-eval", "dali", 3000, workers=1, device="cuda", data="folder")]
    assert verdicts_of.verdicts(as_report(results)) == [
        "image-eval on folder (cpu, 2 workers): mediapipe is 2.00x dali",
        "image-eval on shards (cpu, 2 workers): mediapipe is slower than dali (0.90x)",
        "image-eval on folder (cuda, 1 worker): mediapipe is level with dali (1.00x)",
    ]
    ratios = [{"peer": "ceiling", "ratio": 0.64, "metric": "decoded frames/s"},
              {"peer": "pyav", "ratio": 3.0, "metric": "clips/s"}]
    assert verdicts_of.verdict(ratios, "clips") == "mediapipe is 3.00x pyav; slower than ceiling (0.64x in decoded frames/s)"


# -- columns, width, pipeline --------------------------------------------------------------------
def test_only_columns_that_hold_something_and_lines_within_100_characters() -> None:
    results = [row("image-train", "mediapipe", 1490, first_batch_s=1.2, peak_rss_mb=900.0),
               row("image-train", "torchvision", 573, first_batch_s=0.3, peak_rss_mb=800.0),
               row("image-train", "dali", 1000)]  # DALI: no first-batch time or memory here
    rep = as_report(results, pipelines={"image-train": "RandomResizedCrop 224, horizontal flip, normalise"})
    text = report.render_table(rep)
    headers = lines_of(text, "backend")
    shown = " ".join(headers)
    for empty in ("input-bound", "MB/s", "decoded", "PSNR", "CPU", "RSS growth", "private"):
        assert empty not in shown, (empty, headers)  # '-' in every row: left out
    for full in ("samples/s (min-max)", "mediapipe/peer", "1st batch", "peak RSS"):
        assert full in shown, (full, headers)
    assert "1.49x" in lines_of(text, "dali ")[0].split()  # kept columns keep their cells
    assert "image-train: RandomResizedCrop 224, horizontal flip, normalise; batches of 64" in text.splitlines()
    assert max(map(len, text.splitlines())) <= report.WIDTH, max(text.splitlines(), key=len)
    stage_headers = [h for h in lines_of(text, "backend") if "total" in h]
    assert stage_headers and "read" not in stage_headers[0] and "step" not in stage_headers[0]  # no time: left out


def test_a_wide_table_is_split_into_blocks_that_repeat_the_row_keys() -> None:
    clip = dict(useful_frames_per_s=900.0, decoded_frames_per_s=1500.0, ceiling_fraction=0.6, first_batch_s=2.0,
                cpu_util_pct=80.0, peak_rss_mb=2000.0, rss_growth_pct=0.4, uss_mb_by_rep=[300.0],
                input_mb_per_s=12.0, input_bound=True, wait_s=0.5)
    results = [row("video-clips", "mediapipe", 60, data="sample-video-gop16-long-name", **clip),
               row("video-clips", "torchcodec", 30, data="sample-video-gop16-long-name", **clip),
               row("video-clips", "mediapipe", 55, data="other", **clip),
               row("video-clips", "torchcodec", 31, data="other", **clip)]
    text = report.render_table(as_report(results))
    assert max(map(len, text.splitlines())) <= report.WIDTH, max(text.splitlines(), key=len)
    headers = [h.split() for h in lines_of(text, "backend") if "total" not in h]
    assert len(headers) >= 2 and all(h[:4] == ["backend", "data", "device", "workers"] for h in headers)
    everything = " ".join(" ".join(h) for h in headers)
    for column in ("useful frames/s", "decoded/ceiling", "mediapipe/peer", "peak RSS", "input-bound"):
        assert column in everything, column


# -- too short to trust --------------------------------------------------------------------------
def test_a_run_too_short_to_trust_is_warned_per_scenario_with_its_rule() -> None:
    short = {"repeats": 3, "batches": 3}
    results = [row("image-train", "mediapipe", 3000, seconds=0.2), row("image-train", "dali", 2000, seconds=0.3),
               row("image-eval", "mediapipe", 3000, workers=4, seconds=5.0),
               row("image-eval", "dali", 2000, workers=4, seconds=7.0)]
    warnings = verdicts_of.short_run_warnings(as_report(results, short))
    assert set(warnings) == {"image-train", "image-eval"}  # 3 batches a repetition: both
    assert "3 batches a repetition (fewer than 10)" in warnings["image-train"]
    assert "0.20-0.30 s timed in all" in warnings["image-train"]
    assert "--batches 20 or more" in warnings["image-train"]  # 1 s needs about 15 batches a repetition
    assert "5.00-7.00 s timed in all" in warnings["image-eval"] and "--batches 10 or more" in warnings["image-eval"]

    long_enough = verdicts_of.short_run_warnings(as_report(results[2:], SETTINGS))
    assert long_enough == {}
    per_worker = verdicts_of.short_run_warnings(as_report([row("image-eval", "mediapipe", 3000, workers=32)],
                                                     {"repeats": 3, "batches": 40}))
    assert "40 batches a repetition for 32 workers (fewer than 2 per worker)" in per_worker["image-eval"]
    assert "--batches 70 or more" in per_worker["image-eval"]

    mixed = as_report([row("image-train", "mediapipe", 3000, seconds=5.0), row("image-train", "dali", 2000,
                                                                              seconds=0.5)])
    text = report.render_table(mixed)
    warning = " ".join(line.strip() for line in text.split("warning: ", 1)[1].split("\nbackend", 1)[0].splitlines())
    assert warning.startswith("too short to trust (dali cpu w8): 0.50 s timed in all.")
    assert "at least 10 batches in each repetition and 2 per worker, and 1 s of timed work" in warning
    assert "(too short to trust: see image-train's warning)" in " ".join(text.split("\nverdict (")[1].split())


# -- the command: JSON by default, paths printed, the plot ----------------------------------------
@pytest.fixture(scope="module")
def tiny_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers import write_image_folder

    return write_image_folder(tmp_path_factory.mktemp("bench-output"), 8, scale=0.3)


def test_the_json_is_written_by_default_and_every_path_printed(tiny_images: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("MEDIAPIPE_CACHE_DIR", str(tmp_path / "cache"))
    results = tmp_path / "cache" / "bench" / "results"
    results.mkdir(parents=True)
    for i in range(25):  # older runs: the newest ones are kept
        (results / f"bench-20200101-0000{i:02d}.json").write_text("{}")
    argv = ["bench", "--data", str(tiny_images), "--scenario", "image-eval", "--backends", "mediapipe",
            "--workers", "0", "--batches", "1", "--repeats", "1", "--warmup", "0", "--batch-size", "4",
            "--device", "cpu", "--no-progress", "--plot", str(tmp_path / "p.png")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    printed = dict(line.split(": ", 1) for line in out.rstrip().splitlines()[-2:])
    json_path = Path(printed["results (JSON)"])
    assert json_path.parent == results and json_path.name.startswith("bench-")
    saved = json.loads(json_path.read_text())
    assert saved["results"][0]["backend"] == "mediapipe" and saved["results"][0]["error"] is None
    assert saved["pipelines"]["image-eval"] == "resize 256, centre crop 224, normalise"
    assert "image-eval" in saved["warnings"]  # 1 batch: too short, said in the JSON too
    assert Path(printed["plot"]) == tmp_path / "p.png" and (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert len(list(results.glob("bench-*.json"))) == 20 and not (results / "bench-20200101-000000.json").exists()
    assert "image-eval: resize 256, centre crop 224, normalise; batches of 4" in out
    assert "warning: too short to trust" in out

    assert main([*argv[:-2], "--json", str(tmp_path / "nowhere" / "r.json")]) == 0  # a folder that is not there
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith(f"results (JSON): not written to {tmp_path / 'nowhere' / 'r.json'}"), last


def _overlap(a: Any, b: Any) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_the_plot_labels_do_not_run_together_and_the_legend_hides_no_line() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    backends = ("mediapipe", "mediapipe-dali", "torchvision", "torchvision-gpu", "dali", "mediapipe-hf", "hf-datasets")
    results = [row("image-train", b, 1000 + 100 * i + 50 * w, workers=w)
               for i, b in enumerate(backends) for w in (1, 2, 4, 8)]
    fig = plot.plot_figure(as_report(results))
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        bars, scaling = fig.axes[0], fig.axes[1]
        labels = [t.get_window_extent(renderer) for t in bars.get_yticklabels() if t.get_text()]
        assert len(labels) == len(backends)
        assert not any(_overlap(a, b) for i, a in enumerate(labels) for b in labels[i + 1 :])
        legend = scaling.get_legend()
        assert legend is not None and len(legend.get_texts()) == len(backends)
        assert not _overlap(legend.get_window_extent(renderer), scaling.get_window_extent(renderer))
        page = fig.bbox
        box = legend.get_window_extent(renderer)
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0  # on the page, below the axes
    finally:
        plt.close(fig)
