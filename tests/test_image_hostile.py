"""JPEGs a hostile user hands the image decoders: EXIF-oriented files in grayscale, headers that
declare more pixels than their bytes can hold, files cut short under a region decode, and files
whose stream is not what the decoders read (12-bit, lossless, hierarchical). Each backend gives the
documented pixels or a clear `DecodeError` naming the file, and the backends agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from mediapipe.decoders import DecodeHint, Limits, backends, create
from mediapipe.errors import DecodeError, LimitError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic import jpeg_bytes, photo_like

RNG = SampleRNG(0, 0, 0, 0)
BACKENDS = [name for name, cls in backends("image").items() if cls.available(None)]


def decode(backend: str, data: bytes, hint: DecodeHint | None = None, **options) -> torch.Tensor:
    decoder = create("image", backend, limits=Limits(), **options)
    blob = Blob("hostile.jpg", data=data)
    return decoder.decode(blob, hint or DecodeHint(), RNG, decoder.probe(blob))


def frame_offset(data: bytes) -> int:
    """Where the start-of-frame segment (SOF0/SOF2) begins."""
    i = 2
    while data[i + 1] not in (0xC0, 0xC2):
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return i


def declaring(data: bytes, height: int, width: int) -> bytes:
    """``data`` with its frame header declaring ``height`` x ``width`` pixels."""
    out, i = bytearray(data), frame_offset(data)
    out[i + 5 : i + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(out)


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return photo_like(240, 320, seed=17)


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_an_oriented_jpeg_in_mode_L_is_its_luma_plane_turned(photo, orientation):
    """mode="L" is a JPEG's Y plane (torchvision's decode_jpeg(mode=GRAY)); with exif_transpose an
    oriented file gives that plane turned, not a conversion of its RGB (up to 10 levels apart)."""
    tv_io = pytest.importorskip("torchvision.io")
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = jpeg_bytes(photo, quality=92, exif=exif.tobytes())
    luma = tv_io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=tv_io.ImageReadMode.GRAY)
    turns = {3: 2, 6: -1, 8: 1}[orientation]  # counter-clockwise quarter turns to display
    expected = torch.rot90(luma, turns, dims=(1, 2))
    for backend in BACKENDS:
        got = decode(backend, data, mode="L", exif_transpose=True)
        assert torch.equal(got, expected), (backend, (got.int() - expected.int()).abs().max())
        top, left = 11, 7
        region = decode(backend, data, DecodeHint(roi=(top, left, 100, 90)), mode="L", exif_transpose=True)
        assert torch.equal(region, expected[:, top : top + 100, left : left + 90]), backend


@pytest.mark.parametrize("declared", [(13000, 13000), (4000, 30000), (65500, 65500)])
def test_a_header_declaring_more_than_its_bytes_hold_is_corrupt(photo, declared):
    """A few kilobytes declaring 169 megapixels (under max_pixels) were decoded in full by Pillow
    and by the region decode (grey past the data), or allocated before libjpeg-turbo failed;
    every backend now calls it truncated or corrupt before allocating, beyond the limit too."""
    data = declaring(jpeg_bytes(photo, restart_marker_rows=1), *declared)
    for backend in BACKENDS:
        for hint in (DecodeHint(), DecodeHint(roi=(0, 0, 64, 64))):
            with pytest.raises(DecodeError) as raised:
                decode(backend, data, hint)
            assert not isinstance(raised.value, LimitError), (backend, raised.value)
            assert raised.value.reason.startswith("truncated or corrupt: the header declares "
                                                  f"{declared[1]}x{declared[0]} pixels"), (backend, raised.value)
            assert "hostile.jpg" in str(raised.value)


def test_the_smallest_honest_jpegs_are_not_called_corrupt():
    """The bound is one bit per coded unit: a flat picture, optimised Huffman tables, progressive
    and grey, at the lowest quality, still spends more."""
    flat = np.full((1200, 1600, 3), 128, np.uint8)
    for options in ({"progressive": True, "optimize": True}, {"optimize": True, "subsampling": 2}):
        for array in (flat, flat[..., 0]):
            data = jpeg_bytes(np.ascontiguousarray(array), quality=1, **options)
            for backend in BACKENDS:
                out = decode(backend, data, DecodeHint(roi=(8, 8, 64, 64)))
                assert out.shape == (3, 64, 64) and int(out.float().mean().round()) == 128, backend


def test_a_jpeg_cut_short_is_an_error_under_a_region_decode_too(photo):
    """nvImageCodec's region decode stops below the region, so it returned a clip of a file cut
    in half where turbo and Pillow report it truncated; now every backend raises, and a file whose
    EXIF thumbnail (with its own end marker) lies before the frame is still seen as cut short."""
    pytest.importorskip("nvidia.nvimgcodec")
    whole = jpeg_bytes(photo)
    thumbnail = jpeg_bytes(photo_like(60, 80, seed=3))
    segment = b"Exif\0\0" + thumbnail
    with_thumbnail = whole[:2] + b"\xff\xe1" + (len(segment) + 2).to_bytes(2, "big") + segment + whole[2:]
    region = DecodeHint(roi=(0, 0, 40, 40))
    for data in (whole, with_thumbnail):
        cut = data[: len(data) * 2 // 3]
        for backend in BACKENDS:
            with pytest.raises(DecodeError, match="hostile.jpg"):
                decode(backend, cut, region)
        # bytes after the end marker (some cameras append their own data) are no cut
        padded = decode("nvimgcodec", data + b"\0" * 100 + b"TRAILER", region)
        assert torch.equal(padded, decode("turbo", data, region))


def sof_with(data: bytes, marker: int | None = None, precision: int | None = None) -> bytes:
    out, i = bytearray(data), frame_offset(data)
    if marker is not None:
        out[i + 1] = marker
    if precision is not None:
        out[i + 4] = precision
    return bytes(out)


@pytest.mark.parametrize("kind", ["12-bit", "16-bit", "lossless", "hierarchical"])
def test_jpeg_kinds_the_decoders_do_not_read_are_clear_errors(photo, kind):
    """A 12-bit, lossless or hierarchical frame (libjpeg-turbo's 8-bit decoder reads none of
    them) is a DecodeError naming the file on every backend, with and without a region."""
    data = jpeg_bytes(photo, restart_marker_rows=2)
    data = {"12-bit": sof_with(data, precision=12), "16-bit": sof_with(data, precision=16),
            "lossless": sof_with(data, marker=0xC3), "hierarchical": sof_with(data, marker=0xC5)}[kind]
    for backend in BACKENDS:
        for hint in (DecodeHint(), DecodeHint(roi=(8, 8, 40, 40)), DecodeHint(roi=(0, 0, 240, 320), size=(60, 80))):
            with pytest.raises(DecodeError, match="hostile.jpg"):
                decode(backend, data, hint)
