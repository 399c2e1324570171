"""The deferred device-decode path attacked as a hostile user would, on the CPU (nvImageCodec's
CPU-only backend, ``device_decode=True``): odd and damaged files mixed in one batch under every
``on_error``, whole batches failing, batches of one, images smaller than the crop, determinism
against the worker path, and exact stats."""

from __future__ import annotations

import io
import json

import pytest
import torch
from PIL import Image

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.synthetic import jpeg_bytes, photo_like
from tests.helpers import state_after, write_image_folder

pytest.importorskip("nvidia.nvimgcodec")

SEED, SIZE = 7, 32


def pipeline(root, device_decode: bool, ops=None, batch_size: int = 8, **kwargs) -> mp.Pipeline:
    ops = [A.RandomResizedCrop(SIZE, scale=(0.3, 1.0)), A.HorizontalFlip()] if ops is None else ops
    return mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image("nvimgcodec", device_decode=device_decode)},
                       ops, batch_size=batch_size, seed=SEED, device="cpu", **kwargs)


def _save(image: Image.Image, **kwargs) -> bytes:
    out = io.BytesIO()
    image.save(out, **kwargs)
    return out.getvalue()


def huge_header(data: bytes) -> bytes:
    """A JPEG whose SOF claims 60000 x 60000 pixels: bounded before any memory is spent."""
    data = bytearray(data)
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = (60000).to_bytes(2, "big") * 2
    return bytes(data)


def odd_files(root) -> dict[str, str]:
    """Eight files in one class folder, each a different kind; name -> what it is."""
    folder = root / "class0"
    folder.mkdir(parents=True)
    photo = photo_like(90, 120, 11)
    good = jpeg_bytes(photo, quality=90)
    rgb = Image.fromarray(photo)
    kinds = {
        "a_good.jpg": good,
        "b_corrupt.jpg": good[:200] + bytes(range(256)) * 4 + good[1200:],
        "c_truncated.jpg": good[: len(good) // 2],
        "d_progressive.jpg": _save(rgb, format="JPEG", quality=90, progressive=True),
        "e_cmyk.jpg": _save(rgb.convert("CMYK"), format="JPEG", quality=90),
        "f_grey.jpg": _save(rgb.convert("L"), format="JPEG", quality=90),
        "g_png.jpg": _save(rgb, format="PNG"),
        "h_huge_header.jpg": huge_header(good),
    }
    for name, data in kinds.items():
        (folder / name).write_bytes(data)
    return kinds


BAD = ("b_corrupt.jpg", "c_truncated.jpg", "h_huge_header.jpg")


def _names(pipe, batch) -> list[str]:
    return [pipe.source.ref(i).key.split("/")[-1] for i in batch["index"].tolist()]


@pytest.fixture
def odd_folder(tmp_path):
    odd_files(tmp_path)
    return tmp_path


def test_odd_files_in_one_batch_raise_naming_the_first_bad_one(odd_folder):
    with pytest.raises(mp.DecodeError) as err:
        list(pipeline(odd_folder, True).loader(shuffle=False))
    assert err.value.path.endswith(BAD)


def test_odd_files_in_one_batch_replaced_as_the_worker_path_replaces_them(odd_folder):
    device, workers = (pipeline(odd_folder, d, on_error="replace").loader(shuffle=False) for d in (True, False))
    a, b = next(iter(device)), next(iter(workers))
    names = _names(device.pipeline if hasattr(device, "pipeline") else pipeline(odd_folder, True), a)
    assert a["valid"].tolist() == b["valid"].tolist() == [n not in BAD for n in names]
    assert a["image"].shape == b["image"].shape == (8, 3, SIZE, SIZE)
    for i, ok in enumerate(a["valid"].tolist()):
        if ok:  # progressive, CMYK, grey, PNG: the same picture either way
            diff = (a["image"][i].int() - b["image"][i].int()).abs().float()
            assert diff.mean() <= 4.0, (names[i], diff.mean())
        else:
            assert not a["image"][i].any()
    assert sum(device.stats.errors.values()) == sum(workers.stats.errors.values()) == len(BAD)
    assert sorted(f.split(":")[0].split("/")[-1] for f in device.stats.failed) == sorted(BAD)


def test_odd_files_in_one_batch_skipped_as_the_worker_path_skips_them(odd_folder):
    device, workers = (pipeline(odd_folder, d, on_error="skip").loader(shuffle=False) for d in (True, False))
    a, b = next(iter(device)), next(iter(workers))
    assert torch.equal(a["index"], b["index"]) and torch.equal(a["label"], b["label"])
    assert not set(_names(pipeline(odd_folder, True), a)) & set(BAD)
    assert ((a["image"].int() - b["image"].int()).abs().float().mean(dim=(1, 2, 3)) <= 4.0).all()
    assert sum(device.stats.errors.values()) == len(BAD) == sum(workers.stats.errors.values())


@pytest.mark.parametrize("on_error", ["raise", "skip", "replace"])
def test_every_sample_failing(tmp_path, on_error):
    """Every file of the dataset damaged: a clear error (or zeros under replace), never a hang."""
    write_image_folder(tmp_path, 4, classes=1, seed=1)
    for path in tmp_path.rglob("*.jpg"):
        path.write_bytes(path.read_bytes()[:600])
    loader = pipeline(tmp_path, True, batch_size=4, on_error=on_error).loader(shuffle=False)
    with pytest.raises(mp.MediapipeError, match="img0000.jpg"):  # no good sample anywhere to stand in
        list(loader)


def test_batch_of_one(image_folder):
    a = list(pipeline(image_folder, True, batch_size=1).loader(shuffle=False))
    b = list(pipeline(image_folder, True, batch_size=8).loader(shuffle=False))
    assert len(a) == 24 and all(x["image"].shape == (1, 3, SIZE, SIZE) for x in a)
    assert torch.equal(torch.cat([x["image"] for x in a]), torch.cat([x["image"] for x in b]))


def test_images_smaller_than_the_crop(tmp_path):
    folder = tmp_path / "class0"
    folder.mkdir()
    for i, (h, w) in enumerate([(12, 20), (9, 9), (25, 14), (16, 31)]):
        (folder / f"s{i}.jpg").write_bytes(jpeg_bytes(photo_like(h, w, i), quality=95))
    a = next(iter(pipeline(tmp_path, True, batch_size=4).loader(shuffle=False)))
    b = next(iter(pipeline(tmp_path, False, batch_size=4).loader(shuffle=False)))
    assert a["image"].shape == (4, 3, SIZE, SIZE)
    assert (a["image"].int() - b["image"].int()).abs().max() <= 1


def test_same_batches_across_workers_resume_and_two_iterators(image_folder):
    pipe = pipeline(image_folder, True)
    zero = [b["image"].clone() for b in pipe.loader(num_workers=0)]
    two = [b["image"].clone() for b in pipe.loader(num_workers=2)]
    assert len(zero) == 3 and all(torch.equal(x, y) for x, y in zip(zero, two))
    state = state_after(pipe.loader(num_workers=2), 2)
    resumed = pipe.loader(num_workers=0)
    resumed.load_state_dict(state)
    rest = [b["image"] for b in resumed]
    assert len(rest) == 1 and torch.equal(rest[0], zero[2])
    loader = pipe.loader(num_workers=0)
    first, second = iter(loader), iter(loader)  # two live iterators, interleaved: each its own epoch
    for expected in zero:
        assert torch.equal(next(first)["image"], expected) and torch.equal(next(second)["image"], expected)


def test_stats_count_errors_and_fallbacks_exactly(odd_folder):
    loader = pipeline(odd_folder, True, on_error="replace").loader(shuffle=False)
    list(loader)
    assert loader.stats.samples == 8
    assert sum(loader.stats.errors.values()) == 3 and len(loader.stats.failed) == 3
    # the PNG, and whatever nvImageCodec hands to turbo, counted once each
    assert loader.stats.fallbacks.get("nvimgcodec: not a JPEG") == 1


# -- boxes and text through the device stage -------------------------------------------------------
def _detection(detection_dataset, device_decode: bool, collate: str, device: str = "cpu") -> mp.Pipeline:
    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, collate=collate)
    return mp.Pipeline(source, {"image": mp.decoders.image("nvimgcodec", device_decode=device_decode)},
                       [A.RandomResizedCrop(48, scale=(0.4, 1.0)), A.HorizontalFlip()], batch_size=4, seed=5,
                       device=device)


@pytest.mark.parametrize("collate", ["list", "pad"])
def test_boxes_a_fused_crop_moves_on_the_device_match_the_worker_path(detection_dataset, collate):
    """The boxes the workers collated are the fused crop's input on the device: each sample's own
    rows (a padded batch cut back to its lengths), moved exactly as the worker path moves them."""
    device = _detection(detection_dataset, True, collate)
    assert "boxes" in device.plan.device_fields
    for a, b in zip(device.loader(num_workers=1), _detection(detection_dataset, False, collate).loader(num_workers=1)):
        assert torch.equal(a["index"], b["index"])
        if collate == "pad":
            assert torch.equal(a["boxes_lengths"], b["boxes_lengths"])
            assert torch.allclose(a["boxes"], b["boxes"], atol=1e-4)
        else:
            assert [len(x) for x in a["boxes"]] == [len(x) for x in b["boxes"]] == [len(x) for x in a["labels"]]
            assert all(torch.allclose(x, y, atol=1e-4) for x, y in zip(a["boxes"], b["boxes"]))


def test_boxes_and_text_stay_on_the_meta_device(detection_dataset, tmp_path):
    """The meta device standing in for a GPU: boxes (a list batch) and the image end there; a text
    field stays a list of strings (None where a sample lacks it)."""
    for batch in _detection(detection_dataset, True, "list", device="meta").loader(num_workers=1):
        assert batch["image"].device.type == "meta" and batch["image"].shape == (4, 3, 48, 48)
        assert all(b.device.type == "meta" and b.shape[-1] == 4 for b in batch["boxes"])
    root = write_image_folder(tmp_path, 6, classes=2)
    manifest = root / "train.jsonl"
    files = sorted(root.rglob("*.jpg"))
    manifest.write_text("".join(json.dumps({"path": str(p), "label": i % 2, "caption": f"photo {i}",
                                            **({"note": "x"} if i % 2 else {})}) + "\n" for i, p in enumerate(files)))
    pipe = mp.Pipeline(mp.loaders.manifest(manifest), {"image": mp.decoders.image("nvimgcodec", device_decode=True)},
                       [A.RandomResizedCrop(SIZE), A.HorizontalFlip()], batch_size=3, seed=5, device="meta")
    for batch in pipe.loader(num_workers=1, shuffle=False):
        assert batch["image"].device.type == batch["label"].device.type == "meta"
        assert len(batch["caption"]) == 3 and all(c.startswith("photo ") for c in batch["caption"])
        assert [n is None for n in batch["note"]] == [c[-1] in "02468" for c in batch["caption"]]


def test_nvimgcodec_is_unavailable_without_the_turbo_backend_it_hands_work_to(monkeypatch):
    """Without simplejpeg, nvImageCodec's PNG, header and cut-short fallbacks cannot run: the
    backend is not offered (before: an AttributeError on None inside the decode)."""
    from mediapipe.decoders import image_turbo
    from mediapipe.decoders.image_nvimgcodec import NvImageCodecImageDecoder

    assert NvImageCodecImageDecoder.available(None)
    monkeypatch.setattr(image_turbo, "simplejpeg", None)
    assert not NvImageCodecImageDecoder.available(None)
