"""Crafted JPEGs against the fast paths (EXIF orientation from the header, progressive files
without their final refinement scans, nvImageCodec's region decode): every backend gives what
Pillow gives for the same hint, or a DecodeError naming the file."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from mediapipe.decoders import DecodeHint, Limits, create
from mediapipe.decoders.exif import jpeg_orientation
from mediapipe.decoders.jpeg_scans import (
    COARSE_MARGIN,
    every_coefficient_refined,
    scan_layout,
    shrink_needed,
    without_final_refinement,
)
from mediapipe.errors import DecodeError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic import photo_like

RNG = SampleRNG(0, 0, 0, 0)
BACKENDS = ["turbo", "pillow", "nvimgcodec"]
SHRINK = dict(size=(40, 48), antialias=True, interpolation="bilinear")  # >= 1.5x smaller than the crops below
SMALL_CROP = (24, 40, 100, 140)  # under half the image: nvImageCodec's region decode
LARGE_CROP = (8, 16, 200, 280)


def jpeg(array: np.ndarray, **save) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", **save)
    return buf.getvalue()


def scan_spans(data: bytes) -> list[tuple[int, int, int]]:
    """(SOS offset, end of its header, end of its data) of every scan, by a walk written out here."""
    out, i = [], 2
    while data[i + 1] != 0xD9:
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if data[i + 1] != 0xDA:
            i += 2 + length
            continue
        j = i + 2 + length
        while not (data[j] == 0xFF and data[j + 1] not in (0x00, *range(0xD0, 0xD8))):
            j += 1
        out.append((i, i + 2 + length, j))
        i = j
    return out


def final_refinements(data: bytes) -> list[tuple[int, int, int]]:
    spans = []
    for start, header_end, end in scan_spans(data):
        ss, ah_al = data[header_end - 3], data[header_end - 1]
        if ss > 0 and ah_al >> 4 and not ah_al & 15:
            spans.append((start, header_end, end))
    return spans


def outcome(backend: str, data: bytes, roi, exact: bool = False, **options):
    """The decoded tensor, or the DecodeError's reason (other exceptions fail the test)."""
    decoder = create("image", backend, limits=Limits(), exact=exact, **options)
    try:
        return decoder.decode(Blob("hostile.jpg", data=data), DecodeHint(roi=roi, **SHRINK), RNG, {})
    except DecodeError as err:
        assert "hostile.jpg" in str(err)
        return "DecodeError"


def available(backend: str) -> str:
    if backend == "nvimgcodec":
        pytest.importorskip("nvidia.nvimgcodec")
    return backend


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return photo_like(240, 320, seed=7)


@pytest.fixture(scope="module")
def progressive(photo) -> bytes:
    return jpeg(photo, quality=90, progressive=True)


@pytest.mark.parametrize("save", [dict(subsampling=2), dict(subsampling=1, restart_marker_blocks=3), dict(grey=True)])
def test_a_coarse_progressive_crop_is_the_same_on_every_backend(photo, save):
    """nvImageCodec's region decode of a progressive JPEG without its final scans differed from
    turbo's and Pillow's whole decode (libjpeg's block smoothing, for coefficients left short)."""
    save = dict(save)
    array = np.asarray(Image.fromarray(photo).convert("L")) if save.pop("grey", False) else photo
    data = jpeg(array, quality=85, progressive=True, **save)
    for roi in (SMALL_CROP, (101, 99, 110, 130), LARGE_CROP):
        reference = outcome("pillow", data, roi)
        for backend in BACKENDS:
            assert torch.equal(outcome(available(backend), data, roi), reference), (backend, roi)


def test_a_progressive_file_that_stops_short_is_decoded_whole(progressive):
    """A progressive JPEG whose own scans leave coefficients short (here: without its final
    scans, as an encoder may write it) decodes on nvImageCodec as on Pillow, ``exact`` or not."""
    short = without_final_refinement(progressive)
    assert not every_coefficient_refined(short)
    for exact in (False, True):
        reference = outcome("pillow", short, SMALL_CROP, exact)
        assert torch.equal(outcome(available("nvimgcodec"), short, SMALL_CROP, exact), reference)
        assert torch.equal(outcome("turbo", short, SMALL_CROP, exact), reference)


def test_every_coefficient_refined(photo, progressive):
    assert every_coefficient_refined(jpeg(photo, quality=90))  # baseline
    assert every_coefficient_refined(progressive)
    assert every_coefficient_refined(jpeg(np.asarray(Image.fromarray(photo).convert("L")), progressive=True))
    assert not every_coefficient_refined(progressive[: len(progressive) // 2])  # cut short: cannot tell
    start, _, end = final_refinements(progressive)[-1]
    assert not every_coefficient_refined(progressive[:start] + progressive[end:])


def malformed_refinements(data: bytes) -> dict[str, bytes]:
    """The first final refinement scan's header made invalid three ways."""
    start, header_end, _ = final_refinements(data)[0]
    selector, tail = data[start + 5 : start + 7], data[header_end - 3 : header_end]
    return {
        "no components": data[:start] + b"\xff\xda\x00\x06\x00" + tail + data[header_end:],
        "two components in an AC scan": data[:start] + b"\xff\xda\x00\x0a\x02" + selector + b"\x02\x00" + tail
        + data[header_end:],
        "Ah=2 with Al=0": data[: header_end - 1] + b"\x20" + data[header_end:],
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_malformed_refinement_scan_is_an_error_whatever_the_hint(progressive, backend):
    """Such a scan was spliced out for a shrinking crop, so the broken file decoded silently
    there and failed with exact=True; now both are the decoder's DecodeError."""
    available(backend)
    for name, data in malformed_refinements(progressive).items():
        assert without_final_refinement(data) is None, name
        for roi in (SMALL_CROP, LARGE_CROP):
            assert outcome(backend, data, roi) == "DecodeError" == outcome(backend, data, roi, exact=True), name


def test_a_file_of_refinement_scans_only_is_not_emptied(progressive):
    tables = progressive[: scan_spans(progressive)[0][0]]
    only = tables + b"".join(progressive[s:e] for s, _, e in final_refinements(progressive)) + b"\xff\xd9"
    assert without_final_refinement(only) is None  # the decoder reports the original
    for backend in BACKENDS:
        assert outcome(available(backend), only, LARGE_CROP) == "DecodeError"


def test_segments_between_scans_and_cut_files(progressive):
    """Fill bytes, DRI, COM and DHT between scans are kept; a file cut inside or right after
    a refinement scan is left whole for the decoder to report; many tiny scans are one pass."""
    start, _, end = final_refinements(progressive)[0]
    thin = without_final_refinement(progressive)
    for extra in (b"\xff" * 9, b"\xff\xfe\x00\x05abc"):
        padded = progressive[:start] + extra + progressive[start:]
        assert without_final_refinement(padded) is not None
        reference = outcome("pillow", padded, LARGE_CROP)
        assert torch.equal(reference, outcome("pillow", thin, LARGE_CROP))
        for backend in BACKENDS:
            assert torch.equal(outcome(available(backend), padded, LARGE_CROP), reference)
    for cut in (progressive[: (start + end) // 2], progressive[:end], progressive[: end + 1]):
        assert without_final_refinement(cut) is None
        for backend in BACKENDS:
            assert outcome(available(backend), cut, LARGE_CROP) == "DecodeError"
    many = progressive[:end] + progressive[start:end] * 3000 + progressive[end:]
    assert without_final_refinement(many) == thin


def tiff_ifd(entries: list[tuple[int, int, int, bytes]], order: str = "<", count: int | None = None) -> bytes:
    """A TIFF header and one directory of (tag, type, count, 4-byte value) entries."""
    head = b"II*\x00" if order == "<" else b"MM\x00*"
    n = len(entries) if count is None else count
    body = b"".join(struct.pack(order + "HHI", t, kind, c) + v for t, kind, c, v in entries)
    return head + struct.pack(order + "I", 8) + struct.pack(order + "H", n) + body + b"\x00" * 4


def short(value: int, order: str = "<") -> bytes:
    return struct.pack(order + "H", value) + b"\x00\x00"


def segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def exif_cases(base: bytes, thumbnail: bytes) -> dict[str, bytes]:
    exif6 = b"Exif\x00\x00" + tiff_ifd([(0x0112, 3, 1, short(6))])
    head, rest = base[:2], base[2:]
    return {
        "orientation 0": head + segment(0xE1, b"Exif\x00\x00" + tiff_ifd([(0x0112, 3, 1, short(0))])) + rest,
        "orientation 9": head + segment(0xE1, b"Exif\x00\x00" + tiff_ifd([(0x0112, 3, 1, short(9, ">"))], ">"))
        + rest,
        "orientation 65535": head + segment(0xE1, b"Exif\x00\x00" + tiff_ifd([(0x0112, 3, 1, short(65535))])) + rest,
        "huge entry count": head + segment(0xE1, b"Exif\x00\x00" + tiff_ifd([(0x0112, 3, 1, short(6))], count=65535))
        + rest,
        "IFD offset outside": head + segment(0xE1, b"Exif\x00\x00II*\x00\xff\xff\xff\x7f") + rest,
        "IFD at itself": head + segment(0xE1, b"Exif\x00\x00II*\x00\x00\x00\x00\x00") + rest,
        "orientation as LONG": head + segment(0xE1, b"Exif\x00\x00" + tiff_ifd([(0x0112, 4, 1, b"\x06\0\0\0")]))
        + rest,
        "EXIF in a later APP1": head + segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
        + segment(0xED, b"Photoshop 3.0\x00" + b"\x00" * 20) + segment(0xE1, exif6) + rest,
        "XMP after EXIF": head + segment(0xE1, exif6) + segment(0xE1, b"http://ns.adobe.com/xap/1.0/\x00<x/>") + rest,
        "EXIF after the first scan": base[: base.index(b"\xff\xda") + 20]
        + base[base.index(b"\xff\xda") + 20 :].replace(b"\xff\xc4", segment(0xE1, exif6) + b"\xff\xc4", 1),
        "thumbnail with its own EXIF": head + segment(0xE1, b"Exif\x00\x00" + tiff_ifd([(0x0112, 3, 1, short(1))])
                                                      + thumbnail) + rest,
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_crafted_exif_is_turned_as_pillow_turns_it(photo, progressive, backend):
    """EXIF that Pillow reads oddly or not at all: every backend gives Pillow's exif_transpose."""
    available(backend)
    decoder = create("image", backend, limits=Limits(), exif_transpose=True)
    thumbnail = jpeg(photo[:32, :32], quality=50, exif=b"Exif\x00\x00" + tiff_ifd([(0x0112, 3, 1, short(8))]))
    for name, data in exif_cases(progressive, thumbnail).items():
        image = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
        expected = torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)
        assert jpeg_orientation(data) in (None, Image.open(io.BytesIO(data)).getexif().get(0x0112, 1)), name
        for hint in (DecodeHint(), DecodeHint(roi=SMALL_CROP)):
            got = decoder.decode(Blob("t.jpg", data=data), hint, RNG, {})
            top, left, h, w = hint.roi or (0, 0, *expected.shape[1:])
            assert torch.equal(got, expected[:, top : top + h, left : left + w]), (name, hint)


def test_a_progressive_file_of_too_many_scans_is_refused(progressive):
    """Each scan walks every block of the image: thousands of tiny scans in a small file cost its
    size times the image's area. Refused on every backend and hint, before any decode (Pillow
    decoded it, and for a shrinking crop checked only the copy without its refinement scans)."""
    start, _, end = final_refinements(progressive)[0]
    many = progressive[:end] + progressive[start:end] * 600 + progressive[end:]
    assert without_final_refinement(many) is not None
    for backend in BACKENDS:
        for roi, exact in ((LARGE_CROP, False), (LARGE_CROP, True), (SMALL_CROP, False)):
            assert outcome(available(backend), many, roi, exact) == "DecodeError", (backend, roi, exact)
        with pytest.raises(DecodeError, match="scans"):
            create("image", backend, limits=Limits()).probe(Blob("hostile.jpg", data=many))
    assert outcome("pillow", progressive[:end] + progressive[start:end] * 20 + progressive[end:], LARGE_CROP) != "DecodeError"


def test_the_device_path_decodes_a_progressive_file_that_stops_short_as_pillow(progressive):
    """The batched (device) path decodes every JPEG's region at full scale: for a progressive
    file whose scans stop short its region decode missed libjpeg's block smoothing."""
    pytest.importorskip("nvidia.nvimgcodec")
    short = without_final_refinement(progressive)
    decoder = create("image", "nvimgcodec", device=torch.device("cpu"))
    full = create("image", "pillow", exact=True).decode(Blob("s.jpg", data=short), DecodeHint(), RNG, {})
    rois = [SMALL_CROP, (101, 99, 110, 130)]
    decoded = decoder.decode_batch([Blob("s.jpg", data=short)] * 2, [DecodeHint(roi=r) for r in rois], [{}, {}])
    for x, (top, left, h, w) in zip(decoded, rois):
        x = getattr(x, "value", x)  # the turbo path's result comes wrapped, naming why
        assert torch.equal(x, full[:, top : top + h, left : left + w])


def test_a_coarsely_quantised_progressive_set_meets_the_quality_bound():
    """Dropping the last bit costs up to a quantisation step per AC coefficient: on progressive
    JPEGs of quality 50 the fused 224 px crops fell to a median of about 36 dB against the
    reference (full Pillow decode + torchvision's resized_crop), under tests/test_fused_quality.py's
    bound (median 38, p10 32, min 28). Such files keep every scan unless the resize shrinks the
    crop more, in proportion to their quantisation step: the crops that do lose the last bit
    keep the bound on their own."""
    tf = pytest.importorskip("torchvision.transforms.v2.functional")
    from mediapipe import augment as A
    from mediapipe.decoders.image import region_shrink

    decoder, scores, thinned = create("image", "turbo"), [], []
    for quality in (50, 75):
        for i, (height, width, subsampling) in enumerate([(900, 720, 0), (780, 1100, 2)]):
            data = jpeg(photo_like(height, width, seed=40 + i), quality=quality, progressive=True,
                        subsampling=subsampling)
            layout = scan_layout(data)
            needed = shrink_needed(layout.mean_ac_step, layout.low_ac_step)
            assert needed > COARSE_MARGIN  # coarser than quality 80's tables
            assert without_final_refinement(data, needed * 0.99) is None
            full = torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)
            meta = decoder.probe(Blob("coarse.jpg", data=data))
            meta["size"] = (meta["height"], meta["width"])
            for size in (224, 96):
                op = A.RandomResizedCrop(size)
                for k in range(5):
                    params = op.sample_params(SampleRNG(7, size, i, k), meta)
                    hint = op.decode_hint(params, meta)
                    got = op.apply_decoded(decoder.decode(Blob("coarse.jpg", data=data), hint, RNG, meta), params)
                    box = (params["top"], params["left"], params["height"], params["width"])
                    expected = tf.resized_crop(full, *box, [size, size], antialias=True)
                    mse = float(((got.double() - expected.double()) ** 2).mean())
                    scores.append(100.0 if mse == 0 else 10 * np.log10(255**2 / mse))
                    if region_shrink(hint, meta["size"]) >= needed:
                        thinned.append(scores[-1])
    for what in (scores, thinned):
        assert np.median(what) >= 38.0 and np.percentile(what, 10) >= 32.0 and min(what) >= 28.0, sorted(what)
    assert len(thinned) >= 8, len(thinned)


@pytest.fixture(scope="module")
def progressive_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("progressive")
    for c in range(2):
        (root / f"class{c}").mkdir()
        for i in range(3):
            array = photo_like(200 + 20 * i, 260, seed=10 * c + i)
            (root / f"class{c}" / f"{i}.jpg").write_bytes(jpeg(array, quality=90, progressive=True, subsampling=i % 3))
    return root


def _folder_pipeline(root, exact: bool, augment: list):
    import mediapipe as mp

    return mp.Pipeline(source=mp.loaders.folder(root), decode={"image": mp.decoders.image(exact=exact)},
                       augment=augment, batch_size=3, seed=3, device="cpu")


def test_coarse_progressive_batches_are_the_same_for_any_worker_count(progressive_folder):
    from mediapipe import augment as A

    pipe = _folder_pipeline(progressive_folder, False, [A.RandomResizedCrop(64), A.HorizontalFlip()])
    inline, forked = list(pipe.loader(num_workers=0)), list(pipe.loader(num_workers=2))
    assert len(inline) == len(forked) == 2
    for a, b in zip(inline, forked):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])


def test_exact_through_the_dali_backend(progressive_folder):
    """DALI decodes every scan anyway: with exact=True the torch backend decodes as it does
    (within the DALI tests' rounding bound: two grey levels, a quarter on average)."""
    pytest.importorskip("nvidia.dali")
    from mediapipe import augment as A

    pipe = _folder_pipeline(progressive_folder, True, [A.Resize(128), A.CenterCrop(112), A.Normalize()])
    dali, reference = list(pipe.loader(backend="dali", shuffle=False)), list(pipe.loader(backend="torch", shuffle=False))
    assert len(dali) == len(reference) == 2
    for a, b in zip(dali, reference):
        diff = (a["image"] - b["image"]).abs()
        assert diff.max().item() <= 2 / 255 / 0.224 and diff.mean().item() <= 0.25 / 255 / 0.224


def test_a_multi_picture_file_is_a_jpeg_on_every_backend(photo):
    """Pillow names a camera's multi-picture JPEG "MPO": its backend skipped the JPEG checks (the
    scan limit, the header's claims) and the reduced DCT scale for it, unlike turbo's."""
    buf = io.BytesIO()
    Image.fromarray(photo).save(buf, "MPO", save_all=True, append_images=[Image.fromarray(photo[::-1].copy())],
                                progressive=True, quality=90)
    mpo = buf.getvalue()
    assert Image.open(io.BytesIO(mpo)).format == "MPO"
    hint = DecodeHint(roi=LARGE_CROP, size=(40, 48), antialias=True, interpolation="bilinear")  # a 1/2 DCT scale
    reference = create("image", "turbo", limits=Limits()).decode(Blob("m.jpg", data=mpo), hint, RNG, {})
    assert torch.equal(create("image", "pillow", limits=Limits()).decode(Blob("m.jpg", data=mpo), hint, RNG, {}),
                       reference)
    start, _, end = final_refinements(mpo)[0]
    many = mpo[:end] + mpo[start:end] * 600 + mpo[end:]
    for backend in BACKENDS:
        assert outcome(available(backend), many, LARGE_CROP, exact=True) == "DecodeError"


@pytest.mark.parametrize("save", [dict(subsampling=2), dict(subsampling=1), dict(subsampling=0, restart_marker_rows=1),
                                  dict(grey=True)])
def test_smoothed_regions_are_decoded_with_a_margin_as_the_whole_image(save, monkeypatch):
    """A progressive JPEG without its final scans (ours, or as its encoder wrote it) is block-smoothed:
    nvImageCodec decodes its region with two blocks more on every side, then cuts, and gives the
    whole decode's pixels (before, these went to the slower whole-image path)."""
    pytest.importorskip("nvidia.nvimgcodec")
    import mediapipe.decoders.image_turbo as turbo

    save = dict(save)
    array = photo_like(480, 640, seed=9)
    array = np.asarray(Image.fromarray(array).convert("L")) if save.pop("grey", False) else array
    data = jpeg(array, quality=85, progressive=True, **save)
    short = without_final_refinement(data)
    crops = [(0, 0, 200, 230), (37, 51, 190, 250), (250, 390, 230, 250), (123, 77, 301, 233)]
    hint = dict(size=(112, 112), antialias=True, interpolation="bilinear")  # shrinks >= 1.5x, full DCT scale

    def decode(backend: str, d: bytes, roi) -> torch.Tensor:
        decoder = create("image", backend, limits=Limits(), exact=d is short)
        return decoder.decode(Blob("s.jpg", data=d), DecodeHint(roi=roi, **hint), RNG, {})

    expected = {(d, roi): decode("turbo", d, roi) for d in (data, short) for roi in crops}

    def refuse(*args, **kwargs):
        raise AssertionError("the whole-image path decoded a region")

    monkeypatch.setattr(turbo.TurboImageDecoder, "decode", refuse)
    for (d, roi), reference in expected.items():
        assert torch.equal(decode("nvimgcodec", d, roi), reference), roi


@pytest.mark.parametrize("progressive_save", [False, True])
def test_a_one_pixel_wide_crop_at_the_left_edge_of_a_4_2_0_file(photo, progressive_save):
    """libjpeg-turbo's region decode of a one-pixel-wide 4:2:0 region at column 0 upsampled its
    chroma unlike the whole decode (off by up to 20 levels, baseline or progressive); nvImageCodec
    now decodes it two pixels wide and cuts, per sample and on the batched (device) path."""
    pytest.importorskip("nvidia.nvimgcodec")
    data = jpeg(photo, quality=85, subsampling=2, progressive=progressive_save)
    full = create("image", "pillow", exact=True).decode(Blob("n.jpg", data=data), DecodeHint(), RNG, {})
    rois = [(0, 0, 240, 1), (100, 0, 50, 1), (7, 0, 1, 1), (0, 319, 240, 1), (0, 1, 240, 1)]
    batched = create("image", "nvimgcodec", device=torch.device("cpu")).decode_batch(
        [Blob("n.jpg", data=data)] * len(rois), [DecodeHint(roi=r) for r in rois], [{}] * len(rois))
    for roi, x in zip(rois, batched):
        top, left, h, w = roi
        expected = full[:, top : top + h, left : left + w]
        hint = DecodeHint(roi=roi, size=(h, w), antialias=True, interpolation="bilinear")
        one = create("image", "nvimgcodec", limits=Limits()).decode(Blob("n.jpg", data=data), hint, RNG, {})
        assert torch.equal(one, expected), roi
        assert torch.equal(getattr(x, "value", x), expected), roi


def test_sampling_factors_turbo_has_no_name_for_go_to_pillow(photo):
    """A luma sampling factor of 1x4 (written by byte surgery on the frame header) made simplejpeg's
    header read raise KeyError, which escaped the turbo and nvImageCodec backends uncaught; such
    files now go to Pillow, as CMYK ones do, and every backend gives its result."""
    data = bytearray(jpeg(photo, quality=85, subsampling=0, progressive=True))
    sof = data.index(b"\xff\xc2")
    assert data[sof + 11] == 0x11  # the first component's sampling factors
    data[sof + 11] = 0x14
    reference = outcome("pillow", bytes(data), SMALL_CROP)
    for backend in ("turbo", "nvimgcodec"):
        got = outcome(available(backend), bytes(data), SMALL_CROP)
        assert got == reference if isinstance(reference, str) else torch.equal(got, reference)


# (u + v) of each coefficient in natural order: a table of coarse low and fine high frequencies
_FREQUENCY = np.add.outer(np.arange(8), np.arange(8)).ravel()


@pytest.mark.parametrize("table", [
    [1 if f == 0 else 120 if f <= 3 else 3 for f in _FREQUENCY],  # coarse low, fine high: mean AC step 20
    [36] * 64,  # flat at quality 80's mean AC step
])
def test_an_uneven_quantisation_table_meets_the_quality_bound(table):
    """The mean AC step judged a table by its high frequencies, which the resize averages away: with
    coarse low frequencies (mean step 20, under quality 80's 36) the crops that lost the last bit
    fell to a p10 of about 28 dB (flat steps of 36: median about 37); the steps of the lowest
    frequencies now count too."""
    tf = pytest.importorskip("torchvision.transforms.v2.functional")
    from mediapipe import augment as A
    from mediapipe.decoders.image import region_shrink

    decoder, scores = create("image", "turbo"), []
    for i, (height, width, subsampling) in enumerate([(900, 720, 0), (780, 1000, 2)]):
        data = jpeg(photo_like(height, width, seed=7 + i), qtables=[table, table], progressive=True,
                    subsampling=subsampling)
        assert scan_layout(data).mean_ac_step <= 36.0  # the mean alone let it lose the last bit at 1.5x
        full = torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)
        meta = decoder.probe(Blob("uneven.jpg", data=data))
        meta["size"] = (meta["height"], meta["width"])
        for size in (224, 112, 64):
            op = A.RandomResizedCrop(size)
            for k in range(12):
                params = op.sample_params(SampleRNG(3, size, i, k), meta)
                hint = op.decode_hint(params, meta)
                if without_final_refinement(data, region_shrink(hint, meta["size"])) is None:
                    continue  # keeps every scan: the bound is tests/test_fused_quality.py's
                got = op.apply_decoded(decoder.decode(Blob("uneven.jpg", data=data), hint, RNG, meta), params)
                box = (params["top"], params["left"], params["height"], params["width"])
                expected = tf.resized_crop(full, *box, [size, size], antialias=True)
                mse = float(((got.double() - expected.double()) ** 2).mean())
                scores.append(100.0 if mse == 0 else 10 * np.log10(255**2 / mse))
    assert len(scores) >= 10, len(scores)
    assert np.median(scores) >= 38.0 and np.percentile(scores, 10) >= 32.0 and min(scores) >= 28.0, sorted(scores)
