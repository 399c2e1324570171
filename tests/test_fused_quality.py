"""The fused decode + crop + resize against the reference: a full Pillow decode, then torchvision's
``resized_crop`` / ``resize`` (antialiased) at the same box, on photographic JPEGs of every chroma
subsampling, baseline and progressive, with and without restart markers, at 224, 112 and 64 px."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from PIL import Image

from mediapipe import augment as A
from mediapipe import fields as mp_fields
from mediapipe.decoders import backends, create
from mediapipe.decoders.image import plan_decode
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic import photo_like

TF = pytest.importorskip("torchvision.transforms.v2.functional")

BACKENDS = [name for name, cls in backends("image").items() if cls.available(None)]
SIZES = (224, 112, 64)
CROPS_PER_IMAGE = 3
# the bound: what two correct full-resolution resamplers give against each other
MEDIAN_DB, P10_DB, MIN_DB = 38.0, 32.0, 28.0


def _jpeg(array: np.ndarray, **save: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", **save)
    return buf.getvalue()


def _restart_markers(data: bytes) -> int:
    return sum(data.count(bytes((0xFF, 0xD0 + n))) for n in range(8))


# (height, width, encoder options): 4:2:0, 4:2:2, 4:4:4 and grey; baseline and progressive;
# restart markers every row of blocks or every few blocks
VARIANTS = [
    (560, 760, dict(quality=90, subsampling=2)),
    (700, 520, dict(quality=85, subsampling=1, progressive=True)),
    (960, 1200, dict(quality=95, subsampling=0, restart_marker_rows=1)),
    (500, 640, dict(quality=80, subsampling=2, progressive=True, restart_marker_blocks=5)),
    (720, 720, dict(quality=92, subsampling=1, restart_marker_blocks=3)),
    (600, 480, dict(quality=88, subsampling=0, progressive=True)),
    (640, 560, dict(quality=90, grey=True)),
    (520, 780, dict(quality=85, grey=True, progressive=True, restart_marker_rows=2)),
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small images, one at a time, as in a loader worker: torch's threads would only contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def photos() -> list[bytes]:
    out = []
    for i, (height, width, options) in enumerate(VARIANTS):
        options = dict(options)
        array = photo_like(height, width, seed=40 + i)
        if options.pop("grey", False):
            array = np.asarray(Image.fromarray(array).convert("L"))
        data = _jpeg(array, **options)
        if "restart_marker_rows" in options or "restart_marker_blocks" in options:
            assert _restart_markers(data) > 0, "the encoder wrote no restart markers"
        out.append(data)
    return out


def test_the_photos_cover_every_layout(photos):
    layers = [Image.open(io.BytesIO(d)).layer for d in photos]
    sampling = {tuple(layer[0][1:3]) if len(layer) == 3 else "grey" for layer in layers}
    assert sampling == {(2, 2), (2, 1), (1, 1), "grey"}
    assert sum(bool(Image.open(io.BytesIO(d)).info.get("progressive")) for d in photos) == 4


def _psnr(got: torch.Tensor, expected: torch.Tensor) -> float:
    """Peak signal-to-noise ratio in dB; equal images count as 100 dB."""
    mse = float(np.mean((got.numpy().astype(np.float64) - expected.numpy()) ** 2))
    return 100.0 if mse == 0 else min(100.0, 10 * math.log10(255**2 / mse))


def _fused(decoder, op, data: bytes, params: dict, meta: dict) -> torch.Tensor:
    """What the sample stage does: the op's hint steers the decode, apply_decoded finishes it."""
    hint = op.decode_hint(params, meta)
    return op.apply_decoded(decoder.decode(Blob("photo.jpg", data=data), hint, SampleRNG(0, 0, 0, 0), meta), params)


def _reference(data: bytes) -> torch.Tensor:
    return torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)


@pytest.fixture(scope="module")
def references(photos) -> list[torch.Tensor]:
    return [_reference(data) for data in photos]


def _bound(scores: list[float], what: str) -> None:
    scores = np.array(scores)
    summary = (f"{what}: median {np.median(scores):.1f} dB, p10 {np.percentile(scores, 10):.1f}, "
               f"min {scores.min():.1f} over {len(scores)} crops")
    assert np.median(scores) >= MEDIAN_DB, summary
    assert np.percentile(scores, 10) >= P10_DB, summary
    assert scores.min() >= MIN_DB, summary


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", SIZES)
def test_random_resized_crop_meets_the_quality_bound(backend, size, photos, references):
    decoder = create("image", backend)
    op = A.RandomResizedCrop(size)
    scores, reduced, coarse = [], [], []
    for i, (data, full) in enumerate(zip(photos, references)):
        meta = decoder.probe(Blob("photo.jpg", data=data))
        meta["size"] = (meta["height"], meta["width"])
        for k in range(CROPS_PER_IMAGE):
            params = op.sample_params(SampleRNG(7, size, i, k), meta)
            box = (params["top"], params["left"], params["height"], params["width"])
            expected = TF.resized_crop(full, *box, [size, size], antialias=True)
            got = _fused(decoder, op, data, params, meta)
            assert got.shape == expected.shape == (3, size, size) and got.dtype == torch.uint8
            scores.append(_psnr(got, expected))
            if plan_decode(op.decode_hint(params, meta), meta["size"]).denominator > 1:
                reduced.append(scores[-1])
            if decoder.scans(data, op.decode_hint(params, meta)) is not data:  # decoded without its last scans
                coarse.append(scores[-1])
    _bound(scores, f"{backend} {size}px, every crop")
    # the crops decoded at a reduced DCT scale, and the progressive ones decoded without their
    # final refinement scans, keep the bound on their own
    assert len(reduced) >= {224: 1, 112: 4, 64: len(scores) // 2}[size]
    _bound(reduced, f"{backend} {size}px, crops decoded reduced")
    assert len(coarse) >= {224: 2, 112: 6, 64: 8}[size]
    _bound(coarse, f"{backend} {size}px, progressive crops without the final refinement scans")


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_decodes_every_crop_as_the_reference(backend, photos, references):
    """exact=True: no DCT scaling, every scan decoded; the resize alone differs from the reference."""
    decoder = create("image", backend, exact=True)
    op = A.RandomResizedCrop(64)
    for i, (data, full) in enumerate(zip(photos, references)):
        meta = decoder.probe(Blob("photo.jpg", data=data))
        meta["size"] = (meta["height"], meta["width"])
        params = op.sample_params(SampleRNG(7, 64, i, 0), meta)
        expected = TF.resized_crop(full, params["top"], params["left"], params["height"], params["width"],
                                   [64, 64], antialias=True)
        got = _fused(decoder, op, data, params, meta)
        assert (got.int() - expected.int()).abs().max() <= 1  # the decoders' chroma upsampling may differ by 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", [256, 96])
def test_resize_meets_the_quality_bound(backend, size, photos):
    decoder = create("image", backend)
    op = A.Resize(size)
    scores = []
    for data in photos:
        meta = decoder.probe(Blob("photo.jpg", data=data))
        meta["size"] = (meta["height"], meta["width"])
        params = op.sample_params(SampleRNG(0, 0, 0, 0), meta)
        expected = TF.resize(_reference(data), [size], antialias=True)
        got = _fused(decoder, op, data, params, meta)
        assert got.shape == expected.shape
        scores.append(_psnr(got, expected))
    assert min(scores) >= MIN_DB and np.median(scores) >= MEDIAN_DB, scores


@pytest.mark.parametrize("backend", ["turbo", "pillow"])
def test_a_crop_decoded_at_full_scale_is_bit_exact(backend, photos):
    """A crop too small to reduce: the same pixels and the same kernel as the reference."""
    decoder = create("image", backend)
    data = photos[0]
    op = A.RandomResizedCrop(224)
    meta = decoder.probe(Blob("photo.jpg", data=data))
    meta["size"] = (meta["height"], meta["width"])
    params = {"top": 101, "left": 57, "height": 300, "width": 333}
    assert plan_decode(op.decode_hint(params, meta), meta["size"]).denominator == 1
    expected = TF.resized_crop(_reference(data), 101, 57, 300, 333, [224, 224], antialias=True)
    got = _fused(decoder, op, data, params, meta)
    assert (got.int() - expected.int()).abs().max() <= 1  # the decoders' chroma upsampling may differ by 1


def test_turbo_and_pillow_agree_on_reduced_decodes(photos):
    """Both backends decode at the same DCT scale and resample the same box."""
    turbo, pillow = create("image", "turbo"), create("image", "pillow")
    op = A.RandomResizedCrop(64)
    for i, data in enumerate(photos[:4]):
        meta = turbo.probe(Blob("photo.jpg", data=data))
        meta["size"] = (meta["height"], meta["width"])
        params = op.sample_params(SampleRNG(3, 0, i, 0), meta)
        a, b = _fused(turbo, op, data, params, meta), _fused(pillow, op, data, params, meta)
        assert _psnr(a, b) >= 45.0


@pytest.mark.parametrize("size", SIZES)
def test_the_device_paths_batched_crop_meets_the_quality_bound(size, photos, references):
    """The device path (a GPU's, here on nvImageCodec's CPU backend): every crop decoded as its
    region at full scale in one batched call, then resized as one batch by the fused op. Against
    the same reference as the fused CPU path, it must be closer: within a level of it on every
    pixel (float resampling against the reference's uint8 kernel), over 50 dB on every crop."""
    pytest.importorskip("nvidia.nvimgcodec")
    decoder = create("image", "nvimgcodec", device=torch.device("cpu"))
    op = A.RandomResizedCrop(size)
    blobs, hints, metas, boxes, expected = [], [], [], [], []
    for i, (data, full) in enumerate(zip(photos, references)):
        meta = decoder.probe(Blob("photo.jpg", data=data))
        meta["size"] = (meta["height"], meta["width"])
        for k in range(CROPS_PER_IMAGE):
            params = op.sample_params(SampleRNG(7, size, i, k), meta)
            boxes.append(params)
            blobs.append(Blob("photo.jpg", data=data))
            hints.append(op.decode_hint(params, meta))
            metas.append(meta)
            expected.append(TF.resized_crop(full, params["top"], params["left"], params["height"], params["width"],
                                            [size, size], antialias=True))
    decoded = decoder.decode_batch(blobs, hints, metas)
    assert [tuple(x.shape[-2:]) for x in decoded] == [(b["height"], b["width"]) for b in boxes]  # regions, full scale
    batch = op.apply_decoded_batch(decoded, boxes)
    assert batch.shape == (len(boxes), 3, size, size) and batch.dtype == torch.uint8
    scores = [_psnr(got, ref) for got, ref in zip(batch, expected)]
    errors = torch.stack([(got.int() - ref.int()).abs() for got, ref in zip(batch, expected)])
    _bound(scores, f"device path {size}px")
    assert min(scores) >= 50.0, sorted(scores)[:3]
    assert int(errors.max()) <= 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", [A.Letterbox(160, fill=0), A.Letterbox((96, 200), center=False),
                                A.ScaleJitter((480, 480), scale_range=(0.2, 0.6)), A.RandomShortestSize((96, 128, 300))])
def test_detection_resizes_meet_the_quality_bound(backend, op, photos):
    """Letterbox, ScaleJitter and RandomShortestSize fuse their resize into the decoder as Resize
    does: against a full decode, torchvision's antialiased resize (and the letterbox's pad)."""
    decoder = create("image", backend)
    scores = []
    for i, data in enumerate(photos):
        meta = decoder.probe(Blob("photo.jpg", data=data))
        meta["size"] = (meta["height"], meta["width"])
        params = op.sample_params(SampleRNG(3, 0, i, 0), meta)
        expected = TF.resize(_reference(data), list(params["size"]), antialias=True)
        if "padding" in params:
            expected = TF.pad(expected, list(params["padding"]), fill=op.fill)
        got = _fused(decoder, op, data, params, meta)
        assert got.shape[-2:] == expected.shape[-2:] and got.dtype == torch.uint8
        scores.append(_psnr(got.expand_as(expected), expected))
    assert min(scores) >= MIN_DB and np.median(scores) >= MEDIAN_DB, scores


@pytest.mark.parametrize("backend", ["turbo", "pillow"])
def test_an_iou_crop_decodes_its_region_exactly(backend, photos):
    """RandomIoUCrop fused into the decoder: the region of the full decode (a decoder's chroma
    upsampling at the region's border may differ by one level)."""
    decoder = create("image", backend)
    op = A.RandomIoUCrop(min_scale=0.3, max_scale=0.8, sampler_options=(0.1,))
    objects = torch.tensor([[100.0, 120.0, 300.0, 330.0], [40.0, 20.0, 90.0, 60.0]])
    crops = 0
    for i, data in enumerate(photos):
        meta = decoder.probe(Blob("photo.jpg", data=data))
        meta["size"] = (meta["height"], meta["width"])
        bound = op.bind({"image": mp_fields.FieldType("image"), "boxes": mp_fields.boxes()})
        params = bound.sample_params(SampleRNG(0, 0, i, 0), {**meta, "fields": {"boxes": objects}})
        if not params["crop"]:
            continue
        crops += 1
        expected = _reference(data)[..., params["top"] : params["top"] + params["height"],
                                    params["left"] : params["left"] + params["width"]]
        got = _fused(decoder, bound, data, params, meta)
        assert got.shape[-2:] == expected.shape[-2:]
        assert (got.int() - expected.int()).abs().float().mean() < 0.5 and _psnr(got.expand_as(expected), expected) > 40
    assert crops >= 6
