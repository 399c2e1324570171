"""16-bit grayscale PNG and TIFF become 8 bits by keeping each value's high byte (v >> 8,
as torchvision's ``to_dtype(..., scale=True)`` and libpng's 16-to-8 strip do), in the
decoders and in `mediapipe convert`, instead of saturating everything above 255."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import mediapipe as mp
from mediapipe.dataset.convert import convert
from mediapipe.dataset.transcode import TranscodeOptions

RAMP = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)  # every 16-bit value once
EXPECTED = (RAMP >> 8).astype(np.uint8)


def sixteen_bit(fmt: str, mode: str) -> bytes:
    """The ramp as a ``fmt`` file whose Pillow mode is ``mode``."""
    if mode == "I;16B":
        im = Image.frombytes("I;16B", RAMP.shape[::-1], RAMP.astype(">u2").tobytes())
    elif mode == "I":
        im = Image.fromarray(RAMP.astype(np.int32))
    else:
        im = Image.fromarray(RAMP)
    buf = io.BytesIO()
    im.save(buf, format=fmt)
    with Image.open(io.BytesIO(buf.getvalue())) as back:
        assert back.mode == mode
    return buf.getvalue()


CASES = [("PNG", "I;16"), ("TIFF", "I;16"), ("TIFF", "I;16B"), ("TIFF", "I")]


def _decode(tmp_path: Path, data: bytes, ext: str, **options) -> torch.Tensor:
    folder = tmp_path / "images" / "a"
    folder.mkdir(parents=True)
    (folder / f"ramp.{ext}").write_bytes(data)
    pipe = mp.Pipeline(source=mp.loaders.folder(tmp_path / "images"), decode={"image": mp.decoders.image(**options)},
                       batch_size=1, device="cpu")
    return pipe.dataset()[0]["image"]


@pytest.mark.parametrize("fmt, mode", CASES)
@pytest.mark.parametrize("backend, colour", [("pillow", "L"), ("pillow", "RGB"), ("auto", "RGB")])
def test_16_bit_images_keep_their_high_byte(tmp_path: Path, fmt: str, mode: str, backend: str,
                                            colour: str) -> None:
    image = _decode(tmp_path, sixteen_bit(fmt, mode), fmt.lower(), backend=backend, mode=colour)
    assert image.dtype == torch.uint8 and image.shape == (1 if colour == "L" else 3, 256, 256)
    for channel in image:
        assert torch.equal(channel, torch.from_numpy(EXPECTED))


def test_the_scaling_matches_torchvisions_png_decoder(tmp_path: Path) -> None:
    pytest.importorskip("torchvision")
    from torchvision.io import ImageReadMode, decode_png
    from torchvision.transforms.v2 import functional as F

    data = sixteen_bit("PNG", "I;16")
    theirs = F.to_dtype(decode_png(torch.frombuffer(bytearray(data), dtype=torch.uint8), ImageReadMode.UNCHANGED),
                        torch.uint8, scale=True)
    assert torch.equal(_decode(tmp_path, data, "png", backend="pillow", mode="L"), theirs)


def test_convert_scales_16_bit_images_before_encoding_them(tmp_path: Path) -> None:
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    (src / "ramp.png").write_bytes(sixteen_bit("PNG", "I;16"))
    (src / "ramp.tif").write_bytes(sixteen_bit("TIFF", "I;16B"))
    result = convert(tmp_path / "src", tmp_path / "out", options=TranscodeOptions(jpeg_quality=95))
    assert result.num_samples == 2 and not result.failures
    source = mp.loaders.shards(tmp_path / "out")
    for i in range(2):
        with Image.open(io.BytesIO(source.ref(i).blob("image").read())) as im:
            got = np.asarray(im.convert("L")).astype(np.float64)
        error = got - EXPECTED
        assert np.mean(error**2) < 255**2 / 1e4 and np.abs(error).max() <= 8  # PSNR above 40 dB
        assert (got >= 254.5).mean() < 0.01  # not 99.6% white
