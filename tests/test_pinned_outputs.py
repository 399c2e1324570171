"""The same seed gives the same draws and the same pixels as before typed fields.

``tests/data/pinned_outputs.json`` holds what the code on main gave before the op protocol
changed (every random op's drawn parameters, and fingerprints of op outputs and of whole
pipelines, the image-and-mask ones included, then written with ``mask_keys``); this test
recomputes them through today's API. uint8 outputs are compared by hash, float outputs by a
position-weighted sum (a flipped or shifted image changes it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.rng import SampleRNG, batch_rng
from mediapipe.stages.collate import stack_params
from mediapipe.synthetic import jpeg_bytes, photo_like

PINNED = json.loads((Path(__file__).parent / "data" / "pinned_outputs.json").read_text())


def images(n: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.stack([torch.from_numpy(photo_like(h, w, seed + i)).permute(2, 0, 1) for i in range(n)])


def fingerprint(x: torch.Tensor, places: int = 6):
    if x.dtype in (torch.uint8, torch.int64):
        return hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest()[:16]
    weights = torch.rand(x.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return round(float((x.double() * weights).sum()), places)


def same(ours, pinned) -> bool:
    if isinstance(pinned, float):
        return abs(ours - pinned) <= 1e-4 * max(1.0, abs(pinned))
    if isinstance(pinned, list):
        return len(ours) == len(pinned) and all(same(a, b) for a, b in zip(ours, pinned))
    if isinstance(pinned, dict):
        return ours.keys() == pinned.keys() and all(same(ours[k], pinned[k]) for k in pinned)
    return ours == pinned


def plain(value):
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


SAMPLE_OPS = {
    "rrc": lambda: A.RandomResizedCrop((24, 32), scale=(0.1, 1.0)),
    "resize": lambda: A.Resize(30),
    "center": lambda: A.CenterCrop((40, 70)),
    "crop": lambda: A.RandomCrop(40, padding=(3, 5), pad_if_needed=True, fill=7),
    "pad": lambda: A.Pad((1, 2, 3, 4), fill=9),
    "rot_expand": lambda: A.RandomRotation(35, expand=True, interpolation="bilinear"),
}
BATCH_OPS = {
    "hflip": lambda: A.HorizontalFlip(),
    "vflip": lambda: A.VerticalFlip(),
    "rot": lambda: A.RandomRotation(30, interpolation="bilinear", fill=(10, 20, 30)),
    "affine": lambda: A.RandomAffine(20, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=(-5, 5, -3, 3)),
    "jitter": lambda: A.ColorJitter(0.4, 0.4, 0.4, 0.1),
    "gray": lambda: A.RandomGrayscale(0.5),
    "blur": lambda: A.GaussianBlur(5, (0.5, 2.0)),
    "erase": lambda: A.RandomErasing(p=0.7, value=(1, 2, 3)),
    "normalize": lambda: A.Normalize(),
    "todtype": lambda: A.ToDtype("float32"),
}


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_image_ops_draw_and_give_what_they_gave():
    pinned = PINNED["ops"]
    x = images(4, 60, 80, seed=3)
    meta = {"size": (60, 80), "shape": (3, 60, 80)}
    for name, make in {**SAMPLE_OPS, **BATCH_OPS}.items():
        op = make()
        drawn = [op.sample_params(SampleRNG(7, 1, i, 3), meta) for i in range(4)]
        assert [{k: plain(v) for k, v in d.items()} for d in drawn] == pinned["params"][name], name
        if name in SAMPLE_OPS:
            assert same([fingerprint(op.apply(x[i], d)) for i, d in enumerate(drawn)], pinned["sample"][name]), name
        else:
            assert same(fingerprint(op.apply(x, stack_params(drawn))), pinned["batch"][name]), name
            clip = torch.stack([x, x.flip(-1)], 1)
            assert same(fingerprint(op.apply(clip, stack_params(drawn), "video")), pinned["clip"][name]), name
    flip, norm = A.HorizontalFlip(), A.Normalize()
    drawn = stack_params([flip.sample_params(SampleRNG(7, 1, i, 3), meta) for i in range(4)])
    assert same(fingerprint(norm.apply_absorbing(x, {}, flip, drawn)), pinned["batch"]["normalize_absorbing_flip"])
    for name, op in {"mixup": A.MixUp(num_classes=5, alpha=0.4), "cutmix": A.CutMix(num_classes=5)}.items():
        p = op.batch_params(batch_rng(7, 1, 2, 4), 4)
        assert {k: plain(v) for k, v in p.items()} == pinned["params"][name]
        data = {"image": x.clone(), "label": torch.tensor([0, 1, 2, 4])}
        op.apply_fields(data, p)
        assert same([fingerprint(data["image"]), fingerprint(data["label"])], pinned["batch"][name]), name


def test_clip_and_audio_ops_draw_what_they_drew():
    pinned = PINNED["ops"]
    clip = torch.stack([images(10, 8, 8, seed=20 + b) for b in range(2)])
    meta = {"size": (8, 8), "shape": (10, 3, 8, 8)}
    for name, op in {"tjitter": A.TemporalJitter(4, strides=(1, 2, 3)), "fdrop": A.FrameDrop(0.3),
                     "trev": A.TemporalReverse(), "usub": A.UniformTemporalSubsample(6)}.items():
        drawn = [op.sample_params(SampleRNG(7, 1, i, 3), meta) for i in range(2)]
        assert [{k: plain(v) for k, v in d.items()} for d in drawn] == pinned["params"][name], name
        if name in ("tjitter", "usub"):
            ours = [fingerprint(op.apply(clip[i], d)) for i, d in enumerate(drawn)]
        else:
            ours = fingerprint(op.apply(clip, stack_params(drawn)))
        assert same(ours, pinned["clip"][name]), name
    for name, op in {"gain": A.Gain(), "noise": A.AddNoise(p=0.5), "tcrop": A.RandomTimeCrop(800),
                     "speed": A.SpeedPerturb(), "specaug": A.SpecAugment()}.items():
        drawn = [op.sample_params(SampleRNG(7, 1, i, 3), {"shape": (1, 4000), "size": (1, 4000)}) for i in range(3)]
        assert [{k: plain(v) for k, v in d.items()} for d in drawn] == pinned["params"][name], name


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> Path:
    """Six photos of several sizes, each with a mask of class id 1 + i over a disc."""
    root = tmp_path_factory.mktemp("pinned")
    rows = []
    for i in range(6):
        h, w = 70 + 6 * i, 96 - 4 * i
        (root / f"{i}.jpg").write_bytes(jpeg_bytes(photo_like(h, w, 40 + i), quality=92))
        yy, xx = np.mgrid[0:h, 0:w]
        disc = (((yy - h / 2) ** 2 + (xx - w / 3) ** 2) < (h / 4) ** 2).astype(np.uint8) * (1 + i)
        Image.fromarray(disc).save(root / f"{i}_mask.png")
        rows.append({"path": f"{i}.jpg", "mask": f"{i}_mask.png", "label": i % 3})
    (root / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return root / "rows.jsonl"


def run(rows: Path, decode: dict, ops: list) -> list:
    pipe = mp.Pipeline(mp.loaders.manifest(rows), decode, ops, batch_size=3, seed=11, device="cpu")
    out = []
    for epoch in range(2):
        loader = pipe.loader(num_workers=0, shuffle=True)
        loader.set_epoch(epoch)
        for batch in loader:
            out.append({k: fingerprint(v, 5) for k, v in sorted(batch.items()) if isinstance(v, torch.Tensor)})
    return out


PIPELINES = {
    "classify": lambda: [A.RandomResizedCrop(32), A.HorizontalFlip(), A.ColorJitter(0.4, 0.4, 0.4, 0.1),
                         A.RandomGrayscale(0.3), A.GaussianBlur(3), A.RandomErasing(), A.Normalize()],
    "absorb": lambda: [A.RandomResizedCrop(32), A.HorizontalFlip(), A.Normalize()],
    "geometry": lambda: [A.Resize(40), A.RandomCrop(36, padding=2, fill=5),
                         A.RandomRotation(25, interpolation="bilinear"),
                         A.RandomAffine(10, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=4), A.VerticalFlip(),
                         A.Pad(2), A.CenterCrop(30)],
    "mix": lambda: [A.CenterCrop(32), A.MixUp(num_classes=3), A.CutMix(num_classes=3)],
    # written on main as keys=("image", "mask") with mask_keys=("mask",) and the mask decoded as image(mode="L")
    "mask": lambda: [A.RandomResizedCrop(40, scale=(0.3, 1.0)), A.HorizontalFlip(),
                     A.RandomRotation(20, interpolation="bilinear"), A.RandomAffine(15, scale=(0.8, 1.2))],
    "mask_resize": lambda: [A.Resize((36, 44)), A.VerticalFlip()],
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pipelines_give_the_batches_they_gave(rows, name):
    decode = {"image": mp.decoders.image()}
    if name.startswith("mask"):
        decode["mask"] = mp.decoders.mask()
    assert same(run(rows, decode, PIPELINES[name]()), PINNED["pipelines"][name])
