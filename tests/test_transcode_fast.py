"""`transcode_image` decodes an RGB or grayscale JPEG once, strictly, with libjpeg-turbo
(`decode_jpeg_strict`) instead of a check decode then a Pillow decode. What it writes is what
the Pillow path writes: same size, the same pixels within a stated PSNR, EXIF orientation
applied, the ICC profile kept and EXIF dropped; a damaged JPEG is still refused, and what
libjpeg-turbo's strict decode cannot give (CMYK) still goes through Pillow."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageCms, ImageOps

from mediapipe.dataset import transcode as transcode_module
from mediapipe.dataset.transcode import (
    TranscodeError,
    TranscodeOptions,
    decode_jpeg_strict,
    draft_scale,
    fit_size,
    transcode_image,
)
from mediapipe.synthetic import photo_like
from tests.test_convert_checks import damaged_jpegs

SOURCE_DB = 32.0  # the re-encoded image (q90) against a Pillow decode of its source (photo_like's grain
                  # at 320x240 costs q90 about 33.5 dB; the bench's larger, smoother photos about 42 dB)
SAME_DB = 50.0  # the re-encoded image against what the Pillow path writes, both decoded


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def jpeg(pixels: np.ndarray, *, mode: str | None = None, orientation: int = 1, icc: bytes | None = None,
         quality: int = 95, comment: bytes | None = None) -> bytes:
    im = Image.fromarray(pixels)
    if mode is not None:
        im = im.convert(mode)
    kwargs = {}
    if orientation != 1:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs["exif"] = exif.tobytes()
    if icc is not None:
        kwargs["icc_profile"] = icc
    if comment is not None:
        kwargs["comment"] = comment
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=quality, **kwargs)
    return buf.getvalue()


def pillow_path(data: bytes, options: TranscodeOptions) -> bytes:
    """The re-encode as it was before the strict decode: Pillow's decode (with ``draft`` where a
    resize follows), exif_transpose, LANCZOS, Pillow's encoder, the ICC profile passed on."""
    with Image.open(io.BytesIO(data)) as im:
        orientation = im.getexif().get(0x0112, 1)
        width, height = im.size if orientation not in (5, 6, 7, 8) else im.size[::-1]
        target = fit_size(width, height, options.image_max_side)
        if target != (width, height) and im.mode in ("RGB", "L"):
            im.draft(im.mode, target if orientation not in (5, 6, 7, 8) else target[::-1])
        icc = im.info.get("icc_profile")
        out = ImageOps.exif_transpose(im)
        if out.mode not in ("RGB", "L"):
            out = out.convert("RGB")
        if out.size != target:
            out = out.resize(target, Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        out.save(buf, format="JPEG", quality=options.jpeg_quality, icc_profile=icc)
    return buf.getvalue()


def decoded(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB") if im.mode not in ("RGB", "L") else im)


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return photo_like(240, 320, 7)


@pytest.fixture
def no_strict_decode(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each call of decode_jpeg_strict (the modes it was asked for) and lets it run."""
    calls: list[str] = []
    real = transcode_module.decode_jpeg_strict

    def spy(data: bytes, mode: str, *args):
        calls.append(mode)
        return real(data, mode, *args)

    monkeypatch.setattr(transcode_module, "decode_jpeg_strict", spy)
    return calls


@pytest.mark.parametrize("max_side", [None, 200, 64])
def test_the_strict_decode_writes_what_the_pillow_path_writes(photo: np.ndarray, max_side: int | None,
                                                              no_strict_decode: list[str]) -> None:
    data = jpeg(photo)
    options = TranscodeOptions(reencode=True, image_max_side=max_side)
    ext, out, meta = transcode_image(data, options)
    assert no_strict_decode == ["RGB"]  # the one decode was the strict one
    reference = pillow_path(data, options)
    target = fit_size(320, 240, max_side)
    assert (ext, meta) == ("jpg", {"width": target[0], "height": target[1], "codec": "jpeg", "copied": False})
    got, want = decoded(out), decoded(reference)
    assert got.shape == want.shape == (target[1], target[0], 3)
    assert psnr(got, want) >= SAME_DB
    if max_side is None:
        assert psnr(got, decoded(data)) >= max(SOURCE_DB, psnr(want, decoded(data)) - 0.1)
    else:  # against a full decode resized with LANCZOS: the DCT-domain downscale costs what draft's did
        full = np.asarray(Image.open(io.BytesIO(data)).convert("RGB").resize(target, Image.Resampling.LANCZOS))
        assert psnr(got, full) >= max(25.0, psnr(want, full) - 0.1)


@pytest.mark.parametrize("size,wanted", [((320, 240), (200, 150)), ((320, 240), (64, 48)), ((320, 240), (20, 15)),
                                         ((333, 251), (100, 75)), ((320, 240), (39, 29))])
def test_the_reduced_decode_is_the_size_pillow_draft_gives(size: tuple[int, int], wanted: tuple[int, int]) -> None:
    data = jpeg(photo_like(size[1], size[0], 3))
    with Image.open(io.BytesIO(data)) as im:
        im.draft("RGB", wanted)
        drafted = im.size
        pillow = np.asarray(im.convert("RGB"))
    ours = decode_jpeg_strict(data, "RGB", size, wanted)
    assert ours.size == drafted
    scale = draft_scale(size, wanted)
    assert drafted == (-(-size[0] // scale), -(-size[1] // scale))
    assert psnr(np.asarray(ours.convert("RGB")), pillow) >= SAME_DB


@pytest.mark.parametrize("name", ["truncated", "no_eoi", "bad_huffman_table", "corrupt_scan"])
@pytest.mark.parametrize("max_side", [None, 64])
def test_a_damaged_jpeg_is_refused_by_the_one_decode(photo: np.ndarray, name: str, max_side: int | None) -> None:
    data = damaged_jpegs(jpeg(photo, quality=90))[name]
    with pytest.raises(TranscodeError, match=r"^image: damaged JPEG \(.+\)$"):
        transcode_image(data, TranscodeOptions(reencode=True, image_max_side=max_side))
    with pytest.raises(TranscodeError, match=r"^image: damaged JPEG \(.+\)$"):
        decode_jpeg_strict(data, "RGB", (320, 240), (320, 240))


@pytest.mark.parametrize("orientation,turn", [(6, -1), (8, 1)])
@pytest.mark.parametrize("max_side", [None, 160])
def test_exif_orientation_turns_size_and_pixels(photo: np.ndarray, orientation: int, turn: int,
                                                max_side: int | None, no_strict_decode: list[str]) -> None:
    data = jpeg(photo, orientation=orientation)
    options = TranscodeOptions(image_max_side=max_side)  # a turned JPEG is re-encoded without --reencode
    _, out, meta = transcode_image(data, options)
    assert no_strict_decode == ["RGB"]
    target = fit_size(240, 320, max_side)
    assert (meta["width"], meta["height"]) == target
    with Image.open(io.BytesIO(out)) as im:
        assert im.size == target
        assert 0x0112 not in im.getexif()  # EXIF dropped: the pixels are upright now
    upright = np.rot90(decoded(data), turn)  # 6: stored turned 90 degrees anticlockwise; 8: clockwise
    if max_side is None:
        assert psnr(decoded(out), upright) >= SOURCE_DB
    else:
        resized = np.asarray(Image.fromarray(np.ascontiguousarray(upright)).resize(target, Image.Resampling.LANCZOS))
        assert psnr(decoded(out), resized) >= 25.0
    assert psnr(decoded(out), decoded(pillow_path(data, options))) >= SAME_DB


@pytest.mark.parametrize("orientation", [2, 3, 4, 5, 7])
def test_every_other_orientation_as_exif_transpose(photo: np.ndarray, orientation: int) -> None:
    data = jpeg(photo, orientation=orientation)
    options = TranscodeOptions()
    out = transcode_image(data, options)[1]
    assert psnr(decoded(out), decoded(pillow_path(data, options))) >= SAME_DB


def test_grayscale_stays_grayscale(photo: np.ndarray, no_strict_decode: list[str]) -> None:
    data = jpeg(photo, mode="L")
    options = TranscodeOptions(reencode=True, image_max_side=100)
    out = transcode_image(data, options)[1]
    assert no_strict_decode == ["L"]
    with Image.open(io.BytesIO(out)) as im:
        assert (im.mode, im.size) == ("L", (100, 75))
    assert psnr(decoded(out), decoded(pillow_path(data, options))) >= SAME_DB
    full = transcode_image(data, TranscodeOptions(reencode=True))[1]
    assert psnr(decoded(full), decoded(data)) >= SOURCE_DB


def test_cmyk_goes_through_pillow(photo: np.ndarray, no_strict_decode: list[str]) -> None:
    data = jpeg(photo, mode="CMYK")
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == "CMYK"
    options = TranscodeOptions(reencode=True, image_max_side=200)
    out = transcode_image(data, options)[1]
    assert no_strict_decode == []
    with Image.open(io.BytesIO(out)) as im:
        assert (im.mode, im.size) == ("RGB", (200, 150))
    assert psnr(decoded(out), decoded(pillow_path(data, options))) >= SAME_DB
    with pytest.raises(TranscodeError, match=r"^image: damaged JPEG"):
        transcode_image(data[: len(data) // 2], options)


@pytest.mark.parametrize("icc", ["srgb", "large"])
def test_the_icc_profile_is_kept_and_exif_dropped(photo: np.ndarray, icc: str) -> None:
    profile = (ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes() if icc == "srgb"
               else bytes(range(256)) * 300)  # over one APP2 segment: written in chunks
    data = jpeg(photo, icc=profile, orientation=3, comment=b"kept as before")
    for options in (TranscodeOptions(reencode=True), TranscodeOptions(reencode=True, image_max_side=100)):
        out = transcode_image(data, options)[1]
        with Image.open(io.BytesIO(out)) as im:
            assert im.info.get("icc_profile") == profile
            assert "exif" not in im.info and len(im.getexif()) == 0
            assert im.info.get("comment") == b"kept as before"


def test_a_jpeg_that_fits_is_still_copied(photo: np.ndarray, no_strict_decode: list[str]) -> None:
    data = jpeg(photo)
    assert transcode_image(data, TranscodeOptions(image_max_side=320)) == (
        "jpg", data, {"width": 320, "height": 240, "codec": "jpeg", "copied": True})
    assert no_strict_decode == []


def test_a_png_goes_through_pillow(photo: np.ndarray, no_strict_decode: list[str]) -> None:
    buf = io.BytesIO()
    Image.fromarray(photo).save(buf, format="PNG")
    out = transcode_image(buf.getvalue(), TranscodeOptions(image_max_side=160))[1]
    assert no_strict_decode == []
    resized = np.asarray(Image.fromarray(photo).resize((160, 120), Image.Resampling.LANCZOS))
    assert psnr(decoded(out), resized) >= 25.0  # halved, the grain is finer than q90 keeps
