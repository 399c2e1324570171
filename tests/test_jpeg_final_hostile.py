"""Crafted JPEG headers against the one marker walk (decoders/jpeg_markers.py) under `jpeg_frame`,
`jpeg_orientation` and `scan_layout`: each answers what Pillow reads or None (never another
answer, an exception or a hang), and every backend decodes, or refuses, as Pillow does."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from mediapipe.decoders import DecodeHint, Limits, create
from mediapipe.decoders.exif import jpeg_orientation
from mediapipe.decoders.image import jpeg_frame
from mediapipe.decoders.jpeg_scans import scan_layout
from mediapipe.errors import DecodeError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic import photo_like

RNG = SampleRNG(0, 0, 0, 0)
HINT = dict(roi=(24, 40, 100, 140), size=(40, 48), antialias=True, interpolation="bilinear")


def jpeg(array: np.ndarray, **save) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", **save)
    return buf.getvalue()


def segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def exif_orientation_segment(value: int) -> bytes:
    """An APP1 EXIF block whose first directory holds one orientation tag (a little-endian TIFF)."""
    ifd = struct.pack("<H", 1) + struct.pack("<HHI", 0x0112, 3, 1) + struct.pack("<H", value) + b"\0\0" + b"\0" * 4
    return segment(0xE1, b"Exif\x00\x00" + b"II*\x00" + struct.pack("<I", 8) + ifd)


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return photo_like(240, 320, seed=11)


def crafted(photo: np.ndarray) -> dict[str, bytes]:
    """Headers a marker walk can read otherwise than a decoder does."""
    progressive = jpeg(photo, quality=85, progressive=True)
    baseline = jpeg(photo, quality=85)
    hidden = exif_orientation_segment(6)
    return {
        # 0xFF00 is junk to Pillow (and libjpeg), which finds the EXIF block inside what a walk
        # reading 0xFF00 as a marker takes for its segment
        "0xff00 hides an exif block": baseline[:2] + b"\xff\x00" + (len(hidden) + 2).to_bytes(2, "big")
        + hidden + baseline[2:],
        "tem in the header": progressive[:2] + b"\xff\x01" + progressive[2:],  # Pillow: not a JPEG
        "restart marker in the header": progressive[:2] + b"\xff\xd0" + progressive[2:],
        "second start of image": progressive[:2] + b"\xff\xd8" + progressive[2:],
        "end of image before the frame": progressive[:2] + b"\xff\xd9" + progressive[2:],
        "fill bytes": progressive[:2] + b"\xff" * 50 + progressive[2:],
        "zero length": progressive[:2] + b"\xff\xe5\x00\x00" + progressive[2:],
        "length of one": progressive[:2] + b"\xff\xe5\x00\x01" + progressive[2:],
        "overlong length": progressive[:2] + b"\xff\xe5\xff\xff" + progressive[2:],
        "scan before the frame": progressive[:2] + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + progressive[2:],
        "cut in a length": baseline[:5],
        "cut after a marker": baseline[:4],
    }


def pillow_orientation(data: bytes) -> int | str:
    try:
        return Image.open(io.BytesIO(data)).getexif().get(0x0112, 1)
    except Exception:
        return "unreadable"  # every backend refuses the file (see the test below): no answer is turned


def test_the_walk_reads_the_header_pillow_reads_or_none(photo):
    for name, data in crafted(photo).items():
        orientation, expected = jpeg_orientation(data), pillow_orientation(data)
        if orientation is None or expected == "unreadable":
            continue
        assert orientation == expected, name
        frame = jpeg_frame(data)  # a walk that vouches for the orientation found the frame Pillow reads
        im = Image.open(io.BytesIO(data))
        assert frame is not None and (frame.width, frame.height) == im.size, name
    hidden = crafted(photo)["0xff00 hides an exif block"]
    assert pillow_orientation(hidden) == 6 and jpeg_orientation(hidden) is None
    assert jpeg_frame(hidden) is None and scan_layout(hidden) is None


def test_megabytes_of_fill_bytes_are_walked_once(photo):
    """0xFF fill bytes before a marker: the walk steps over them (linear, no hang); an image of
    nothing but fill bytes has no frame."""
    data = jpeg(photo, quality=85, progressive=True)
    padded = data[:2] + b"\xff" * (2 << 20) + data[2:]
    frame, padded_frame = jpeg_frame(data), jpeg_frame(padded)
    assert padded_frame is not None and padded_frame.offset == frame.offset + (2 << 20)
    assert (padded_frame.width, padded_frame.height, padded_frame.mcus) == (frame.width, frame.height, frame.mcus)
    assert jpeg_orientation(padded) == 1 and len(scan_layout(padded).scans) == len(scan_layout(data).scans)
    only_fill = b"\xff\xd8" + b"\xff" * (2 << 20)
    assert jpeg_frame(only_fill) is None and jpeg_orientation(only_fill) is None and scan_layout(only_fill) is None


def outcome(backend: str, data: bytes, **options):
    """The decoded tensor, or "DecodeError" naming the file (any other exception fails the test)."""
    if backend == "nvimgcodec":
        pytest.importorskip("nvidia.nvimgcodec")
    decoder = create("image", backend, limits=Limits(), **options)
    try:
        return decoder.decode(Blob("crafted.jpg", data=data), DecodeHint(**HINT), RNG, {})
    except DecodeError as err:
        assert "crafted.jpg" in str(err)
        return "DecodeError"


@pytest.mark.parametrize("exif_transpose", [False, True])
@pytest.mark.parametrize("backend", ["turbo", "nvimgcodec"])
def test_every_backend_decodes_a_crafted_header_as_pillow(photo, backend, exif_transpose):
    """A TEM marker in the header made turbo decode what Pillow refuses; a restart marker made
    nvImageCodec refuse what Pillow decodes; 0xFF00 junk made turbo refuse it. A header the walk
    does not vouch for now goes to Pillow from every backend."""
    for name, data in crafted(photo).items():
        expected = outcome("pillow", data, exif_transpose=exif_transpose)
        got = outcome(backend, data, exif_transpose=exif_transpose)
        if isinstance(expected, str) or isinstance(got, str):
            assert got == expected, name
        else:
            assert torch.equal(got, expected), name


@pytest.mark.parametrize("backend", ["pillow", "turbo", "nvimgcodec"])
def test_junk_before_the_frame_does_not_lift_the_size_claim_bound(backend):
    """One 0x00 byte before the frame of a 2 KB file declaring 6000x6000: the walk reads no frame,
    so the bound on what the bytes can hold was skipped and Pillow (which skips the junk)
    allocated and decoded the whole declared image. Now the frame Pillow read is checked."""
    data = jpeg(photo_like(64, 64, seed=3), quality=75)
    sof = data.index(b"\xff\xc0")
    length = int.from_bytes(data[sof + 2 : sof + 4], "big")
    big = data[sof : sof + 5] + struct.pack(">HH", 6000, 6000) + data[sof + 9 : sof + 2 + length]
    data = data[:sof] + b"\x00" + big + data[sof + 2 + length :]
    assert jpeg_frame(data) is None and Image.open(io.BytesIO(data)).size == (6000, 6000)
    if backend == "nvimgcodec":
        pytest.importorskip("nvidia.nvimgcodec")
    with pytest.raises(DecodeError, match="crafted.jpg.*declares 6000x6000"):
        create("image", backend, limits=Limits()).decode(Blob("crafted.jpg", data=data), DecodeHint(), RNG, {})


@pytest.mark.parametrize("factors", [0x32, 0x13, 0x24])
@pytest.mark.parametrize("backend", ["turbo", "nvimgcodec"])
def test_sampling_factors_turbojpeg_has_no_level_for_go_to_pillow(photo, backend, factors):
    """Luma sampling 3x2, 1x3 or 2x4 (byte surgery on the frame): simplejpeg raises ValueError
    ("Could not determine subsampling level"), not the KeyError of 1x4, so turbo and nvImageCodec
    refused what Pillow decodes. They go to Pillow now, in RGB and L, turned or not."""
    data = bytearray(jpeg(photo, quality=85, progressive=True, subsampling=0))
    sof = data.index(b"\xff\xc2")
    assert data[sof + 11] == 0x11  # the first component's sampling factors
    data[sof + 11] = factors
    for options in ({}, {"mode": "L"}, {"exif_transpose": True}):
        expected = outcome("pillow", bytes(data), **options)
        assert isinstance(expected, torch.Tensor)
        got = outcome(backend, bytes(data), **options)
        assert isinstance(got, torch.Tensor) and torch.equal(got, expected), options


@pytest.fixture(scope="module")
def crafted_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """Eight good photos and the crafted files above; the names of those that no backend decodes."""
    root = tmp_path_factory.mktemp("crafted")
    (root / "c0").mkdir()
    for i in range(8):
        data = jpeg(photo_like(120 + 8 * i, 160, seed=i), quality=85, progressive=i % 2 == 0)
        (root / "c0" / f"good{i}.jpg").write_bytes(data)
    base = jpeg(photo_like(120, 160, seed=50), quality=85, progressive=True)
    factors = bytearray(base)
    factors[factors.index(b"\xff\xc2") + 11] = 0x32
    small = jpeg(photo_like(64, 64, seed=3), quality=75)
    sof = small.index(b"\xff\xc0")
    length = int.from_bytes(small[sof + 2 : sof + 4], "big")
    files = {
        "factors32.jpg": bytes(factors),
        "restart.jpg": base[:2] + b"\xff\xd0" + base[2:],
        "tem.jpg": base[:2] + b"\xff\x01" + base[2:],
        "fill.jpg": b"\xff\xd8" + b"\xff" * (1 << 20),
        "junk_claim.jpg": small[:sof] + b"\x00" + small[sof : sof + 5] + struct.pack(">HH", 6000, 6000)
        + small[sof + 9 : sof + 2 + length] + small[sof + 2 + length :],
    }
    for name, data in files.items():
        (root / "c0" / name).write_bytes(data)
    return root, {"tem.jpg", "fill.jpg", "junk_claim.jpg"}


def _crafted_pipeline(root: Path, backend: str):
    import mediapipe as mp
    from mediapipe import augment as A

    return mp.Pipeline(source=mp.loaders.folder(root), decode={"image": mp.decoders.image(backend)},
                       augment=[A.RandomResizedCrop(48), A.HorizontalFlip()], batch_size=3, seed=5, device="cpu",
                       on_error="skip")


def test_a_folder_of_crafted_files_gives_the_same_batches_on_every_backend(crafted_folder):
    root, refused = crafted_folder
    expected = None
    for backend, workers in (("pillow", 0), ("turbo", 2), ("nvimgcodec", 0)):
        if backend == "nvimgcodec":
            pytest.importorskip("nvidia.nvimgcodec")
        loader = _crafted_pipeline(root, backend).loader(num_workers=workers)
        batches = [b["image"].clone() for b in loader]
        assert {Path(entry.split(":")[0]).name for entry in loader.stats.failed} == refused, backend
        if expected is None:
            expected = batches
        assert len(batches) == len(expected) and all(map(torch.equal, batches, expected)), backend


def test_faults_of_process_workers_over_crafted_files(crafted_folder):
    """A worker SIGKILLed mid-epoch is a WorkerError naming the signal (or, where it had built its
    batches already, the pass ends whole), never a hang; resuming after two batches
    (skips included) gives the uninterrupted run's later batches; a second live iterator is a
    pass of its own, from the epoch's first batch."""
    import os
    import signal

    import mediapipe as mp

    root, _ = crafted_folder
    pipe = _crafted_pipeline(root, "turbo")
    full = [b["image"].clone() for b in pipe.loader(num_workers=2)]
    first = pipe.loader(num_workers=2, prefetch=1)
    it = iter(first)
    next(it), next(it)
    state = first.state_dict()
    os.kill(it.worker_pids[0], signal.SIGKILL)
    after = []
    try:
        after = [b["image"].clone() for b in it]
    except mp.WorkerError as err:  # the dead worker still had a batch to build
        assert "SIGKILL" in str(err) and len(after) < len(full) - 2
    else:  # its batches were all built before it died: none is lost
        assert len(after) == len(full) - 2 and all(map(torch.equal, after, full[2:]))
    resumed = pipe.loader(num_workers=2)
    resumed.load_state_dict(state)
    rest = [b["image"] for b in resumed]
    assert len(rest) == len(full) - 2 and all(map(torch.equal, rest, full[2:]))
    loader = pipe.loader(num_workers=2, shuffle=True)
    one = iter(loader)
    head = next(one)["image"].clone()
    two = [b["image"] for b in loader]  # a new pass starts at the epoch's first batch
    tail = [b["image"] for b in one]
    assert torch.equal(head, full[0]) and all(map(torch.equal, tail, full[1:])) and len(tail) == len(full) - 1
    assert len(two) == len(full) and all(map(torch.equal, two, full))
