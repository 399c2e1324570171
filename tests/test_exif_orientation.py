"""EXIF orientation read from the header: agrees with Pillow, and keeps upright files on the fast backends."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from mediapipe.decoders import DecodeHint, Limits, backends, create
from mediapipe.decoders.exif import jpeg_orientation
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic import photo_like

RNG = SampleRNG(0, 0, 0, 0)
FAST = [name for name, cls in backends("image").items() if cls.available(None) and name != "pillow"]


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return photo_like(96, 128, seed=11)


def jpeg_with(photo: np.ndarray, orientation: int | None = None, **save) -> bytes:
    image = Image.fromarray(photo)
    if orientation is not None:
        exif = image.getexif()
        exif[0x0112] = orientation
        exif[0x010F] = "Camera"
        save["exif"] = exif.tobytes()
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=92, **save)
    return buf.getvalue()


def with_segment(data: bytes, marker: int, payload: bytes) -> bytes:
    """``data`` with one more segment right after the start-of-image marker."""
    return data[:2] + bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload + data[2:]


def big_endian_exif(orientation: int) -> bytes:
    """An EXIF block in Motorola byte order (Pillow writes Intel order) with one orientation entry."""
    ifd = (1).to_bytes(2, "big") + (0x0112).to_bytes(2, "big") + (3).to_bytes(2, "big") + (1).to_bytes(4, "big")
    ifd += orientation.to_bytes(2, "big") + b"\x00\x00" + (0).to_bytes(4, "big")
    return b"Exif\x00\x00MM\x00*" + (8).to_bytes(4, "big") + ifd


def pillow_orientation(data: bytes) -> int:
    return Image.open(io.BytesIO(data)).getexif().get(0x0112, 1)


def pillow_transposed(data: bytes) -> torch.Tensor:
    image = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_read_from_the_header_is_pillows(photo, orientation):
    data = jpeg_with(photo, orientation)
    assert jpeg_orientation(data) == pillow_orientation(data) == orientation
    motorola = with_segment(jpeg_with(photo), 0xE1, big_endian_exif(orientation))
    assert jpeg_orientation(motorola) == pillow_orientation(motorola) == orientation


def test_files_without_orientation_read_upright(photo):
    assert jpeg_orientation(jpeg_with(photo)) == 1  # no EXIF at all
    image = Image.fromarray(photo)
    exif = image.getexif()
    exif[0x010F] = "Camera"  # EXIF without an orientation entry
    data = jpeg_with(photo, exif=exif.tobytes())
    assert jpeg_orientation(data) == pillow_orientation(data) == 1


def test_what_only_pillow_can_tell_is_left_to_pillow(photo):
    xmp = b'<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'
    with_xmp = with_segment(jpeg_with(photo), 0xE1, b"http://ns.adobe.com/xap/1.0/\x00" + xmp)
    assert pillow_orientation(with_xmp) == 6 and jpeg_orientation(with_xmp) is None
    twice = with_segment(jpeg_with(photo, 1), 0xE1, big_endian_exif(3))
    assert jpeg_orientation(twice) is None
    bad_offset = with_segment(jpeg_with(photo), 0xE1, b"Exif\x00\x00II*\x00" + (4000).to_bytes(4, "little"))
    assert jpeg_orientation(bad_offset) is None
    overlong = jpeg_with(photo, 6)
    cut = overlong[:24]  # the EXIF segment runs past the end
    assert jpeg_orientation(cut) is None
    assert jpeg_orientation(b"\xff\xd8\xff\xe1\x00") is None


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
@pytest.mark.parametrize("backend", FAST)
def test_every_backend_turns_as_pillow_does(photo, backend, orientation):
    data = jpeg_with(photo, orientation)
    decoder = create("image", backend, limits=Limits(), exif_transpose=True)
    got = decoder.decode(Blob("t.jpg", data=data), DecodeHint(), RNG, {})
    assert torch.equal(got, pillow_transposed(data))
    probe = decoder.probe(Blob("t.jpg", data=data))
    assert (probe["height"], probe["width"]) == tuple(got.shape[1:])


@pytest.mark.parametrize("backend", FAST)
def test_upright_files_stay_on_the_fast_backend(photo, backend, monkeypatch):
    """An upright EXIF file with exif_transpose=True decodes as with exif_transpose=False, region and
    reduced DCT scale included, and never reaches Pillow."""
    data = jpeg_with(np.ascontiguousarray(np.tile(photo, (4, 4, 1))), 1)  # 384 x 512: room for a 1/2 scale
    hint = DecodeHint(roi=(10, 20, 300, 400), size=(64, 64), antialias=True, interpolation="bilinear")
    plain = create("image", backend, limits=Limits()).decode(Blob("t.jpg", data=data), hint, RNG, {})
    decoder = create("image", backend, limits=Limits(), exif_transpose=True)
    import mediapipe.decoders.image_pillow as pillow

    def refuse(*args, **kwargs):
        raise AssertionError("an upright file went to Pillow")

    monkeypatch.setattr(pillow.PillowImageDecoder, "decode", refuse)
    monkeypatch.setattr(pillow.PillowImageDecoder, "probe", refuse)
    assert torch.equal(decoder.decode(Blob("t.jpg", data=data), hint, RNG, {}), plain)
    assert decoder.probe(Blob("t.jpg", data=data))["height"] == 384
