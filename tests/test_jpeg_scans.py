"""Progressive JPEGs without their final refinement scans: what is dropped, what is left, who uses it."""

from __future__ import annotations

import io

import numpy as np
import pytest
import simplejpeg
import torch
from PIL import Image

from mediapipe.decoders import DecodeHint, Limits, create
from mediapipe.decoders.jpeg_scans import without_final_refinement
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic import photo_like


def jpeg(array: np.ndarray, **save) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", **save)
    return buf.getvalue()


def scan_headers(data: bytes) -> list[tuple[int, int, int, int]]:
    """(Ss, Se, Ah, Al) of every scan, read by a walk written out here."""
    out, i = [], 2
    while i < len(data) - 1:
        marker = data[i + 1]
        if marker == 0xD9:
            break
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker == 0xDA:
            n = data[i + 4]
            ss, se, a = data[i + 5 + 2 * n : i + 8 + 2 * n]
            out.append((ss, se, a >> 4, a & 15))
            j = i + 2 + length
            while not (data[j] == 0xFF and data[j + 1] not in (0x00, *range(0xD0, 0xD8))):
                j += 1
            i = j
        else:
            i += 2 + length
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 100.0 if mse == 0 else 10 * np.log10(255**2 / mse)


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return photo_like(480, 640, seed=21)


@pytest.mark.parametrize("options", [dict(subsampling=2), dict(subsampling=0, restart_marker_blocks=4),
                                     dict(subsampling=1, restart_marker_rows=1), dict(grey=True)])
def test_only_the_final_ac_refinement_scans_are_dropped(photo, options):
    options = dict(options)
    array = np.asarray(Image.fromarray(photo).convert("L")) if options.pop("grey", False) else photo
    data = jpeg(array, quality=90, progressive=True, **options)
    thin = without_final_refinement(data)
    assert thin is not None and len(thin) < len(data) and thin.endswith(b"\xff\xd9")
    final = [s for s in scan_headers(data) if s[0] > 0 and s[2] > 0 and s[3] == 0]
    assert final and scan_headers(thin) == [s for s in scan_headers(data) if s not in final]
    # every decoder reads the result as a whole image; only the AC coefficients' last bit is lost
    full = np.asarray(Image.open(io.BytesIO(data)))
    pillow = np.asarray(Image.open(io.BytesIO(thin)))
    mode = "GRAY" if array.ndim == 2 else "RGB"
    turbo = simplejpeg.decode_jpeg(thin, colorspace=mode, strict=True).reshape(pillow.shape)
    assert np.array_equal(pillow, turbo)
    assert 25.0 <= psnr(pillow, full) < 100.0  # unresized; a shrinking resize averages most of it away


def test_what_it_does_not_vouch_for_is_left_alone(photo):
    assert without_final_refinement(jpeg(photo, quality=90)) is None  # baseline: nothing to drop
    progressive = jpeg(photo, quality=90, progressive=True)
    assert without_final_refinement(progressive[: len(progressive) * 2 // 3]) is None  # cut short
    assert without_final_refinement(progressive[:2] + b"\x00" * 50) is None
    assert without_final_refinement(progressive[:20] + b"\xff\xda\x00\x03") is None  # scan header overruns


@pytest.mark.parametrize("backend", ["turbo", "pillow", "nvimgcodec"])
def test_the_decoders_drop_them_only_for_a_shrinking_crop(photo, backend):
    if backend == "nvimgcodec":
        pytest.importorskip("nvidia.nvimgcodec")
    data = jpeg(photo, quality=90, progressive=True)
    thin = without_final_refinement(data)
    roi = (40, 60, 200, 250)
    decoder = create("image", backend, limits=Limits())

    def decode(blob_data: bytes, size: tuple[int, int] | None, dec=decoder) -> torch.Tensor:
        hint = DecodeHint(roi=roi, size=size, antialias=True, interpolation="bilinear")
        return dec.decode(Blob("p.jpg", data=blob_data), hint, SampleRNG(0, 0, 0, 0), {})

    shrunk, kept = (100, 100), (150, 150)  # 2.0x and 1.33x smaller than the region
    assert torch.equal(decode(data, shrunk), decode(thin, shrunk))
    assert not torch.equal(decode(data, shrunk), create("image", backend, exact=True).decode(
        Blob("p.jpg", data=data), DecodeHint(roi=roi, size=shrunk, antialias=True, interpolation="bilinear"),
        SampleRNG(0, 0, 0, 0), {}))
    assert not torch.equal(decode(data, kept), decode(thin, kept))  # too little shrink: every scan decoded
    assert not torch.equal(decode(data, None), decode(thin, None))  # no resize: every scan decoded
