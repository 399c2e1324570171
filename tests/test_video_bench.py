"""The video bench runners: small inputs end, the DALI peers say why they are unavailable, torchcodec
runs its own sampler (or says why it cannot), and the varied short-clip dataset is what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from mediapipe.bench import video as bv
from mediapipe.bench import video_sets as vs
from mediapipe.synthetic.video import render_frames, write_video


@pytest.fixture(scope="module")
def one_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench_videos")
    write_video(root / "only.mkv", render_frames(48, 64, 12, seed=1), gop=6)
    return root


def test_run_mediapipe_fills_a_batch_from_one_file_and_stops(one_video):
    out = list(bv.run_mediapipe(one_video, workers=0, device="cpu", batches=2, clip_len=4, stride=2,
                                size=32, batch_size=3))
    assert [clips for clips, _ in out] == [3, 3]
    # a 12-frame file with key frames at 0 and 6: a clip of frames s..s+6 decodes from the key frame
    # before s, at most the 12 frames (counted as batches arrive: summed over the run)
    assert 6 * 4 <= sum(decoded for _, decoded in out) <= 6 * 12, out


def test_naive_baseline_counts_the_frames_it_decoded_from_the_start(one_video):
    out = list(bv.run_naive_pyav(one_video, workers=0, device="cpu", batches=1, clip_len=4, stride=2,
                                 size=32, batch_size=2))
    (clips, decoded), = out
    assert clips == 2 and 2 * 7 <= decoded <= 2 * 12  # from frame 0 to each clip's last frame


def test_video_report_has_useful_and_decoded_frames_and_the_ceiling_share():
    from mediapipe.bench import report
    from mediapipe.bench.core import Rep, Result, ceiling_fractions, ratio_rows, summarise

    ours = summarise(Result("video-clips", "mediapipe", "cpu", 2, unit="clips"),
                     [Rep(batches=2, samples=16, seconds=1.0, units=640.0)], frames_per_sample=16)
    ceiling = summarise(Result("video-clips", "ceiling", "cpu", 2, unit="frames"),
                        [Rep(batches=2, samples=800, seconds=1.0)])
    dav1d = summarise(Result("video-clips", "dav1d", "cpu", 2, unit="frames"),
                      [Rep(batches=2, samples=1000, seconds=1.0)])
    assert (ours.samples_per_s, ours.useful_frames_per_s, ours.decoded_frames_per_s) == (16, 256, 640)
    assert ceiling.decoded_frames_per_s == 800
    ceiling_fractions([ours, ceiling, dav1d])
    assert ours.ceiling_fraction == 0.64 and ceiling.ceiling_fraction == 0.8  # against the faster: dav1d
    ratios = {r["peer"]: (r["ratio"], r["metric"]) for r in ratio_rows([ours, ceiling, dav1d])}
    assert ratios == {"ceiling": (0.8, "decoded frames/s"), "dav1d": (0.64, "decoded frames/s")}
    rep = {"settings": {"repeats": 1, "batches": 2}, "results": [r.as_dict() for r in (ours, ceiling, dav1d)],
           "ratios": ratio_rows([ours, ceiling, dav1d])}
    for text in (report.render_table(rep), report.render_markdown(rep)):
        assert "useful frames/s" in text and "decoded frames/s" in text and "decoded/ceiling" in text
        assert "64%" in text and "640" in text and "256" in text


def test_run_mediapipe_rejects_no_batches_instead_of_spinning(one_video):
    with pytest.raises(ValueError, match="batches=0"):
        next(bv.run_mediapipe(one_video, workers=0, device="cpu", batches=0, batch_size=3))


@pytest.mark.parametrize("runner", [bv.run_dali_cpu, bv.run_dali_gpu])
def test_dali_runners_say_not_available(one_video, runner):
    with pytest.raises(NotImplementedError, match="not available: "):
        next(runner(one_video, workers=1, device="cpu", batches=1))


def test_short_gop_sample_video_has_a_key_frame_every_16_frames(tmp_path, monkeypatch):
    from mediapipe.bench import datasets
    from mediapipe.decoders.registry import create
    from mediapipe.sample import Blob

    monkeypatch.setattr(datasets, "VIDEO_HEIGHT", 48)
    monkeypatch.setattr(datasets, "VIDEO_SECONDS", 2.0)
    keys = {}
    for name in ("sample-video", "sample-video-gop16"):
        (path,) = bv.video_files(datasets.prepare(name, root=tmp_path, count=1, progress=False))
        keys[name] = create("video", "pyav").index(Blob(str(path), path=str(path))).keyframes
    assert keys == {"sample-video": (0,), "sample-video-gop16": (0, 16, 32, 48)}  # 60 frames each


def test_torchcodec_peer_runs_its_sampler_or_says_why(one_video):
    """torchcodec's clips_at_random_indices in a DataLoader, same clip length and output size;
    where torchcodec or FFmpeg's shared libraries are missing, the runner says so (as the bench
    does for the dav1d command line)."""
    from mediapipe.bench.scenarios import SCENARIOS, why_not

    problem = bv.torchcodec_problem()
    reason = why_not(SCENARIOS["video-clips"], "torchcodec", "cpu")
    assert reason == problem
    if problem is not None:
        assert problem.startswith(("not installed", "not available"))
        with pytest.raises(NotImplementedError, match="^not (installed|available)"):
            next(bv.run_torchcodec(one_video, workers=0, device="cpu", batches=1, clip_len=4, stride=2, size=32,
                                   batch_size=2))
        return
    out = list(bv.run_torchcodec(one_video, workers=0, device="cpu", batches=2, clip_len=4, stride=2, size=32,
                                 batch_size=3))
    assert out == [3, 3]
    clip = bv._TorchcodecClips(bv.video_files(one_video), 4, 2, 32)[0]
    assert clip.shape == (4, 3, 32, 32) and clip.dtype == torch.uint8
    assert all(not torch.equal(a, b) for a, b in zip(clip, clip[1:]))  # four different frames


def test_varied_dataset_is_short_clips_of_several_sizes_containers_and_gops(tmp_path, monkeypatch):
    from mediapipe.bench import datasets
    from mediapipe.decoders.registry import create
    from mediapipe.sample import Blob

    plan = vs.varied_plan(64, 0)
    assert {p["suffix"] for p in plan} == {".mp4", ".mkv", ".webm", ".ivf"}
    assert {p["height"] for p in plan} == {240, 360, 480, 720}
    assert all(48 <= p["frames"] <= 120 and 48 <= p["gop"] <= 60 for p in plan)
    assert any(p["width"] < p["height"] for p in plan)  # portrait clips too
    assert {p["preset"] for p in plan} == set(vs.VARIED_PRESETS)  # FFmpeg's default preset among them
    monkeypatch.setattr(vs, "VARIED_HEIGHTS", (32, 48))
    files = bv.video_files(datasets.prepare("sample-video-varied", root=tmp_path, count=4, progress=False))
    assert len(files) == 4 and {f.suffix for f in files} == {".mp4", ".mkv"}
    for f, p in zip(sorted(files, key=lambda f: f.name), vs.varied_plan(4, 0)):
        index = create("video", "pyav").index(Blob(str(f), path=str(f)))
        assert index.frames == p["frames"] and index.keyframes[:2] == (0, p["gop"])[: len(index.keyframes)]


def test_clipwise_decodes_of_the_clips_equal_the_one_pass_bit_exactly(one_video):
    """The multi-clip scenario's comparison: our decoder decoding each of a video's uniform clips on
    its own gives exactly the frames the one forward pass gives, and decodes more frames for them."""
    from mediapipe.decoders.base import DecodeHint
    from mediapipe.decoders.registry import create
    from mediapipe.rng import SampleRNG
    from mediapipe.sample import Blob

    (path,) = bv.video_files(one_video)
    dataset = bv._ClipwiseClips([path], clip_len=3, stride=2, size=32, clips_per_video=3, sampling="uniform")
    clips, clipwise_frames = dataset[0]
    one_pass = create("video", "pyav", clip_len=3, stride=2, clips_per_video=3, sampling="uniform", threads=1)
    side = int(48 * bv._ClipwiseClips.AREA ** 0.5)
    hint = DecodeHint(roi=((48 - side) // 2, (64 - side) // 2, side, side), size=(32, 32))
    out = one_pass.decode(Blob(str(path), path=str(path)), hint, SampleRNG(0, 0, 0, 0), {})
    assert clips.shape == out.value.shape == (3, 3, 3, 32, 32)
    assert torch.equal(clips, out.value)
    # 12 frames, key frames at 0 and 6, clips at 0, 3.5 -> 4 and 7: one pass decodes each frame once
    assert out.frames <= 12 < clipwise_frames


def test_closure_ceiling_decodes_what_the_clips_need_and_no_more(one_video):
    """The closure ceiling plans the clips as the loader does and decodes no frame the loader's
    one pass would not: its frames per sample are at most ours, and at least the wanted ones."""
    kwargs = dict(workers=0, device="cpu", batches=2, clip_len=3, stride=2, size=32, batch_size=2,
                  clips_per_video=2, sampling="uniform")
    ceiling = list(bv.run_closure_ceiling(one_video, **kwargs))
    ours = list(bv.run_mediapipe(one_video, **kwargs))
    assert [n for n, _ in ceiling] == [n for n, _ in ours] == [2, 2]
    wanted = len({f for s in (0, 7) for f in range(s, s + 5, 2)})  # starts 0 and 7 of 12 frames
    for (_, mine), (_, theirs) in zip(ours, ceiling):
        assert 2 * wanted <= theirs <= mine


def test_single_clip_runners_refuse_the_multi_clip_scenario(one_video):
    with pytest.raises(NotImplementedError, match="one random clip"):
        next(bv.run_naive_pyav(one_video, workers=0, device="cpu", batches=1, clips_per_video=4, sampling="uniform"))


def test_multiclip_scenario_passes_its_clips_to_the_runners(one_video, monkeypatch):
    from mediapipe.bench import scenarios

    seen = {}

    def fake(**kwargs):
        seen.update(kwargs)
        yield 1

    monkeypatch.setattr(bv, "run_closure_ceiling", fake)
    stream = scenarios.open_stream("video-multiclip", "closure", one_video, device="cpu", workers=1, batch_size=None,
                                   options={"max_batches": 3})
    next(iter(stream))
    assert (seen["clip_len"], seen["clips_per_video"], seen["sampling"], seen["batch_size"]) == (8, 4, "uniform", 8)
    assert scenarios.SCENARIOS["video-multiclip"].frames_per_sample == 32


def test_torchcodec_regular_clips_for_uniform_sampling(one_video):
    """Uniform clips through torchcodec's clips_at_regular_indices; where torchcodec cannot run,
    the multi-clip runner says why instead."""
    if bv.torchcodec_problem() is not None:
        with pytest.raises(NotImplementedError, match="^not (installed|available)"):
            next(bv.run_torchcodec(one_video, workers=0, device="cpu", batches=1, clip_len=3, stride=2, size=32,
                                   batch_size=2, clips_per_video=3, sampling="uniform"))
        return
    dataset = bv._TorchcodecClips(bv.video_files(one_video), 3, 2, 32, clips_per_video=3, sampling="uniform")
    clips = dataset[0]
    assert clips.shape == (3, 3, 3, 32, 32) and clips.dtype == torch.uint8
    assert not torch.equal(clips[0], clips[-1])


def test_encoder_set_is_av1_from_other_encoders_with_its_planned_gops(tmp_path, monkeypatch):
    """The second short-clip set: libaom, rav1e and libsvtav1 files through FFmpeg's command line,
    each with the frames and the key-frame interval its plan says."""
    pytest.importorskip("imageio_ffmpeg")
    from mediapipe.bench import datasets, video_encoders
    from mediapipe.decoders.registry import create
    from mediapipe.sample import Blob

    plan = video_encoders.encoder_plan(24, 0)
    assert {p["encoder"] for p in plan} == set(video_encoders.ENCODERS)
    assert {p["gop"] for p in plan} >= {24, 250} and {p["suffix"] for p in plan} == set(video_encoders.SUFFIXES)
    monkeypatch.setattr(video_encoders, "HEIGHTS", (32, 48))
    files = bv.video_files(datasets.prepare("sample-video-encoders", root=tmp_path, count=3, progress=False))
    assert len(files) == 3
    plan = video_encoders.encoder_plan(3, 0)
    for f in files:
        p = plan[int(re.search(r"(\d{4})_g", f.name).group(1))]
        assert f.name.startswith(p["encoder"]) and f.suffix == p["suffix"]
        index = create("video", "pyav").index(Blob(str(f), path=str(f)))
        assert index.frames == p["frames"], (f, p)
        assert index.keyframes == tuple(range(0, p["frames"], p["gop"])), (f, p, index.keyframes)
