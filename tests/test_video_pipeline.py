"""Video through mp.Pipeline: batch layout, YUV on the device, temporal ops, determinism across
workers and resume, bad input under each on_error policy, and the NVDEC backend's probing."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.functional.video import held_frames, select_frames
from mediapipe.decoders.registry import create, decoder_class
from mediapipe.synthetic.video import read_counter, render_frames, write_video
from tests.helpers import state_after

H, W = 48, 64


@pytest.fixture(scope="module")
def video_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six AV1 clips of 20 to 40 frames in two class folders, in MP4, MKV and IVF."""
    root = tmp_path_factory.mktemp("videos")
    for i in range(6):
        folder = root / f"class{i % 2}"
        folder.mkdir(exist_ok=True)
        suffix = ("mp4", "mkv", "ivf")[i % 3]
        write_video(folder / f"v{i}.{suffix}", render_frames(H, W, 20 + 4 * i, seed=i), gop=8)
    return root


def pipeline(root: Path, augment=(), on_error: str = "raise", **video) -> mp.Pipeline:
    options = {"clip_len": 6, "stride": 2, **video}
    return mp.Pipeline(mp.loaders.folder(root), {"video": mp.decoders.video(**options)}, list(augment),
                       batch_size=4, seed=3, device="cpu", on_error=on_error)


TRAIN_OPS = [A.RandomResizedCrop(32, scale=(0.3, 1.0), key="video"), A.HorizontalFlip(key="video"),
             A.TemporalReverse(p=0.5), A.FrameDrop(p=0.3)]


def collect(loader) -> list[dict[str, torch.Tensor]]:
    return [{k: v.clone() for k, v in b.items() if isinstance(v, torch.Tensor)} for b in loader]


def assert_same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k


def test_batches_are_clips_with_one_crop_per_clip(video_folder):
    batches = collect(pipeline(video_folder, TRAIN_OPS[:1]).loader(shuffle=False))
    video = torch.cat([b["video"] for b in batches])
    assert video.shape == (6, 6, 3, 32, 32) and video.dtype == torch.uint8
    assert batches[0]["label"].tolist() == [0, 0, 0, 1]


def test_same_batches_with_0_or_2_workers_and_after_resume(video_folder):
    pipe = pipeline(video_folder, TRAIN_OPS)
    inline = collect(pipe.loader(num_workers=0))
    assert_same(inline, collect(pipe.loader(num_workers=2)))
    state = state_after(pipe.loader(num_workers=0), 1)
    resumed = pipe.loader(num_workers=2)
    resumed.load_state_dict(state)
    assert_same(inline[1:], collect(resumed))
    other_seed = mp.Pipeline(pipe.source, pipe.decode, pipe.augment, batch_size=4, seed=4, device="cpu")
    assert not torch.equal(collect(other_seed.loader(num_workers=0))[0]["video"], inline[0]["video"])


def test_yuv_output_converted_on_the_device_and_cthw_layout(video_folder):
    ops = [A.Resize((24, 32), key="video"), A.YUVToRGB(matrix="bt601", range="limited"),
           A.ClipLayout("CTHW")]
    yuv = collect(pipeline(video_folder, ops, output="yuv", sampling="uniform").loader(shuffle=False))
    rgb = collect(pipeline(video_folder, ops[:1] + ops[2:], output="rgb", sampling="uniform").loader(shuffle=False))
    assert yuv[0]["video"].shape == (4, 3, 6, 24, 32)
    assert_same(yuv, rgb)  # worker-side and batch-side conversion give the same bytes
    # matrix/range "auto" (the default): the graph carries each stream's colour as video_colour
    auto = [A.Resize((24, 32), key="video"), A.YUVToRGB(), A.ClipLayout("CTHW")]
    from_stream = collect(pipeline(video_folder, auto, output="yuv", sampling="uniform").loader(shuffle=False))
    assert from_stream[0]["video_colour"].dtype == torch.int64 and from_stream[0]["video_colour"].shape == (4,)
    assert_same(from_stream, rgb)


def test_several_clips_per_video_stack_on_a_leading_dim(video_folder):
    pipe = pipeline(video_folder, [A.CenterCrop(32, key="video")], clips_per_video=3, sampling="uniform")
    batch = next(iter(pipe.loader(shuffle=False)))
    assert batch["video"].shape == (4, 3, 6, 3, 32, 32)
    first = batch["video"][0]
    assert not torch.equal(first[0], first[2])  # different places in the video


def test_temporal_ops_pick_the_frames_they_say(video_folder):
    clip = torch.arange(10).reshape(10, 1, 1, 1).expand(10, 3, 2, 2)
    rng = mp.rng.SampleRNG(0, 0, 0, 0)
    jitter = A.TemporalJitter(num_frames=4, strides=(2, 3))
    params = jitter.sample_params(rng, {"shape": tuple(clip.shape)})
    picked = jitter.apply(clip, params)[:, 0, 0, 0]
    step = int(picked[1] - picked[0])
    assert step in (2, 3) and picked.tolist() == [int(picked[0]) + k * step for k in range(4)]
    assert A.UniformTemporalSubsample(4).apply(clip, {})[:, 0, 0, 0].tolist() == [0, 3, 6, 9]
    batch = torch.stack([clip, clip])
    reversed_ = A.TemporalReverse().apply(batch, {"reverse": torch.tensor([True, False])})
    assert reversed_[0, :, 0, 0, 0].tolist() == list(range(9, -1, -1))
    assert torch.equal(reversed_[1], clip)
    keep = torch.tensor([[True, False, False, True, False], [True] * 5])
    assert held_frames(keep).tolist() == [[0, 0, 0, 3, 3], [0, 1, 2, 3, 4]]
    assert select_frames(batch[:, :5], held_frames(keep))[0, :, 0, 0, 0].tolist() == [0, 0, 0, 3, 3]
    # decoded through the pipeline: uniform subsample of the counter-stamped frames
    pipe = pipeline(video_folder, [A.UniformTemporalSubsample(3)], clip_len=7, stride=1, sampling="uniform",
                    output="yuv")
    video = next(iter(pipe.loader(shuffle=False)))["video"]
    numbers = [read_counter(f[0].numpy()) for f in video[0]]
    assert numbers[1] - numbers[0] == 3 and numbers[2] - numbers[1] == 3


# -- bad input ------------------------------------------------------------------------------------
def _audio_only(path: Path) -> None:
    from fractions import Fraction

    with av.open(str(path), "w") as out:
        stream = out.add_stream("pcm_s16le", rate=16000)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1600), np.int16), format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = 16000, 0, Fraction(1, 16000)
        for packet in [*stream.encode(frame), *stream.encode()]:
            out.mux(packet)


def _make_bad(root: Path, name: str, good: Path) -> None:
    path = root / "class0" / name
    if name == "truncated.mp4":
        data = good.read_bytes()
        path.write_bytes(data[: len(data) // 2])  # the index (moov) is at the end: unreadable
    elif name == "audio_only.mkv":
        _audio_only(path)
    elif name == "unknown_codec.ivf":
        data = bytearray(good.read_bytes())
        data[8:12] = b"XXXX"  # a FourCC no decoder knows
        path.write_bytes(bytes(data))
    elif name == "zero_frames.ivf":
        path.write_bytes(good.read_bytes()[:32])  # the IVF header only
    elif name == "short.mkv":
        write_video(path, render_frames(H, W, 3, seed=9), gop=8)


BAD = {
    "truncated.mp4": "cannot open",
    "audio_only.mkv": "no video stream",
    "unknown_codec.ivf": "unsupported codec",
    "zero_frames.ivf": "no frames",
    "short.mkv": "clip needs 11 frames",
}


@pytest.fixture(scope="module")
def bad_folder(tmp_path_factory):
    def make(name: str) -> Path:
        root = tmp_path_factory.mktemp("badvideo")
        for i in range(5):
            (root / f"class{i % 2}").mkdir(exist_ok=True)
            suffix = "ivf" if i == 0 else "mp4"
            write_video(root / f"class{i % 2}" / f"v{i}.{suffix}", render_frames(H, W, 16, seed=i), gop=8)
        good = root / "class0" / ("v0.ivf" if name.endswith(".ivf") else "v2.mp4")
        _make_bad(root, name, good)
        return root

    return make


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_under_each_policy(bad_folder, name):
    root = bad_folder(name)
    bad_index = next(i for i, p in enumerate(mp.loaders.folder(root)._paths) if p.endswith(name))
    ops = [A.Resize((16, 16), key="video")]
    with pytest.raises(mp.DecodeError) as info:
        for _ in pipeline(root, ops, pad="error").loader(shuffle=False):
            pass
    assert info.value.path.endswith(name) and BAD[name] in info.value.reason
    loader = pipeline(root, ops, on_error="skip", pad="error").loader(shuffle=False)
    batches = list(loader)
    assert [b["video"].shape[0] for b in batches] == [4, 2]
    assert bad_index not in torch.cat([b["index"] for b in batches]).tolist()
    # counted (the deterministic replacement may draw the bad file again: counted again)
    assert sum(loader.stats.errors.values()) >= 1 and all(name in f for f in loader.stats.failed)
    loader = pipeline(root, ops, on_error="replace", pad="error").loader(shuffle=False)
    valid = torch.cat([b["valid"] for b in loader])
    assert valid.tolist() == [i != bad_index for i in range(6)]


def test_short_video_is_padded_by_policy(bad_folder):
    root = bad_folder("short.mkv")
    short = next(i for i, p in enumerate(mp.loaders.folder(root)._paths) if p.endswith("short.mkv"))
    for pad, expected in (("repeat_last", [0, 2, 2, 2, 2, 2]), ("loop", [0, 2, 1, 0, 2, 1])):
        pipe = pipeline(root, [], pad=pad, output="yuv")
        video = pipe.dataset()[short]["video"]
        assert [read_counter(f[0].numpy()) for f in video] == expected


def test_frame_limit_is_checked_on_the_index(video_folder):
    pipe = mp.Pipeline(mp.loaders.folder(video_folder), {"video": mp.decoders.video(clip_len=2)},
                       [A.Resize((16, 16), key="video")], batch_size=2, device="cpu", max_frames=10)
    with pytest.raises(mp.LimitError, match="max_frames=10"):
        next(iter(pipe.loader(shuffle=False)))


def test_nvdec_imports_and_reports_unavailable_without_a_gpu():
    from mediapipe.decoders.video_nvdec import NvdecVideoDecoder

    assert NvdecVideoDecoder.available(torch.device("cpu")) is False
    if not torch.cuda.is_available():
        assert NvdecVideoDecoder.available(None) is False
        assert decoder_class("video", "auto") is decoder_class("video", "pyav")
        with pytest.raises(RuntimeError, match="cannot run"):
            create("video", "nvdec")


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a CUDA machine the real probe decides")
def test_nvdec_falls_back_to_the_cpu_per_file(video_folder, monkeypatch):
    """Where the hardware path fails on a file (here: no GPU at all, the probe forced to pass),
    that file is decoded on the CPU, counted, and equals the PyAV backend's output."""
    import mediapipe.decoders.video_nvdec as nv
    from mediapipe.decoders.base import DecodeHint
    from mediapipe.rng import SampleRNG
    from mediapipe.sample import Blob

    monkeypatch.setattr(nv, "probe_av1", lambda device=None: True)
    path = str(next(video_folder.rglob("*.mp4")))
    blob = Blob(path, path=path)
    before = sum(nv.NvdecVideoDecoder.fallbacks.values())
    hw = nv.NvdecVideoDecoder(clip_len=4, output="yuv").decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {}).value
    cpu = create("video", "pyav", clip_len=4, output="yuv").decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {}).value
    assert torch.equal(hw, cpu)
    assert sum(nv.NvdecVideoDecoder.fallbacks.values()) == before + 1


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_stats_count_the_frames_the_decoder_produced(video_folder, workers):
    """``loader.stats.frames``: every frame decoded for the delivered clips, lead-in included,
    summed over workers; equal to what the decoder reports per file."""
    from mediapipe.decoders.base import DecodeHint
    from mediapipe.rng import SampleRNG
    from mediapipe.sample import Blob

    dec = create("video", "pyav", clip_len=6, stride=2, sampling="uniform", threads=1)
    files = sorted(p for p in video_folder.rglob("v*.*"))
    expected = sum(dec.decode(Blob(str(p), path=str(p)), DecodeHint(), SampleRNG(0, 0, 0, 0), {}).frames
                   for p in files)
    loader = pipeline(video_folder, sampling="uniform", threads=1).loader(num_workers=workers, shuffle=False)
    clips = sum(b["video"].shape[0] for b in loader)
    assert clips == len(files) == 6
    assert loader.stats.frames == expected >= 6 * 6  # at least the wanted frames; lead-in on top
    assert loader.stats.as_dict()["frames"] == expected
