"""What the library prints that nobody asked for (issue 28, item 7): decoding a JPEG whose EXIF
is damaged gives the image Pillow's exif_transpose gives, without Pillow's "corrupt EXIF"
warning for every sample of every epoch."""

from __future__ import annotations

import io
import struct
import warnings

import numpy as np
import pytest
from PIL import Image, ImageOps

from mediapipe.decoders import DecodeHint, Limits, create
from mediapipe.decoders.exif import file_orientation
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic import photo_like


def damaged_exif_jpeg() -> bytes:
    """A photo whose EXIF directory claims two entries and holds one (Pillow warns, reading it)."""
    entry = struct.pack("<HHIHH", 0x0112, 3, 1, 6, 0)  # orientation 6: never read, the directory is corrupt
    tiff = b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", 2) + entry + b"\x00" * 4
    out = io.BytesIO()
    Image.fromarray(photo_like(96, 128, seed=3)).save(out, "JPEG", quality=85, exif=b"Exif\x00\x00" + tiff)
    return out.getvalue()


def exif_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if "exif" in str(w.message).lower()]


def test_pillow_itself_warns_on_the_file() -> None:
    """The case is real: Pillow, asked directly, warns about this file's EXIF."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        Image.open(io.BytesIO(damaged_exif_jpeg())).getexif()
    assert exif_warnings(record), [str(w.message) for w in record]


@pytest.mark.parametrize("backend", ["pillow", "turbo"])
@pytest.mark.parametrize("exif_transpose", [False, True])
def test_decoding_damaged_exif_prints_no_pillow_warning(backend: str, exif_transpose: bool) -> None:
    data = damaged_exif_jpeg()
    decoder = create("image", backend, limits=Limits(), exif_transpose=exif_transpose)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        meta = decoder.probe(Blob("damaged.jpg", data=data))
        image = decoder.decode(Blob("damaged.jpg", data=data), DecodeHint(), SampleRNG(0, 0, 0, 0), {})
        orientation = file_orientation(data)
    assert not exif_warnings(record), exif_warnings(record)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the oracle is Pillow itself, which warns
        opened = Image.open(io.BytesIO(data))
        pillow_orientation = opened.getexif().get(0x0112, 1)
        expected = np.asarray((ImageOps.exif_transpose(opened) if exif_transpose else opened).convert("RGB"))
    assert orientation == pillow_orientation == 6  # the one entry there is, as Pillow reads it
    assert (meta["height"], meta["width"]) == expected.shape[:2] == ((128, 96) if exif_transpose else (96, 128))
    assert np.array_equal(image.permute(1, 2, 0).numpy(), expected)
