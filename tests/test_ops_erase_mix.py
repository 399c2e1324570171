"""RandomErasing against torchvision's ``erase`` per sample; MixUp and CutMix against their
formulas (torchvision v2's: partner = the batch rolled by one) and label invariants."""

from __future__ import annotations

import math

import pytest
import torch
import torchvision.transforms.v2.functional as TF

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.base import op_from_config
from mediapipe.augment.functional import mix as FM
from mediapipe.errors import PipelineError
from mediapipe.rng import SampleRNG, batch_rng
from mediapipe.stages.collate import stack_params
from mediapipe.synthetic import photo_like


def images(n: int = 6, height: int = 40, width: int = 56, seed: int = 0) -> torch.Tensor:
    return torch.stack([torch.from_numpy(photo_like(height, width, seed + i)).permute(2, 0, 1) for i in range(n)])


def draw(op: A.Op, x: torch.Tensor, op_index: int = 3) -> tuple[list[dict], dict]:
    meta = {"size": tuple(x.shape[-2:]), "shape": tuple(x.shape[1:])}
    drawn = [op.sample_params(SampleRNG(0, 0, i, op_index), meta) for i in range(x.shape[0])]
    return drawn, stack_params(drawn)


# -- RandomErasing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "value"), [(torch.uint8, 0), (torch.uint8, (255, 128, 7)), (torch.float32, 0.5)])
def test_random_erasing_matches_torchvision(dtype, value) -> None:
    x = images(8)
    x = x if dtype == torch.uint8 else x.float() / 255
    before = x.clone()
    op = A.RandomErasing(p=0.7, value=value)
    drawn, params = draw(op, x)
    assert any(d["height"] for d in drawn) and not all(d["height"] for d in drawn)
    out = op.apply(x, params)
    fill = torch.tensor(value if isinstance(value, tuple) else (value,), dtype=torch.float32)[:, None, None]
    for i, d in enumerate(drawn):
        if d["height"] == 0:
            assert torch.equal(out[i], x[i])
        else:
            ref = TF.erase(x[i], d["top"], d["left"], d["height"], d["width"], fill.to(dtype))
            assert torch.equal(out[i], ref)
    assert torch.equal(x, before)


def test_random_erasing_box_distribution() -> None:
    op = A.RandomErasing(p=1.0, scale=(0.1, 0.2), ratio=(0.5, 2.0))
    boxes = [op.sample_params(SampleRNG(0, 0, i, 0), {"size": (100, 120)}) for i in range(300)]
    for b in boxes:
        area = b["height"] * b["width"] / (100 * 120)
        assert 0.08 < area < 0.23 and 0.4 < b["height"] / b["width"] < 2.5
        assert b["top"] + b["height"] <= 100 and b["left"] + b["width"] <= 120
    never = A.RandomErasing(p=0.0)
    assert all(never.sample_params(SampleRNG(0, 0, i, 0), {"size": (50, 50)})["height"] == 0 for i in range(100))


def test_random_erasing_gives_up_like_torchvision() -> None:
    # a box covering the whole image never fits (torchvision needs h < H and w < W): nothing is erased
    op = A.RandomErasing(p=1.0, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    assert op.sample_params(SampleRNG(0, 0, 0, 0), {"size": (20, 20)})["height"] == 0


def test_random_erasing_clip_one_box_per_clip() -> None:
    clips = torch.stack([images(3, 24, 32, seed=10 * b) for b in range(4)])
    op = A.RandomErasing(p=1.0, value=255)
    drawn, params = draw(op, clips)
    out = op.apply(clips, params)
    for b, d in enumerate(drawn):
        box = out[b, :, :, d["top"] : d["top"] + d["height"], d["left"] : d["left"] + d["width"]]
        assert (box == 255).all() and d["height"] > 0
        assert torch.equal(op.apply(clips[b], d), out[b])  # one sample with plain params: same result


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: A.RandomErasing(p=2.0), "p=2.0"),
        (lambda: A.RandomErasing(scale=(0.5, 0.1)), "scale"),
        (lambda: A.RandomErasing(ratio=(0.0, 1.0)), "ratio"),
        (lambda: A.RandomErasing(value="random"), "random"),
        (lambda: A.MixUp(num_classes=0), "num_classes"),
        (lambda: A.MixUp(num_classes=10, alpha=0.0), "alpha"),
        (lambda: A.CutMix(num_classes=-3), "num_classes"),
    ],
)
def test_argument_validation(make, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_random_erasing_value_per_channel_must_match() -> None:
    op = A.RandomErasing(p=1.0, value=(1, 2))
    x = images(2)
    with pytest.raises(ValueError, match="2 values for 3 channels"):
        op.apply(x, draw(op, x)[1])


# -- MixUp, CutMix ----------------------------------------------------------------------------------------------
def batch_params(op: A.Op, number: int = 0) -> dict:
    return op.batch_params(batch_rng(0, 0, number, 5), 8)


def test_mixup_matches_formula() -> None:
    x = images(8).float() / 255
    labels = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])
    op = A.MixUp(num_classes=5, alpha=0.4)
    params = batch_params(op)
    lam = params["lam"]
    assert 0.0 < lam < 1.0
    data = {"image": x, "label": labels}
    op.apply_fields(data, params)
    onehot = torch.nn.functional.one_hot(labels, 5).float()
    torch.testing.assert_close(data["image"], lam * x + (1 - lam) * x.roll(1, 0))
    torch.testing.assert_close(data["label"], lam * onehot + (1 - lam) * onehot.roll(1, 0))
    assert data["label"].dtype == torch.float32 and data["label"].shape == (8, 5)
    torch.testing.assert_close(data["label"].sum(1), torch.ones(8))


def test_mixup_uint8_rounds() -> None:
    x = images(4)
    data = {"image": x, "label": torch.tensor([0, 1, 0, 1])}
    op = A.MixUp(num_classes=2)
    lam = batch_params(op)["lam"]
    op.apply_fields(data, {"lam": lam})
    ref = (lam * x.float() + (1 - lam) * x.roll(1, 0).float()).round().to(torch.uint8)
    assert data["image"].dtype == torch.uint8
    assert (data["image"].int() - ref.int()).abs().max() <= 1


def test_lambda_is_drawn_per_batch_from_beta() -> None:
    op = A.MixUp(num_classes=3, alpha=0.2)
    lams = torch.tensor([batch_params(op, n)["lam"] for n in range(400)])
    assert batch_params(op, 7) == batch_params(op, 7)  # keyed: the same batch gets the same lambda
    # Beta(0.2, 0.2) is U-shaped: most draws near 0 or 1, mean 1/2
    assert ((lams < 0.1) | (lams > 0.9)).float().mean() > 0.5
    assert abs(lams.mean().item() - 0.5) < 0.07


def test_cutmix_matches_torchvision_formula() -> None:
    x = images(8, 40, 56)
    labels = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    op = A.CutMix(num_classes=4)
    for number in range(20):
        params = batch_params(op, number)
        data = {"image": x, "label": labels}
        op.apply_fields(data, params)
        # torchvision v2 CutMix._get_params, with randint(W) = int(center_x * W)
        lam, h, w = params["lam"], 40, 56
        r_x, r_y = int(params["center_x"] * w), int(params["center_y"] * h)
        r = 0.5 * math.sqrt(1.0 - lam)
        rw, rh = int(r * w), int(r * h)
        x1, y1, x2, y2 = max(r_x - rw, 0), max(r_y - rh, 0), min(r_x + rw, w), min(r_y + rh, h)
        ref = x.clone()
        ref[..., y1:y2, x1:x2] = x.roll(1, 0)[..., y1:y2, x1:x2]
        assert torch.equal(data["image"], ref)
        lam_adjusted = 1.0 - (x2 - x1) * (y2 - y1) / (w * h)
        onehot = torch.nn.functional.one_hot(labels, 4).float()
        torch.testing.assert_close(data["label"], lam_adjusted * onehot + (1 - lam_adjusted) * onehot.roll(1, 0))
        torch.testing.assert_close(data["label"].sum(1), torch.ones(8))


def test_cutmix_then_mixup_accepts_soft_labels_and_shares_box_across_keys() -> None:
    x = images(6)
    data = {"image": x, "mask": x.clone(), "label": torch.tensor([0, 1, 2, 0, 1, 2])}
    cut = A.CutMix(num_classes=3, keys=("image", "mask"))
    cut.apply_fields(data, {"lam": 0.5, "center_x": 0.5, "center_y": 0.5})
    assert torch.equal(data["image"], data["mask"]) and not torch.equal(data["image"], x)
    A.MixUp(num_classes=3).apply_fields(data, {"lam": 0.3})
    assert data["label"].shape == (6, 3)
    torch.testing.assert_close(data["label"].sum(1), torch.ones(6))


def test_mix_reads_and_writes_label() -> None:
    op = A.CutMix(num_classes=10, out="mixed")
    assert op.reads() == ("image", "label") and op.writes() == ("mixed", "label")
    assert op.per_batch and op.batch_only
    assert op_from_config(op.to_config()) == op


def test_mix_rejects_labels_out_of_range() -> None:
    with pytest.raises(ValueError, match="num_classes=3"):
        FM.soft_labels(torch.tensor([0, 3]), 3)
    with pytest.raises(ValueError, match="-2"):
        FM.soft_labels(torch.tensor([0, -2]), 3)


def test_replaced_sample_label_gives_zero_row() -> None:
    soft = FM.soft_labels(torch.tensor([2, -1, 0]), 3)
    assert torch.equal(soft, torch.tensor([[0.0, 0, 1], [0, 0, 0], [1, 0, 0]]))


# -- end to end through a Pipeline --------------------------------------------------------------------------
def test_pipeline_runs_image_ops_end_to_end(image_folder) -> None:
    pipe = mp.Pipeline(
        source=mp.loaders.folder(image_folder),
        decode={"image": mp.decoders.image()},
        augment=[
            A.RandomResizedCrop(64),
            A.RandomCrop(56, padding=4, padding_mode="reflect"),
            A.HorizontalFlip(),
            A.RandomRotation(15, interpolation="bilinear"),
            A.ColorJitter(0.4, 0.4, 0.4, 0.1),
            A.RandomGrayscale(0.2),
            A.GaussianBlur(5),
            A.RandomErasing(p=0.5, value=(124, 116, 104)),
            A.MixUp(num_classes=3),
            A.Normalize(),
        ],
        batch_size=8, seed=0, device="cpu",
    )
    placed = {type(p.op).__name__: p.stage.value for p in pipe.plan.placed}
    assert placed["RandomCrop"] == "sample" and placed["RandomRotation"] == "batch"
    assert placed["MixUp"] == "batch" and placed["ColorJitter"] == "batch"
    first = next(iter(pipe.loader(num_workers=0, shuffle=False)))
    again = next(iter(pipe.loader(num_workers=0, shuffle=False)))
    assert first["image"].shape == (8, 3, 56, 56) and first["image"].dtype == torch.float32
    assert first["label"].shape == (8, 3)
    torch.testing.assert_close(first["label"].sum(1), torch.ones(8))
    assert torch.equal(first["image"], again["image"])  # keyed randomness: the same batch twice


def test_pipeline_rejects_mix_before_a_sample_stage_op(image_folder) -> None:
    with pytest.raises(PipelineError, match="MixUp"):
        mp.Pipeline(source=mp.loaders.folder(image_folder), decode={"image": mp.decoders.image()},
                    augment=[A.MixUp(num_classes=3), A.RandomCrop(32)], device="cpu")


@pytest.mark.parametrize("op", [A.MixUp(num_classes=3, alpha=1.0), A.CutMix(num_classes=3, alpha=1.0)])
def test_a_valid_sample_is_never_mixed_with_an_empty_slot(op) -> None:
    """Under on_error="replace" a batch may hold empty slots (zeros, label -1, valid False): each
    valid sample takes the previous *valid* sample as its partner, so its soft label still sums
    to 1 and its pixels hold no zeros from the empty slot."""
    x = torch.stack([torch.full((3, 8, 8), 10.0 * (i + 1)) for i in range(4)])
    valid = torch.tensor([True, False, True, True])
    x[1] = 0
    data = {"image": x.clone(), "label": torch.tensor([0, -1, 1, 2]), "valid": valid}
    params = {"lam": torch.tensor(0.5), "center_x": torch.tensor(0.5), "center_y": torch.tensor(0.5)}
    op.apply_fields(data, params)
    labels = data["label"]
    assert torch.allclose(labels[valid].sum(1), torch.ones(3))
    out = data["image"]
    for i, partner in ((0, 3), (2, 0), (3, 2)):  # sample 2's partner skips the empty slot 1
        values = set(out[i].unique().tolist())
        own, other = x[i, 0, 0, 0].item(), x[partner, 0, 0, 0].item()
        assert values <= {own, other, (own + other) / 2}, (i, values)
        assert 0.0 not in values


@pytest.mark.parametrize("op", [A.MixUp(num_classes=3), A.CutMix(num_classes=3)])
def test_an_all_valid_batch_is_mixed_as_the_roll(op) -> None:
    x = torch.rand(4, 3, 8, 8)
    params = {"lam": torch.tensor(0.3), "center_x": torch.tensor(0.4), "center_y": torch.tensor(0.6)}
    bound = op
    with_valid = {"image": x.clone(), "label": torch.tensor([0, 1, 2, 0]), "valid": torch.ones(4, dtype=torch.bool)}
    without = {"image": x.clone(), "label": torch.tensor([0, 1, 2, 0])}
    bound.apply_fields(with_valid, params)
    bound.apply_fields(without, params)
    assert torch.equal(with_valid["image"], without["image"]) and torch.equal(with_valid["label"], without["label"])
