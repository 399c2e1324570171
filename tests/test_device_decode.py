"""The device-decode stage (batched decoding in the training process, as on a GPU), run here
on the CPU with nvImageCodec's CPU-only backend: the batched region decode, the batched
resize of the fused crop, stats and errors under every ``on_error``, values against the
turbo backend; and torch's ``meta`` device standing in for a GPU, so that a batch that leaves
the device on the way (a field collated on the host) fails here."""

from __future__ import annotations

import math

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.functional import resample
from mediapipe.decoders import create
from mediapipe.decoders.base import NO_HINT
from mediapipe.rng import SampleRNG
from tests.helpers import state_after, write_image_folder

pytest.importorskip("nvidia.nvimgcodec")
TF = pytest.importorskip("torchvision.transforms.v2.functional")

SEED, SIZE = 4, 40


def pipeline(root, device_decode: bool, ops=None, device="cpu", **kwargs) -> mp.Pipeline:
    ops = [A.RandomResizedCrop(SIZE, scale=(0.3, 1.0)), A.HorizontalFlip(), A.Normalize()] if ops is None else ops
    return mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image("nvimgcodec", device_decode=device_decode)},
                       ops, batch_size=6, seed=SEED, device=device, **kwargs)


def psnr(got: torch.Tensor, expected: torch.Tensor) -> float:
    mse = float((got.double() - expected.double()).pow(2).mean())
    return 100.0 if mse == 0 else 10 * math.log10(255**2 / mse)


def turbo_reference(pipe: mp.Pipeline, index: int, epoch: int = 0) -> torch.Tensor:
    """What the pipeline's crop and flip make of sample ``index``, from an independent path: the
    turbo backend's full decode, torchvision's antialiased resized_crop, the drawn flip."""
    ref = pipe.source.ref(index)
    blob = next(iter(ref.blobs.values()))
    full = create("image", "turbo").decode(blob, NO_HINT, SampleRNG(0, 0, 0, 0), {})
    crop, flip = pipe.augment[:2]
    box = crop.sample_params(SampleRNG(SEED, epoch, index, 0), {"size": tuple(full.shape[-2:])})
    out = TF.resized_crop(full, box["top"], box["left"], box["height"], box["width"], [SIZE, SIZE], antialias=True)
    return out.flip(-1) if flip.sample_params(SampleRNG(SEED, epoch, index, 1), {})["flip"] else out


def test_device_decode_matches_the_turbo_reference(image_folder):
    """Every JPEG's region decoded at full scale and resized as a batch: within one level of a
    full turbo decode + torchvision's resized_crop at the same box (float vs uint8 rounding)."""
    pipe = pipeline(image_folder, True, [A.RandomResizedCrop(SIZE, scale=(0.3, 1.0)), A.HorizontalFlip()])
    assert pipe.plan.device_fields == {"image"}
    seen = 0
    for batch in pipe.loader(num_workers=2, shuffle=False):
        assert batch["image"].dtype == torch.uint8 and batch["image"].shape[1:] == (3, SIZE, SIZE)
        for got, index in zip(batch["image"], batch["index"].tolist()):
            expected = turbo_reference(pipe, index)
            assert (got.int() - expected.int()).abs().max() <= 1, index
            assert psnr(got, expected) >= 48.0
            seen += 1
    assert seen == len(pipe.source)


def test_device_decode_draws_what_the_workers_draw(image_folder):
    """Same samples, labels, crops and flips as the worker path; its pixels differ only where
    the worker decoded at a reduced DCT scale, within the fused path's quality bound."""
    on_device, in_workers = pipeline(image_folder, True), pipeline(image_folder, False)
    assert not in_workers.plan.device_fields
    scores = []
    for a, b in zip(on_device.loader(num_workers=2), in_workers.loader(num_workers=2)):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["label"], b["label"])
        assert a["image"].shape == b["image"].shape == (a["image"].shape[0], 3, SIZE, SIZE)
        scores += [psnr(x * 58, y * 58) for x, y in zip(a["image"], b["image"])]  # normalised: ~1/58 per level
    assert min(scores) >= 28.0 and sorted(scores)[len(scores) // 2] >= 38.0


def test_the_fused_crop_is_one_batched_resize(image_folder, monkeypatch):
    """One decode_batch call and one batched resize per batch, no per-sample resize."""
    from mediapipe.augment.functional import geometry
    from mediapipe.decoders.image_nvimgcodec import NvImageCodecImageDecoder

    calls = {"decode_batch": [], "resize_regions": [], "resize_image": 0}
    decode_batch, resize_regions = NvImageCodecImageDecoder.decode_batch, resample.resize_regions

    def counting_decode(self, blobs, hints, metas):
        calls["decode_batch"].append(len(blobs))
        return decode_batch(self, blobs, hints, metas)

    def counting_resize(images, size, interpolation="bilinear"):
        calls["resize_regions"].append(len(images))
        return resize_regions(images, size, interpolation)

    def no_resize(*args, **kwargs):
        calls["resize_image"] += 1
        raise AssertionError("a per-sample resize on the device path")

    monkeypatch.setattr(NvImageCodecImageDecoder, "decode_batch", counting_decode)
    monkeypatch.setattr(resample, "resize_regions", counting_resize)
    monkeypatch.setattr(geometry, "resize_image", no_resize)
    batches = list(pipeline(image_folder, True).loader(shuffle=False))
    assert calls["decode_batch"] == calls["resize_regions"] == [6] * len(batches) == [6] * 4
    assert calls["resize_image"] == 0


def test_device_decode_resumes_like_the_worker_path(image_folder):
    pipe = pipeline(image_folder, True)
    full = [b["image"].clone() for b in pipe.loader(num_workers=1)]
    state = state_after(pipe.loader(num_workers=1), 1)
    resumed = pipe.loader(num_workers=1)
    resumed.load_state_dict(state)
    rest = [b["image"] for b in resumed]
    assert len(rest) == len(full) - 1 and all(torch.equal(x, y) for x, y in zip(rest, full[1:]))


def test_stats_of_the_device_stage(tmp_path):
    """Samples, bytes, the device-decode seconds, and a PNG (no nvJPEG for it) counted as decoded
    on the CPU, by reason."""
    from PIL import Image

    write_image_folder(tmp_path, 5, classes=1, seed=3)
    Image.new("RGB", (90, 70), (20, 120, 200)).save(tmp_path / "class0" / "zz.png")
    pipe = pipeline(tmp_path, True)
    loader = pipe.loader(shuffle=False)
    batches = list(loader)
    assert len(batches) == 1 and batches[0]["image"].shape == (6, 3, SIZE, SIZE)
    assert loader.stats.samples == 6 and loader.stats.batches == 1
    assert loader.stats.bytes == sum(p.stat().st_size for p in tmp_path.rglob("*.*"))
    assert loader.stats.seconds["device_decode"] > 0
    assert dict(loader.stats.fallbacks) == {"nvimgcodec: not a JPEG": 1}
    assert loader.stats.as_dict()["fallbacks"] == {"nvimgcodec: not a JPEG": 1}


def cut_short(data: bytes) -> bytes:
    return data[:3000]


def undefined_tables(data: bytes) -> bytes:
    """The scan names Huffman tables the file never defines: the header reads fine (the worker's
    probe passes it), the decode fails, in nvImageCodec itself."""
    data = bytearray(data)
    sos = data.index(b"\xff\xda")
    for c in range(data[sos + 4]):
        data[sos + 6 + 2 * c] = 0x33
    return bytes(data)


# damage -> (how, the decoder that reports it, its reason): a file cut short goes to the turbo
# path on the device too (a region decode would stop above the cut and never see it)
DAMAGE = {"cut short": (cut_short, "turbo", "Premature end of JPEG file"),
          "undefined Huffman tables": (undefined_tables, "nvimgcodec", "corrupt or truncated JPEG data")}


@pytest.fixture(params=list(DAMAGE))
def damaged(request, tmp_path):
    """Six JPEGs in two class folders, the third of the source (slot 2) damaged."""
    write_image_folder(tmp_path, 6, classes=2, seed=2)
    bad = sorted(tmp_path.rglob("*.jpg"))[2]
    damage, decoder, reason = DAMAGE[request.param]
    bad.write_bytes(damage(bad.read_bytes()))
    return tmp_path, bad, decoder, reason


def test_a_damaged_jpeg_on_the_device_raises_naming_the_file(damaged):
    root, bad, decoder, reason = damaged
    with pytest.raises(mp.DecodeError, match=bad.name) as err:
        list(pipeline(root, True).loader(shuffle=False))
    assert err.value.decoder == decoder and err.value.path == str(bad) and reason in err.value.reason


def test_a_damaged_jpeg_on_the_device_is_replaced_by_zeros(damaged):
    root, bad, decoder, reason = damaged
    pipe = pipeline(root, True, [A.RandomResizedCrop(SIZE), A.HorizontalFlip()], on_error="replace")
    position = next(i for i in range(len(pipe.source)) if root / pipe.source.ref(i).key == bad)
    loader = pipe.loader(shuffle=False)
    batch = next(iter(loader))
    assert batch["valid"].tolist() == [i != position for i in range(6)]
    assert batch["index"].tolist() == list(range(6))
    assert not batch["image"][position].any() and all(batch["image"][i].any() for i in range(6) if i != position)
    assert dict(loader.stats.errors) == {f"{decoder}: {reason}": 1}
    assert loader.stats.failed == [f"{bad}: {reason}"]


def test_a_damaged_jpeg_on_the_device_is_skipped_as_a_worker_skips_it(damaged):
    """The stand-in is the one a worker would have chosen (same key), loaded whole on the device:
    its index, label and pixels in the slot, and the batch keeps its size."""
    root, bad, decoder, reason = damaged
    device = pipeline(root, True, on_error="skip").loader(shuffle=False)
    workers = pipeline(root, False, on_error="skip").loader(shuffle=False)
    a, b = next(iter(device)), next(iter(workers))
    assert "valid" not in a and a["image"].shape[0] == 6
    assert torch.equal(a["index"], b["index"]) and torch.equal(a["label"], b["label"])
    assert a["index"].tolist()[2] != 2  # the failed sample's slot holds its stand-in
    stand_in = a["index"].tolist().index(a["index"].tolist()[2])  # where that sample is in its own slot
    assert torch.equal(a["image"][2], a["image"][stand_in])  # same sample, same draws
    assert dict(device.stats.errors) == {f"{decoder}: {reason}": 1} and device.stats.failed == [f"{bad}: {reason}"]


def test_every_sample_failing_on_the_device_is_replaced_by_zeros_of_a_good_ones_shape(tmp_path):
    write_image_folder(tmp_path, 8, classes=1, seed=5)
    files = sorted(tmp_path.rglob("*.jpg"))
    for path in files[:6]:  # the whole first batch
        path.write_bytes(path.read_bytes()[:2500])
    pipe = pipeline(tmp_path, True, [A.RandomResizedCrop(SIZE), A.HorizontalFlip()], on_error="replace")
    batch = next(iter(pipe.loader(shuffle=False)))
    assert batch["valid"].tolist() == [False] * 6
    assert batch["image"].shape == (6, 3, SIZE, SIZE) and not batch["image"].any()


def test_side_fields_of_a_device_decoder_reach_the_batch(image_folder, monkeypatch):
    from mediapipe.decoders.base import Decoded
    from mediapipe.decoders.image_nvimgcodec import NvImageCodecImageDecoder

    decode_batch = NvImageCodecImageDecoder.decode_batch

    def with_sizes(self, blobs, hints, metas):  # a decoder that also reports each file's size
        out = decode_batch(self, blobs, hints, metas)
        return [Decoded(x, {"nbytes": len(b.read())}) for x, b in zip(out, blobs)]

    monkeypatch.setattr(NvImageCodecImageDecoder, "decode_batch", with_sizes)
    pipe = pipeline(image_folder, True)
    batch = next(iter(pipe.loader(shuffle=False)))
    expected = [next(iter(pipe.source.ref(i).blobs.values())).nbytes() for i in range(6)]
    assert batch["image_nbytes"].tolist() == expected


# -- the meta device: a stand-in for a second device ----------------------------------------------
@pytest.mark.parametrize("workers", [0, 1])
def test_a_device_decoded_batch_stays_on_the_device(image_folder, workers):
    """Decoded on the "device" (meta: shapes without data), the image is collated there and the
    batch stage runs there: the image and the label end on the same device."""
    pipe = pipeline(image_folder, True, device="meta")
    batches = list(pipe.loader(num_workers=workers, shuffle=False))
    assert len(batches) == 4
    for batch in batches:
        assert batch["image"].device.type == batch["label"].device.type == "meta"
        assert batch["image"].shape == (6, 3, SIZE, SIZE) and batch["image"].dtype == torch.float32


def test_collate_allocates_on_the_samples_device():
    from mediapipe.stages.collate import collate

    samples = [{"image": torch.empty(3, 8, 8, dtype=torch.uint8, device="meta"), "audio": torch.empty(1, n, device="meta"),
                "label": 1} for n in (5, 7)]
    out = collate(samples, {"audio": "pad"})
    assert out["image"].device.type == out["audio"].device.type == "meta"
    assert out["image"].shape == (2, 3, 8, 8) and out["audio"].shape == (2, 1, 7)
    assert out["audio_lengths"].device.type == "meta"
    assert collate([samples[0], None], {"audio": "pad"})["image"].device.type == "meta"


def test_collate_takes_rows_of_one_batch_without_a_copy():
    from mediapipe.stages.collate import collate

    batch = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    out = collate([{"image": batch[0]}, {"image": batch[1]}], {})["image"]
    assert out.data_ptr() == batch.data_ptr() and torch.equal(out, batch)
    swapped = collate([{"image": batch[1]}, {"image": batch[0]}], {})["image"]
    assert swapped.data_ptr() != batch.data_ptr() and torch.equal(swapped, batch.flip(0))


def test_the_batch_stage_runs_on_the_batch_device(image_folder):
    """The batch-stage ops on a batch on another device than the CPU keep it there (a flip needs
    no count of its flips read back, which the meta device could not give)."""
    from mediapipe.stages.batch_stage import run_batch_ops

    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image("turbo")},
                       [A.HorizontalFlip(), A.VerticalFlip(), A.Normalize()], batch_size=4, seed=0, device="meta")
    data = {"image": torch.empty(4, 3, 16, 16, dtype=torch.uint8, device="meta"),
            "label": torch.zeros(4, dtype=torch.int64, device="meta")}
    params = {i: {"flip": torch.tensor([True, False, True, False], device="meta")} for i in (0, 1)}
    params[2] = {}
    out = run_batch_ops(pipe.plan, data, params)
    assert out["image"].device.type == out["label"].device.type == "meta"
    assert out["image"].shape == (4, 3, 16, 16) and out["image"].dtype == torch.float32
