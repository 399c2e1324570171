"""Hostile checks of `PackedPlanes` keeping chroma rows once (decoders/video.py).

The split layout (luma planes and chroma rows in two buffers, each padded to groups of four
planes, chroma resized in two calls) pays off only for subsampled rows over several frames. For
4:2:2 / 4:4:4 (one chroma row per luma row) and for a single frame (clip_len=1) it allocated
more planes than the combined layout and made three interpolate calls where one did; those
cases go back to one buffer and one call. Values are held, bit for bit, to an independent
reference: the full decoded planes with chroma repeated by ``np.repeat``, cut to the region
and resized alone in one ``F.interpolate`` call (then the library's ``yuv_to_rgb`` for RGB).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mediapipe.augment.functional.video import yuv_to_rgb
from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.registry import create
from mediapipe.decoders.video import PackedPlanes, chroma_columns, colour_code
from mediapipe.decoders.video_index import colour_of
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.video import render_frames, write_video

H, W, FRAMES = 47, 63, 3  # odd: the chroma plane's last row and column cover one luma row/column


class Calls:
    """Counts F.interpolate calls made by decoders/video.py."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = F.interpolate

        def counted(*args, **kwargs):
            self.n += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(sys.modules["mediapipe.decoders.video"].F, "interpolate", counted)


def reference(planes: list[tuple[np.ndarray, ...]], sub: tuple[int, int], roi, size, mode, antialias) -> torch.Tensor:
    top, left, h, w = roi
    out = []
    for c in range(3):
        stack = []
        for frame in planes:
            p = frame[c] if c == 0 else np.repeat(np.repeat(frame[c], sub[0], 0), sub[1], 1)
            stack.append(p[top : top + h, left : left + w])
        x = torch.from_numpy(np.stack(stack))[:, None]
        if size != (h, w):
            x = x if x.dtype == torch.uint8 else x.float()
            x = F.interpolate(x, size=size, mode=mode, antialias=antialias, align_corners=False)
        out.append(x[:, 0])
    return torch.cat(out)


@pytest.mark.parametrize("sub,count", [((1, 1), 3), ((1, 2), 5), ((1, 1), 1), ((2, 2), 1), ((2, 2), 5)])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_layout_calls_memory_and_values(monkeypatch, sub, count, dtype):
    rng = np.random.default_rng(count)
    hi = 256 if dtype == np.uint8 else 1024
    frames = [(rng.integers(0, hi, (H, W)).astype(dtype),
               *(rng.integers(0, hi, (-(-H // sub[0]), -(-W // sub[1]))).astype(dtype) for _ in range(2)))
              for _ in range(count)]
    for roi, size in [((1, 3, 45, 59), (20, 17)), ((0, 0, H, W), (H, 30)), ((46, 62, 1, 1), (3, 2)),
                      ((5, 1, 40, 61), (40, 61)), ((3, 4, 1, 58), (1, 1))]:
        top, left, h, w = roi
        packed = PackedPlanes(count, (h, w), dtype, 8 if dtype == np.uint8 else 10, sub[0], top % sub[0])
        region = (top, left, h, w, *sub)
        for i, (y, u, v) in enumerate(frames):
            packed.put(i, y[top : top + h, left : left + w], chroma_columns(u, *region), chroma_columns(v, *region))
        for mode, antialias in (("bilinear", True), ("bicubic", False)):
            calls = Calls(monkeypatch)
            got = packed.resized(size, mode, antialias)
            made = calls.n
            monkeypatch.undo()
            want = reference(frames, sub, roi, size, mode, antialias)
            assert got.dtype == want.dtype and torch.equal(got, want), (roi, size, mode)
            if sub[0] == 1 or count == 1:  # nothing to gain from rows kept once: one call, old footprint
                assert made == (size != (h, w)), (roi, size, made)
                held = sum(a.nbytes for a in {id(a): a for a in (packed.luma.base, packed.chroma.base)
                                              if a is not None}.values())
                assert held <= 4 * -(-3 * count // 4) * h * w * np.dtype(dtype).itemsize
        chroma = packed.planes("chroma")
        want = reference(frames, sub, roi, (h, w), "bilinear", True)[count:]
        assert torch.equal(chroma, want)


FILES = {"yuv420p": ("ffv1", (2, 2), (H, W)), "yuv420p10le": ("ffv1", (2, 2), (H, W)),
         "yuv444p": ("libx264", (1, 1), (48, 64)), "yuv422p": ("libx264", (1, 2), (48, 64))}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile_rows")
    out = {}
    for fmt, (codec, _, (h, w)) in FILES.items():
        frames = list(render_frames(h, w, FRAMES, seed=4, counter=False))
        out[fmt] = write_video(root / f"{fmt}.mkv", frames, codec=codec, gop=FRAMES, crf=20, pix_fmt=fmt)
    return out


def decoded_planes(path: Path) -> tuple[list[tuple[np.ndarray, ...]], tuple[str, str]]:
    import av

    out, colour = [], None
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            colour = colour_of(frame.colorspace, frame.color_range, frame.format.name)
            dtype = np.uint16 if frame.format.name.endswith("le") else np.uint8
            size = np.dtype(dtype).itemsize
            out.append(tuple(np.frombuffer(p, dtype).reshape(p.height, p.line_size // size)[:, : p.width].copy()
                             for p in frame.planes[:3]))
    return out, colour


@pytest.mark.parametrize("fmt", sorted(FILES))
@pytest.mark.parametrize("clip_len", [1, FRAMES])
def test_decoder_output_against_replicated_reference(monkeypatch, files, fmt, clip_len):
    """End to end, RGB and YUV: a single frame of 4:2:0 and any clip of 4:2:2 / 4:4:4 is one
    interpolate call, and every layout is the reference's values (odd frame edges included)."""
    _, sub, (fh, fw) = FILES[fmt]
    planes, colour = decoded_planes(files[fmt])
    blob = Blob(str(files[fmt]), path=str(files[fmt]))
    probe = create("video", "pyav", clip_len=clip_len, sampling="uniform")
    (clip,) = probe.plan(probe.index(blob), SampleRNG(0, 0, 0, 0), blob.name).clips
    planes = [planes[f] for f in clip]
    bits = 10 if fmt.endswith("10le") else 8
    for roi, size in [((fh - 1, fw - 1, 1, 1), (2, 3)), ((1, 1, fh - 1, fw - 1), (fh - 1, 20)), ((3, 0, 20, fw), (9, fw))]:
        for output in ("yuv", "rgb"):
            dec = create("video", "pyav", clip_len=clip_len, sampling="uniform", output=output)
            calls = Calls(monkeypatch)
            got = dec.decode(blob, DecodeHint(roi=roi, size=size), SampleRNG(0, 0, 0, 0), {}).value
            made = calls.n
            monkeypatch.undo()
            if sub[0] == 1 or clip_len == 1:
                assert made == 1, (fmt, clip_len, roi, made)
            flat = reference(planes, sub, roi, size, "bilinear", True)
            yuv = flat.view(3, len(planes), *size).transpose(0, 1)
            if bits == 8:
                want = yuv_to_rgb(yuv, colour_code(*colour)) if output == "rgb" else yuv
            else:
                eight = yuv.float() / 4.0
                want = (eight.round().clamp(0, 255).to(torch.uint8) if output == "yuv"
                        else yuv_to_rgb(eight / 255.0, colour_code(*colour), dtype=torch.uint8))
            assert got.shape == want.shape and torch.equal(got, want), (fmt, clip_len, roi, size, output)
