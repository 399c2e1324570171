"""Colour: the decoder's RGB output and the YUVToRGB op agree with FFmpeg's own conversion
(imageio-ffmpeg's binary, ``-pix_fmt rgb24``) for BT.601/BT.709 and limited/full range.

Stated tolerance at full size: mean absolute error below 1.5 levels and no pixel off by more
than 4 (FFmpeg's fast path replicates chroma 2x2, as we do; the rest is rounding).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from mediapipe.augment import YUVToRGB
from mediapipe.augment.functional.video import colour_code, yuv_to_rgb
from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.registry import create
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.video import render_frames, write_video

H, W = 72, 96
COLOURS = [("bt601", "limited"), ("bt709", "limited"), ("bt709", "full"), ("bt601", "full")]


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("colour")
    frames = list(render_frames(H, W, 6, seed=11))
    return {(m, r): write_video(root / f"{m}_{r}.mkv", frames, gop=3, matrix=m, range=r) for m, r in COLOURS}


def ffmpeg_rgb(path: Path) -> torch.Tensor:
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    raw = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "rawvideo",
                          "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
    return torch.from_numpy(np.frombuffer(raw, np.uint8).reshape(-1, H, W, 3).copy()).permute(0, 3, 1, 2)


def decode(path: Path, output: str, hint: DecodeHint = DecodeHint()) -> torch.Tensor:
    dec = create("video", "pyav", clip_len=6, sampling="uniform", output=output)
    return dec.decode(Blob(str(path), path=str(path)), hint, SampleRNG(0, 0, 0, 0), {}).value


@pytest.mark.parametrize("colour", COLOURS, ids=lambda c: "-".join(c))
def test_rgb_output_matches_ffmpeg(tagged, colour):
    path = tagged[colour]
    ref = ffmpeg_rgb(path).int()
    index = create("video", "pyav").index(Blob(str(path), path=str(path)))
    assert (index.matrix, index.range) == colour  # read from the stream's signalling
    rgb = decode(path, "rgb")
    diff = (rgb.int() - ref).abs()
    assert diff.float().mean() < 1.5 and diff.max() <= 4, (diff.float().mean(), diff.max())
    # output="yuv" and YUVToRGB on the "device" give the same bytes as output="rgb"
    yuv = decode(path, "yuv")
    op = YUVToRGB(matrix=colour[0], range=colour[1])
    batch = yuv[None].repeat(2, 1, 1, 1, 1)
    params = {"code": torch.tensor([colour_code(*colour)] * 2)}
    assert torch.equal(op.apply(batch, params)[1], rgb)
    # a wrong matrix is visibly wrong: the test can fail
    other = ("bt709" if colour[0] == "bt601" else "bt601", colour[1])
    wrong = yuv_to_rgb(yuv, colour_code(*other))
    assert (wrong.int() - ref).abs().float().mean() > diff.float().mean() + 0.5


def test_resized_rgb_close_to_ffmpeg_resized(tagged):
    """The fused path (crop and resize the planes, then convert) against FFmpeg's full-size RGB
    cropped and resized by torch: looser, the filters differ."""
    path = tagged["bt709", "limited"]
    ref = ffmpeg_rgb(path)[:, :, 8:72, 16:80]
    ref = torch.nn.functional.interpolate(ref, size=(32, 32), mode="bilinear", antialias=True, align_corners=False)
    rgb = decode(path, "rgb", DecodeHint(roi=(8, 16, 64, 64), size=(32, 32)))
    assert rgb.shape == (6, 3, 32, 32)
    assert (rgb.int() - ref.int()).abs().float().mean() < 3.0


def test_yuv_to_rgb_kernel_values_and_per_sample_codes():
    # limited range: black is Y=16 and white Y=235; full range: 0 and 255
    planes = torch.tensor([[16, 128, 128], [235, 128, 128], [0, 128, 128], [255, 128, 128]], dtype=torch.uint8)
    x = planes[:, :, None, None].expand(4, 3, 2, 2)
    codes = torch.tensor([colour_code("bt601", "limited"), colour_code("bt709", "limited"),
                          colour_code("bt601", "full"), colour_code("bt709", "full")])
    out = yuv_to_rgb(x, codes)
    assert out[:, :, 0, 0].tolist() == [[0, 0, 0], [255, 255, 255], [0, 0, 0], [255, 255, 255]]
    # pure red in BT.709 full range: Y = 0.2126 * 255, Cr = 128 + 127.5
    red = torch.tensor([54, 128 - 29, 255], dtype=torch.uint8)[None, :, None, None]
    r, g, b = yuv_to_rgb(red, colour_code("bt709", "full"))[0, :, 0, 0].tolist()
    assert r >= 250 and g <= 8 and b <= 8
    as_float = yuv_to_rgb(x, codes, dtype=torch.float32)
    assert as_float.dtype == torch.float32 and float(as_float.max()) == 1.0
    with pytest.raises(ValueError, match="3 planes"):
        yuv_to_rgb(torch.zeros(2, 4, 2, 2, dtype=torch.uint8), 0)
    with pytest.raises(ValueError):
        YUVToRGB(matrix="smpte240m")
    assert YUVToRGB(matrix="bt2020").matrix == "bt2020"


def test_auto_converts_each_sample_with_its_own_streams_colour(tagged):
    """A batch mixing a BT.601 limited and a BT.709 full stream: YUVToRGB() (matrix and range
    "auto") reads ``video_colour`` and converts each sample as FFmpeg does for its stream."""
    dec = create("video", "pyav", clip_len=6, sampling="uniform", output="yuv")
    colours = [("bt601", "limited"), ("bt709", "full")]
    outs = [dec.decode(Blob(str(tagged[c]), path=str(tagged[c])), DecodeHint(), SampleRNG(0, 0, 0, 0), {})
            for c in colours]
    assert [o.fields["colour"] for o in outs] == [colour_code(*c) for c in colours]  # from the stream
    op = YUVToRGB()
    assert (op.matrix, op.range) == ("auto", "auto")
    assert "video_colour" in op.reads()
    data = {"video": torch.stack([o.value for o in outs]),
            "video_colour": torch.tensor([o.fields["colour"] for o in outs])}
    op.apply_fields(data, op.sample_params(SampleRNG(0, 0, 0, 0), {}))
    for i, colour in enumerate(colours):
        diff = (data["video"][i].int() - ffmpeg_rgb(tagged[colour]).int()).abs()
        assert diff.float().mean() < 1.5 and diff.max() <= 4, (colour, diff.float().mean(), diff.max())
    # one shared matrix would be wrong for one of the two: the per-sample path matters
    shared = yuv_to_rgb(torch.stack([o.value for o in outs]), colour_code(*colours[0]))
    assert not torch.equal(shared[1], data["video"][1])
    # explicit values override the stream's, per component
    forced = {"video": torch.stack([o.value for o in outs]), "video_colour": data["video_colour"]}
    YUVToRGB(matrix="bt601").apply_fields(forced, {})
    assert torch.equal(forced["video"][0], data["video"][0])  # already BT.601
    assert torch.equal(forced["video"][1], yuv_to_rgb(outs[1].value, colour_code("bt601", "full")))
    assert YUVToRGB(matrix="bt709", range="full").reads() == ("video",)
    with pytest.raises(ValueError, match="video_colour"):
        op.apply(data["video"], {})
