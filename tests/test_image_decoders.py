"""Image decoder backends against independent decodes (Pillow, torchvision), formats, hints, EXIF."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from mediapipe.decoders import DecodeHint, Limits, backends, create
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic import jpeg_bytes, photo_like

RNG = SampleRNG(0, 0, 0, 0)
BACKENDS = [name for name, cls in backends("image").items() if cls.available(None)]


def decode(backend: str, data: bytes, hint: DecodeHint | None = None, **options) -> torch.Tensor:
    decoder = create("image", backend, limits=Limits(), **options)
    return decoder.decode(Blob("test.img", data=data), hint or DecodeHint(), RNG, {})


def encode(array: np.ndarray, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format=fmt, **kwargs)
    return buf.getvalue()


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return photo_like(120, 160, seed=5)


def test_auto_prefers_a_fast_jpeg_backend():
    assert "turbo" in BACKENDS and "pillow" in BACKENDS
    from mediapipe.decoders.image_nvimgcodec import _nvimgcodec

    # the region decode where nvImageCodec is installed (the dev extra installs it), else turbo
    assert create("image").name == ("nvimgcodec" if _nvimgcodec() is not None else "turbo")


def test_progressive_frames_are_recognised(photo):
    from mediapipe.decoders.image import jpeg_is_progressive

    exif = Image.Exif()
    exif[0x010E] = "x" * 5000  # a long segment before the frame
    assert jpeg_is_progressive(jpeg_bytes(photo, progressive=True, exif=exif.tobytes()))
    assert not jpeg_is_progressive(jpeg_bytes(photo, exif=exif.tobytes()))
    assert not jpeg_is_progressive(jpeg_bytes(photo, restart_marker_rows=1))
    assert not jpeg_is_progressive(b"\xff\xd8\xff\xe0\x00")  # truncated: read as not progressive


def test_nvimgcodec_region_decodes_baseline_and_small_progressive_crops(photo, monkeypatch):
    """On the CPU nvImageCodec takes full-scale crops of baseline JPEGs and progressive crops of
    at most PROGRESSIVE_REGION_SHARE of the image; larger progressive crops, whole images and
    crops that decode at a reduced DCT scale go to the turbo path."""
    pytest.importorskip("nvidia.nvimgcodec")
    decoder = create("image", "nvimgcodec")
    taken = []
    fallback = decoder._fallback.decode
    monkeypatch.setattr(decoder._fallback, "decode", lambda *a: taken.append("turbo") or fallback(*a))
    large = photo_like(480, 640, seed=2)
    crop = DecodeHint(roi=(10, 20, 100, 120), size=(96, 96))
    for data, hint, path in [
        (jpeg_bytes(large), crop, "nvimgcodec"),
        (jpeg_bytes(large, progressive=True), crop, "nvimgcodec"),  # 4% of the image
        (jpeg_bytes(large, progressive=True), DecodeHint(roi=(40, 30, 400, 400), size=(224, 224)), "turbo"),  # 52%
        (jpeg_bytes(large, progressive=True, restart_marker_rows=1), DecodeHint(roi=(200, 300, 250, 300),
                                                                               size=(224, 224)), "nvimgcodec"),
        (jpeg_bytes(large), DecodeHint(size=(96, 96)), "turbo"),  # no region: reduced whole image
        (jpeg_bytes(large), DecodeHint(roi=(0, 0, 400, 600), size=(64, 64)), "turbo"),  # reduced crop
    ]:
        taken.clear()
        got = decoder.decode(Blob("x.jpg", data=data), hint, RNG, {})
        assert (taken[0] if taken else "nvimgcodec") == path
        expected = create("image", "turbo").decode(Blob("x.jpg", data=data), hint, RNG, {})
        assert got.shape == expected.shape and (got.int() - expected.int()).abs().float().mean() < 0.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_jpeg_matches_torchvision_decode_jpeg(backend, photo):
    torchvision_io = pytest.importorskip("torchvision.io")
    data = jpeg_bytes(photo, quality=92)
    expected = torchvision_io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    got = decode(backend, data)
    assert got.shape == expected.shape == (3, 120, 160) and got.dtype == torch.uint8
    # libjpeg-turbo everywhere; Pillow's upsampler may differ by a level or two
    assert (got.int() - expected.int()).abs().max() <= 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", ["PNG", "WEBP", "BMP"])
def test_other_formats_decode_like_pillow(backend, fmt, photo):
    data = encode(photo, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    assert torch.equal(decode(backend, data), torch.from_numpy(photo).permute(2, 0, 1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["L", "P", "RGBA", "CMYK"])
def test_other_colour_modes_become_rgb(backend, mode, photo):
    image = Image.fromarray(photo).convert(mode)
    buf = io.BytesIO()
    image.save(buf, format="JPEG" if mode in ("L", "CMYK") else "PNG")
    data = buf.getvalue()
    expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    got = decode(backend, data)
    assert got.shape == (3, 120, 160)
    assert (got.permute(1, 2, 0).int() - torch.from_numpy(expected).int()).abs().max() <= 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_grayscale_mode_gives_one_channel(backend, photo):
    got = decode(backend, jpeg_bytes(photo), mode="L")
    assert got.shape == (1, 120, 160)


@pytest.mark.parametrize("backend", BACKENDS)
def test_region_hint_equals_the_crop_of_a_full_decode(backend, photo):
    data = jpeg_bytes(photo, quality=95)
    full = decode(backend, data)
    roi = (17, 30, 64, 90)
    got = decode(backend, data, DecodeHint(roi=roi))
    crop = full[:, 17:81, 30:120]
    assert got.shape == crop.shape
    # chroma upsampling at the region's border may see different neighbours
    assert (got.int() - crop.int()).abs().float().mean() < 0.5


@pytest.mark.parametrize("backend", ["turbo", "pillow"])
def test_dct_scaled_decode_keeps_the_region_at_least_the_target_size(backend):
    photo = photo_like(480, 640, seed=9)
    data = jpeg_bytes(photo)
    got = decode(backend, data, DecodeHint(roi=(0, 0, 480, 640), size=(100, 120)))
    assert got.shape[1] >= 100 and got.shape[2] >= 120
    assert got.shape[1] < 480  # it did decode at a reduced scale
    reference = torch.nn.functional.interpolate(torch.from_numpy(photo).permute(2, 0, 1)[None].float(),
                                                size=tuple(got.shape[1:]), mode="area")[0]
    assert (got.float() - reference).abs().mean() < 6


def test_exif_orientation_is_applied_when_asked(photo):
    image = Image.fromarray(photo)
    exif = image.getexif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    data = encode(photo, "JPEG", quality=95, exif=exif.tobytes())
    for backend in BACKENDS:
        plain = decode(backend, data)
        turned = decode(backend, data, exif_transpose=True)
        assert plain.shape == (3, 120, 160) and turned.shape == (3, 160, 120)
        assert (turned.int() - torch.rot90(plain, k=-1, dims=(1, 2)).int()).abs().float().mean() < 1.0
    probe = create("image", "turbo", exif_transpose=True).probe(Blob("x.jpg", data=data))
    assert (probe["height"], probe["width"]) == (160, 120)


@pytest.mark.parametrize("subsampling", [0, 1, 2])
def test_grayscale_mode_is_the_jpeg_luma_plane_on_every_backend(subsampling):
    """mode="L" on a colour JPEG is its Y plane, as libjpeg's grayscale output and torchvision's
    decode_jpeg(mode=GRAY) give it, on every backend, at full and at reduced DCT scale."""
    torchvision_io = pytest.importorskip("torchvision.io")
    data = jpeg_bytes(photo_like(300, 400, seed=3), subsampling=subsampling)
    expected = torchvision_io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                                          mode=torchvision_io.ImageReadMode.GRAY)
    reduced = DecodeHint(roi=(0, 0, 300, 400), size=(60, 80))
    outs = {}
    for backend in BACKENDS:
        assert torch.equal(decode(backend, data, mode="L"), expected), backend
        outs[backend] = decode(backend, data, reduced, mode="L")
        assert outs[backend].shape == (1, 60, 80)
    assert all(torch.equal(out, outs["turbo"]) for out in outs.values())


def test_a_files_header_is_walked_once_whatever_asks(photo, monkeypatch):
    """The probe, the checks and the decode of one file share one walk of its segments; another
    file, or bytes that could change under it (a bytearray), are walked again."""
    import importlib

    image_module = importlib.import_module("mediapipe.decoders.image")

    walks = []
    walk = image_module._walk_to_frame
    monkeypatch.setattr(image_module, "_walk_to_frame", lambda data: walks.append(len(data)) or walk(data))
    data, other = encode(photo, "JPEG", quality=90), encode(photo[:64], "JPEG", quality=90)
    decoder = create("image", "auto", limits=Limits())
    decoder.probe(Blob("a.jpg", data=data))
    decoder.decode(Blob("a.jpg", data=data), DecodeHint(), RNG, {})
    assert walks == [len(data)]
    assert image_module.jpeg_frame(other).height == 64 and image_module.jpeg_frame(data).height == 120
    assert walks == [len(data), len(other), len(data)]
    mutable = bytearray(data)
    image_module.jpeg_frame(mutable)
    mutable[image_module.jpeg_frame(data).offset + 6] = 7  # the declared height's low byte
    assert image_module.jpeg_frame(mutable).height == 7
