"""`PackedPlanes` keeps each chroma row once and repeats the rows between the horizontal and the
vertical pass of the resize (two interpolate calls on a 4:2:0 plane). The result must be the
old one bit for bit: every chroma plane replicated onto the luma grid (``np.repeat`` both ways,
written out here), cut to the region and resized in one interpolate call, for odd and even
edges, shrinking and enlarging regions, both resamplings, with and without antialias, at 8 and
10 bits and in 4:2:0, 4:2:2 and 4:4:4."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.registry import create
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.video import render_frames, write_video

H, W, FRAMES = 120, 176, 3
FORMATS = {"yuv420p": ("libsvtav1", (2, 2), np.uint8), "yuv420p10le": ("libsvtav1", (2, 2), np.uint16),
           "yuv422p": ("libx264", (1, 2), np.uint8), "yuv444p": ("libx264", (1, 1), np.uint8)}
REGIONS = [((0, 0, H, W), (56, 80)), ((1, 3, 101, 133), (40, 48)), ((7, 10, 64, 90), (30, 31)),
           ((2, 5, 41, 37), (64, 64)), ((11, 21, 99, 150), (99, 150)), ((3, 1, 40, 60), (112, 96))]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rows")
    frames = list(render_frames(H, W, FRAMES, seed=8, counter=False))
    return {fmt: write_video(root / f"{fmt}.mkv", frames, codec=codec, gop=FRAMES, crf=20, pix_fmt=fmt)
            for fmt, (codec, _, _) in FORMATS.items()}


def replicated_planes(path: Path, dtype: type, sub: tuple[int, int]) -> list[list[np.ndarray]]:
    """Per frame: Y, U, V with chroma repeated onto the luma grid (what FFmpeg's conversion reads)."""
    import av

    out = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            planes = []
            for i, plane in enumerate(frame.planes[:3]):
                size = np.dtype(dtype).itemsize
                rows = np.frombuffer(plane, dtype).reshape(plane.height, plane.line_size // size)[:, : plane.width]
                if i:
                    rows = np.repeat(np.repeat(rows, sub[0], axis=0), sub[1], axis=1)[:H, :W]
                planes.append(rows)
            out.append(planes)
    return out[:FRAMES]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_two_pass_chroma_equals_one_call_on_replicated_planes(files, fmt):
    _, sub, dtype = FORMATS[fmt]
    path = files[fmt]
    reference = replicated_planes(path, dtype, sub)
    dec = create("video", "pyav", clip_len=FRAMES, sampling="uniform", output="yuv")
    blob = Blob(str(path), path=str(path))
    index = dec.index(blob)
    wanted = list(range(FRAMES))
    for roi, size in REGIONS:
        top, left, h, w = roi
        planes, _, _ = dec.decode_frames(blob, index, wanted, roi)
        for mode in ("bilinear", "bicubic"):
            for antialias in (True, False):
                ours = planes.resized(size, mode, antialias)
                for c in range(3):
                    stack = np.stack([reference[t][c][top : top + h, left : left + w] for t in range(FRAMES)])
                    x = torch.from_numpy(stack)[:, None]
                    if size == (h, w):  # no resize: the planes as decoded
                        want = x[:, 0]
                    else:
                        x = x if dtype == np.uint8 else x.to(torch.float32)
                        want = F.interpolate(x, size=size, mode=mode, antialias=antialias, align_corners=False)[:, 0]
                    got = ours[c * FRAMES : (c + 1) * FRAMES]
                    assert got.dtype == want.dtype and torch.equal(got, want), (fmt, roi, size, mode, antialias, c)


def test_the_decoder_output_is_the_replicated_planes_resized(files):
    """End to end (``output="yuv"``, 8-bit 4:2:0): the decoder's planes for an odd-edged
    shrinking region are the written-out replicated planes resized in one call."""
    path = files["yuv420p"]
    reference = replicated_planes(path, np.uint8, (2, 2))
    roi, size = (1, 3, 101, 133), (40, 48)
    out = create("video", "pyav", clip_len=FRAMES, sampling="uniform", output="yuv").decode(
        Blob(str(path), path=str(path)), DecodeHint(roi=roi, size=size), SampleRNG(0, 0, 0, 0), {}).value
    top, left, h, w = roi
    for c in range(3):
        stack = np.stack([reference[t][c][top : top + h, left : left + w] for t in range(FRAMES)])
        want = F.interpolate(torch.from_numpy(stack)[:, None], size=size, mode="bilinear", antialias=True)[:, 0]
        assert torch.equal(out[:, c], want), c
