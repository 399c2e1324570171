"""Metadata real videos carry, each against FFmpeg's own conversion (imageio-ffmpeg's binary):
the display matrix's rotation (phone video), BT.2020 / BT.709 / BT.601 matrices and range from
the stream's tags, 10-bit streams to 8-bit or 16-bit RGB, and a variable frame rate resampled
by timestamp with ``fps=`` (FFmpeg's fps filter)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe.augment import RandomResizedCrop
from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.registry import create
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.video import read_counter, render_frames, write_video

H, W = 48, 80


def ffmpeg() -> str:
    return pytest.importorskip("imageio_ffmpeg").get_ffmpeg_exe()


def ffmpeg_frames(path: Path, height: int, width: int, pix_fmt: str = "rgb24", *extra: str) -> torch.Tensor:
    """(N, C, H, W) frames as FFmpeg converts them (autorotated, as its CLI does by default)."""
    raw = subprocess.run([ffmpeg(), "-v", "error", "-i", str(path), *extra, "-f", "rawvideo", "-pix_fmt", pix_fmt, "-"],
                         capture_output=True, check=True).stdout
    dtype, channels = {"rgb24": (np.uint8, 3), "rgb48le": (np.uint16, 3), "gray": (np.uint8, 1)}[pix_fmt]
    x = np.frombuffer(raw, dtype).reshape(-1, height, width, channels).astype(np.int64 if dtype == np.uint16 else dtype)
    return torch.from_numpy(x.copy()).permute(0, 3, 1, 2)


def decode(path: Path, hint: DecodeHint = DecodeHint(), **options) -> torch.Tensor:
    dec = create("video", "pyav", clip_len=6, sampling="uniform", **options)
    return dec.decode(Blob(str(path), path=str(path)), hint, SampleRNG(0, 0, 0, 0), {}).value


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = (a.double() - b.double()).pow(2).mean().item()
    return 10 * np.log10(255.0**2 / max(mse, 1e-12))


@pytest.fixture(scope="module")
def rotated(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, str], Path]:
    """One clip, stored 80 wide and 48 high, with display matrices of 90, -90, 180 and 270
    degrees (FFmpeg's -display_rotation, counter-clockwise) in MP4 and Matroska."""
    root = tmp_path_factory.mktemp("rotated")
    base = write_video(root / "base.mp4", render_frames(H, W, 6, seed=2), gop=3, crf=20)
    out = {(0, "mp4"): base}
    for degrees in (90, -90, 180, 270):
        for ext in ("mp4", "mkv"):
            path = root / f"r{degrees}.{ext}"
            subprocess.run([ffmpeg(), "-v", "error", "-y", "-display_rotation", str(degrees), "-i", str(base),
                            "-c", "copy", str(path)], check=True)
            out[degrees, ext] = path
    return out


@pytest.mark.parametrize("degrees", [90, -90, 180, 270])
@pytest.mark.parametrize("ext", ["mp4", "mkv"])
def test_display_rotation_is_applied_as_ffmpeg_does(rotated, degrees, ext):
    path = rotated[degrees, ext]
    dec = create("video", "pyav")
    meta = dec.probe(Blob(str(path), path=str(path)))
    turned = degrees % 180 != 0
    assert (meta["height"], meta["width"]) == ((W, H) if turned else (H, W))  # the displayed size
    ref = ffmpeg_frames(path, meta["height"], meta["width"])
    ours = decode(path)
    diff = (ours.int() - ref.int()).abs()
    assert diff.float().mean() < 1.5 and diff.max() <= 4, (diff.float().mean(), diff.max())
    # apply_rotation=False keeps the stored frames: those of the file without a display matrix
    assert torch.equal(decode(path, apply_rotation=False), decode(rotated[0, "mp4"]))
    assert create("video", "pyav", apply_rotation=False).probe(Blob(str(path), path=str(path)))["height"] == H
    # a fused crop is drawn on the displayed picture
    from torchvision.transforms.v2 import functional as TF

    op = RandomResizedCrop(24, scale=(0.2, 1.0), key="video")
    for sample in range(6):
        params = op.sample_params(SampleRNG(1, 0, sample, 0), {**meta, "size": (meta["height"], meta["width"])})
        hint = op.decode_hint(params, meta)
        fused = decode(path, hint)
        expected = TF.resized_crop(ref, *hint.roi, [24, 24], antialias=True)
        assert psnr(fused, expected) >= 35, (sample, hint.roi, psnr(fused, expected))


COLOURS = [("bt2020", "limited", "yuv420p"), ("bt2020", "full", "yuv420p"), ("bt2020", "limited", "yuv420p10le"),
           ("bt709", "limited", "yuv420p10le"), ("bt601", "full", "yuv420p10le")]


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], Path]:
    root = tmp_path_factory.mktemp("tagged")
    frames = list(render_frames(H, W, 6, seed=11))
    return {c: write_video(root / f"{'_'.join(c)}.mkv", frames, gop=3, matrix=c[0], range=c[1], pix_fmt=c[2], crf=20)
            for c in COLOURS}


@pytest.mark.parametrize("colour", COLOURS, ids=lambda c: "-".join(c))
def test_matrix_range_and_depth_from_the_stream_match_ffmpeg(tagged, colour):
    matrix, colour_range, pix_fmt = colour
    path = tagged[colour]
    index = create("video", "pyav").index(Blob(str(path), path=str(path)))
    assert (index.matrix, index.range, index.bit_depth) == (matrix, colour_range, 10 if "10" in pix_fmt else 8)
    ours = decode(path)
    assert ours.dtype == torch.uint8
    # FFmpeg's default conversion (for 10-bit it interpolates chroma, we repeat it as its 8-bit path does)
    diff = (ours.int() - ffmpeg_frames(path, H, W).int()).abs()
    assert diff.float().mean() < (4.0 if "10" in pix_fmt else 1.5), diff.float().mean()
    if "10" not in pix_fmt:
        assert diff.max() <= 4
        return
    # with FFmpeg's chroma repeated as ours (point sampling, accurate rounding): within one level
    flags = ("-sws_flags", "neighbor+accurate_rnd+full_chroma_int")
    exact = (ours.int() - ffmpeg_frames(path, H, W, "rgb24", *flags).int()).abs()
    assert exact.max() <= 1, exact.max()
    deep = decode(path, bit_depth=16)
    assert deep.dtype == torch.uint16 and deep.shape == ours.shape
    diff16 = (deep.to(torch.int64) - ffmpeg_frames(path, H, W, "rgb48le", *flags)).abs()
    assert diff16.float().mean() < 64 and diff16.max() <= 512, (diff16.float().mean(), diff16.max())  # 2 8-bit levels
    # the 16-bit output keeps precision that 8 bits lose: not just the 8-bit values scaled
    assert not torch.equal(deep.to(torch.int64) // 257, ours.to(torch.int64))


def test_a_wrong_matrix_would_be_seen(tagged):
    """BT.2020 read as BT.601 (the old behaviour) is visibly off: the check above can fail."""
    from mediapipe.augment.functional.video import colour_code, yuv_to_rgb

    path = tagged["bt2020", "limited", "yuv420p"]
    yuv = decode(path, output="yuv")
    ref = ffmpeg_frames(path, H, W).int()
    good = (yuv_to_rgb(yuv, colour_code("bt2020", "limited")).int() - ref).abs().float().mean()
    bad = (yuv_to_rgb(yuv, colour_code("bt601", "limited")).int() - ref).abs().float().mean()
    assert bad > good + 1.0, (good, bad)


def test_video_options_validate_depth_and_rotation():
    with pytest.raises(ValueError, match="bit_depth"):
        mp.decoders.video(bit_depth=10)
    with pytest.raises(ValueError, match="bit_depth=16"):
        mp.decoders.video(bit_depth=16, output="yuv")
    assert mp.decoders.video(apply_rotation=False).options["apply_rotation"] is False


@pytest.fixture(scope="module")
def vfr(tmp_path_factory: pytest.TempPathFactory) -> dict[float, Path]:
    """40 frames 10 to 100 ms apart (a variable frame rate), starting at 0 or 0.25 s."""
    root = tmp_path_factory.mktemp("vfr")
    gaps = np.random.default_rng(0).choice([0.01, 0.02, 0.04, 0.05, 0.1], size=40)
    times = np.round(np.concatenate([[0.0], np.cumsum(gaps)[:-1]]), 3)
    return {start: write_video(root / f"vfr{start}.mkv", render_frames(H, W, 40, seed=2), codec="libx264", gop=10,
                               times=list(times + start)) for start in (0.0, 0.25)}


@pytest.mark.parametrize("start", [0.0, 0.25])
@pytest.mark.parametrize("fps", [10, 24, 30])
def test_variable_frame_rate_sampled_by_timestamp_as_ffmpegs_fps_filter(vfr, start, fps):
    path = vfr[start]
    ref = [read_counter(f[0].numpy()) for f in ffmpeg_frames(path, H, W, "gray", "-vf", f"fps={fps}")]
    dec = create("video", "pyav", clip_len=1, stride=1, fps=fps, sampling="all", output="yuv")
    out = dec.decode(Blob(str(path), path=str(path)), DecodeHint(), SampleRNG(0, 0, 0, 0), {}).value
    ours = [read_counter(c[0, 0].numpy()) for c in out]
    assert abs(len(ours) - len(ref)) <= 1  # FFmpeg may add or drop a frame at the very end
    n = min(len(ours), len(ref))
    assert ours[:n] == ref[:n]
    assert len(set(ours)) < len(ours) or fps == 10  # frames repeat where the source is sparse
    # the frame index alone (i / average rate) would pick other frames: the test can fail
    naive = [min(39, int(round(k * 40 / len(ref)))) for k in range(n)]
    assert naive != ref[:n]


@pytest.mark.parametrize("fps", [0, -1, 1e-9, float("nan"), float("inf"), 1e6, "30", True])
def test_an_impossible_fps_is_refused_when_the_decoder_is_made(fps) -> None:
    """A rate outside [1e-3, 1e4] frames/s (NaN and inf included) is a typo, not a request: it
    would give clips spanning years, or none."""
    with pytest.raises(ValueError, match=r"video\(fps="):
        mp.decoders.video(clip_len=4, fps=fps)


@pytest.mark.parametrize("fps", [0.5, 12, 29.97, 240.0])
def test_plausible_rates_are_accepted(fps) -> None:
    assert mp.decoders.video(clip_len=4, fps=fps).options["fps"] == fps
