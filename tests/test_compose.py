"""RandomChoice, RandomApply and RandomOrder against torchvision v2's classes of the same names.

The oracle: for each sample, torchvision's composite over torchvision functionals that apply the
inner ops' drawn parameters, with torchvision's own random call (``torch.multinomial``,
``torch.rand``, ``torch.randperm``) answering what our sample drew. The inner ops are exact
against torchvision on uint8 (tests/test_ops_color.py, tests/test_ops_targets.py), so every
sample must be equal. Frequencies: counts within 4.5 standard deviations of torchvision's odds.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.compose import inner_rng, params_of
from mediapipe.errors import PipelineError
from mediapipe.rng import SampleRNG, batch_rng
from mediapipe.stages.collate import stack_params
from tests.helpers import BoxManifest, assert_same, collect, sample, sample_types, tv, write_objects
from tests.helpers import check as check_targets
from tests.helpers import image as photo

T = pytest.importorskip("torchvision.transforms.v2")
TF = pytest.importorskip("torchvision.transforms.v2.functional")

H, W = 40, 56


def images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.stack([photo(seed + i, H, W) for i in range(n)])


def draws(op: A.Op, n: int, size=(H, W), op_index: int = 3) -> tuple[list[dict], dict]:
    meta = {"size": size, "shape": (3, *size)}
    drawn = [op.sample_params(SampleRNG(7, 0, i, op_index), meta) for i in range(n)]
    return drawn, stack_params(drawn)


def tv_inner(op: A.Op, p: dict):
    """torchvision's functional for one of the inner ops used here, with our drawn parameters."""
    if isinstance(op, A.HorizontalFlip):
        return T.Lambda(TF.horizontal_flip if p["flip"] else (lambda x: x))
    if isinstance(op, A.VerticalFlip):
        return T.Lambda(TF.vertical_flip if p["flip"] else (lambda x: x))
    if isinstance(op, A.RandomGrayscale):
        return T.Lambda((lambda x: TF.rgb_to_grayscale(x, num_output_channels=3)) if p["gray"] else (lambda x: x))
    if isinstance(op, A.ColorJitter):  # one adjustment: its order does not matter
        (name,) = op.ranges()
        return T.Lambda(lambda x: getattr(TF, f"adjust_{name}")(x, p[name]))
    raise AssertionError(op)


INNER = [A.HorizontalFlip(p=1.0), A.RandomGrayscale(p=1.0), A.ColorJitter(brightness=(0.4, 1.6)),
         A.ColorJitter(contrast=(0.3, 1.7))]


# -- each sample is torchvision's composite of its drawn ops --------------------------------------
def test_random_choice_each_sample_runs_the_op_it_drew_as_torchvision_does(monkeypatch):
    op = A.RandomChoice(INNER, p=[1, 2, 1, 1])
    x = images(24)
    drawn, params = draws(op, len(x))
    data = {"image": x.clone()}
    op.apply_fields(data, params)
    ref = T.RandomChoice([T.Identity()] * len(INNER), p=[1, 2, 1, 1])
    assert ref.p == pytest.approx(list(op.probabilities()))  # torchvision's normalised odds
    for i, d in enumerate(drawn):
        composite = T.RandomChoice([tv_inner(inner, params_of(d, j)) for j, inner in enumerate(INNER)], p=[1, 2, 1, 1])
        monkeypatch.setattr(torch, "multinomial", lambda probs, n, c=d["choice"]: torch.tensor([c]))
        assert torch.equal(data["image"][i], composite(x[i])), i
        monkeypatch.undo()
    assert len({d["choice"] for d in drawn}) == len(INNER)  # every op ran on some sample


def test_random_apply_runs_all_its_ops_in_order_or_none_as_torchvision_does(monkeypatch):
    inner = [A.ColorJitter(brightness=(0.4, 1.6)), A.RandomGrayscale(p=1.0), A.HorizontalFlip(p=1.0)]
    op = A.RandomApply(inner, p=0.6)
    x = images(16)
    drawn, params = draws(op, len(x))
    data = {"image": x.clone()}
    op.apply_fields(data, params)
    for i, d in enumerate(drawn):
        composite = T.RandomApply([tv_inner(o, params_of(d, j)) for j, o in enumerate(inner)], p=0.6)
        monkeypatch.setattr(torch, "rand", lambda *size, a=d["apply"]: torch.tensor([0.0 if a else 0.99]))
        assert torch.equal(data["image"][i], composite(x[i])), i
        monkeypatch.undo()
        assert torch.equal(data["image"][i], x[i]) != d["apply"]
    assert {d["apply"] for d in drawn} == {True, False}


def test_random_order_runs_each_op_once_in_its_drawn_order_as_torchvision_does(monkeypatch):
    inner = [A.ColorJitter(brightness=(0.3, 0.6)), A.RandomGrayscale(p=1.0), A.ColorJitter(contrast=(1.6, 2.0))]
    op = A.RandomOrder(inner)
    x = images(24)
    drawn, params = draws(op, len(x))
    data = {"image": x.clone()}
    op.apply_fields(data, params)
    for i, d in enumerate(drawn):
        composite = T.RandomOrder([tv_inner(o, params_of(d, j)) for j, o in enumerate(inner)])
        monkeypatch.setattr(torch, "randperm", lambda n, o=d["order"]: torch.tensor(o))
        assert torch.equal(data["image"][i], composite(x[i])), i
        monkeypatch.undo()
    assert len({d["order"] for d in drawn}) == 6
    # the order matters here (uint8 rounding between the steps): another order gives other pixels
    first = drawn[0]
    other = next(o for o in [(0, 1, 2), (2, 1, 0)] if o != first["order"])
    swapped = {**first, "order": other}
    assert not torch.equal(op.apply(x[0], swapped), op.apply(x[0], first))


def test_a_samples_result_does_not_depend_on_the_samples_that_drew_the_same_op():
    op = A.RandomChoice([A.ColorJitter(brightness=0.5, saturation=0.5), A.GaussianBlur(5), A.RandomErasing(p=1.0)])
    x = images(12)
    drawn, params = draws(op, len(x))
    data = {"image": x.clone()}
    op.apply_fields(data, params)
    for i, d in enumerate(drawn):
        assert torch.equal(op.apply(x[i], d), data["image"][i])  # alone, with plain parameters
        inner = op.ops[d["choice"]]  # and the inner op alone with its own key
        alone = inner.sample_params(inner_rng(SampleRNG(7, 0, i, 3).key, d["choice"]), {"size": (H, W)})
        assert alone == params_of(d, d["choice"])
        assert torch.equal(inner.apply(x[i], alone), data["image"][i])


# -- the draws' frequencies -----------------------------------------------------------------------
def within(count: int, n: int, chance: float) -> bool:
    return abs(count - n * chance) <= 4.5 * math.sqrt(n * chance * (1 - chance)) + 1


def test_choice_apply_and_order_frequencies_match_their_odds():
    n = 6000
    choice = A.RandomChoice([A.HorizontalFlip(), A.VerticalFlip(), A.RandomGrayscale()], p=[1, 3, 0.5])
    counts = Counter(choice.decide(SampleRNG(1, 0, i, 2))["choice"] for i in range(n))
    assert all(within(counts[j], n, chance) for j, chance in enumerate(choice.probabilities())), counts
    never = A.RandomChoice([A.HorizontalFlip(), A.VerticalFlip()], p=[0, 1])
    assert {never.decide(SampleRNG(1, 0, i, 2))["choice"] for i in range(500)} == {1}
    apply = A.RandomApply([A.HorizontalFlip()], p=0.3)
    applied = sum(apply.decide(SampleRNG(1, 0, i, 2))["apply"] for i in range(n))
    assert within(applied, n, 0.3), applied
    order = A.RandomOrder([A.HorizontalFlip(), A.VerticalFlip(), A.RandomGrayscale()])
    orders = Counter(order.decide(SampleRNG(1, 0, i, 2))["order"] for i in range(n))
    assert len(orders) == 6 and all(within(c, n, 1 / 6) for c in orders.values()), orders


# -- fields: boxes, masks and keypoints move with a geometric inner op ---------------------------
def test_boxes_masks_and_keypoints_move_with_the_geometric_op_each_sample_drew():
    types = sample_types("xyxy")
    op = A.RandomChoice([A.HorizontalFlip(p=1.0), A.VerticalFlip(p=1.0), A.ColorJitter(brightness=0.6)]).bind(types)
    assert set(op.inputs) == {"image", "mask", "boxes", "points"}
    assert set(op.ops[2].inputs) == {"image"}  # the colour op leaves the targets alone
    samples = [sample(s, "xyxy") for s in range(8)]
    batch = {k: torch.stack([s[k] for s in samples]) for k in samples[0]}
    drawn, params = draws(op, len(samples))
    op.apply_fields(batch, params)
    for i, (s, d) in enumerate(zip(samples, drawn)):
        ref = tv(s, "xyxy")
        if d["choice"] == 0:
            ref = {k: TF.horizontal_flip(v) for k, v in ref.items()}
        elif d["choice"] == 1:
            ref = {k: TF.vertical_flip(v) for k, v in ref.items()}
        else:
            ref["image"] = TF.adjust_brightness(ref["image"], params_of(d, 2)["brightness"])
        check_targets({k: batch[k][i] for k in batch}, ref)
    assert {d["choice"] for d in drawn} == {0, 1, 2}


@pytest.mark.parametrize("collate", ["pad", "list"])
def test_a_detection_pipeline_moves_boxes_and_masks_with_the_drawn_flip(tmp_path, collate):
    """Boxes (padded, or a list per sample), their masks and the image through a composite of flips in
    the batch stage: each box stays on its object's class id in the mask; a flip that would leave
    them behind is refused."""
    rows = write_objects(tmp_path, count=8)
    ops = [A.Resize((64, 80)), A.RandomChoice([A.HorizontalFlip(p=1.0), A.VerticalFlip(p=1.0), A.ColorJitter(0.3)])]
    pipe = mp.Pipeline(BoxManifest(rows), {"image": mp.decoders.image(), "mask": mp.decoders.mask()}, ops,
                       batch_size=4, seed=1, device="cpu", collate={"boxes": collate, "points": collate})
    assert "[1] RandomChoice: batch on image, mask, boxes, points" in repr(pipe)
    checked = 0
    for batch in pipe.loader(num_workers=0):
        for i in range(batch["image"].shape[0]):
            boxes = batch["boxes"][i] if collate == "list" else batch["boxes"][i, : int(batch["boxes_lengths"][i])]
            for k, box in enumerate(boxes):
                ys, xs = torch.nonzero(batch["mask"][i, 0] == k + 1, as_tuple=True)
                seen = torch.stack((xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)).float()
                assert (box - seen).abs().max() <= 1.5, (i, k, box, seen)
                checked += 1
    assert checked >= 8
    behind = [A.Resize((64, 80)), A.RandomChoice([A.HorizontalFlip(keys=("image", "mask")), A.VerticalFlip()])]
    with pytest.raises(PipelineError, match="but not"):
        mp.Pipeline(BoxManifest(rows), {"image": mp.decoders.image(), "mask": mp.decoders.mask()}, behind,
                    batch_size=4, seed=1, device="cpu")


# -- placement, stages and determinism ------------------------------------------------------------
def test_placement_follows_the_inner_ops():
    assert A.RandomChoice([A.HorizontalFlip(), A.ColorJitter(0.2)]).placement() is A.Stage.BATCH
    assert A.RandomApply([A.RandomResizedCrop(32), A.HorizontalFlip()]).placement() is A.Stage.SAMPLE
    mixes = A.RandomChoice([A.MixUp(num_classes=3), A.CutMix(num_classes=3)])
    assert mixes.per_batch and mixes.batch_only and mixes.placement() is A.Stage.BATCH
    assert {"boxes", "image", "mask"} <= A.RandomOrder([A.HorizontalFlip(), A.ColorJitter(0.2)]).kinds()


def test_in_the_sample_stage_each_inner_op_draws_on_the_canvas_the_op_before_it_left():
    op = A.RandomApply([A.Resize(44), A.RandomCrop(32), A.HorizontalFlip()], p=1.0)
    assert op.placement() is A.Stage.SAMPLE
    x = photo(3, 120, 90)
    rng = SampleRNG(5, 1, 9, 0)
    params = op.sample_params(rng, {"size": (120, 90), "shape": (3, 120, 90)})
    out = op.apply(x, params)
    key = SampleRNG(5, 1, 9, 0).key
    expected = x
    for j, inner in enumerate(op.ops):
        drawn = inner.sample_params(inner_rng(key, j), {"size": tuple(expected.shape[-2:])})
        expected = inner.apply(expected, drawn)
    assert out.shape == (3, 32, 32) and torch.equal(out, expected)


def pipeline(root, augment, **kwargs) -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image()}, augment, batch_size=5, seed=3,
                       device="cpu", **kwargs)


TRAIN = [A.RandomChoice([A.RandomResizedCrop(32, scale=(0.3, 1.0)), A.Resize((32, 32))], p=[3, 1]),
         A.RandomApply([A.ColorJitter(brightness=0.4, contrast=0.4), A.GaussianBlur(3)], p=0.5),
         A.RandomOrder([A.HorizontalFlip(), A.RandomGrayscale(p=0.5), A.RandomErasing(p=0.5)]),
         A.RandomChoice([A.MixUp(num_classes=3), A.CutMix(num_classes=3)])]


def test_the_same_batches_with_0_and_2_workers_and_batch_ops_in_the_workers_or_not(image_folder):
    pipe = pipeline(image_folder, TRAIN)
    stages = [(type(p.op).__name__, p.stage.value) for p in pipe.plan.placed]
    assert stages == [("RandomChoice", "sample"), ("RandomApply", "batch"), ("RandomOrder", "batch"),
                      ("RandomChoice", "batch")]
    inline = collect(pipe.loader(num_workers=0))
    assert len(inline) == 5 and inline[0]["image"].shape == (5, 3, 32, 32)
    assert inline[0]["label"].shape == (5, 3)  # mixed soft labels
    for in_workers in (True, False):
        assert_same(inline, collect(pipe.loader(num_workers=2, batch_ops_in_workers=in_workers)))


def test_mixup_or_cutmix_is_chosen_once_per_batch_from_the_batch_key():
    op = A.RandomChoice([A.MixUp(num_classes=4, alpha=1.0), A.CutMix(num_classes=4, alpha=1.0)])
    x, labels = images(6), torch.tensor([0, 1, 2, 3, 0, 1])
    chosen = Counter()
    for batch in range(40):
        params = op.batch_params(batch_rng(3, 0, batch, 5), len(x))
        data = {"image": x.clone(), "label": labels.clone()}
        op.apply_fields(data, params)
        j = params["choice"]
        alone = {"image": x.clone(), "label": labels.clone()}
        op.ops[j].apply_fields(alone, op.ops[j].batch_params(inner_rng(batch_rng(3, 0, batch, 5).key, j), len(x)))
        assert torch.equal(data["image"], alone["image"]) and torch.equal(data["label"], alone["label"])
        own = data["label"][torch.arange(len(x)), labels]  # each sample's weight on its own class
        assert torch.allclose(own, own[0].expand(len(x)))  # one draw for the whole batch
        if j == 0:  # MixUp's lambda
            assert own[0].item() == pytest.approx(params["0.lam"], abs=1e-6)
        chosen[j] += 1
    assert within(chosen[0], 40, 0.5) and set(chosen) == {0, 1}


# -- config, refusals, DALI --------------------------------------------------------------------------
def test_nested_composites_round_trip_through_the_config(image_folder, tmp_path):
    nested = A.RandomChoice([A.RandomApply([A.ColorJitter(0.3), A.HorizontalFlip()], p=0.7), A.VerticalFlip()],
                            p=[2.0, 1.0])
    pipe = pipeline(image_folder, [A.RandomResizedCrop(32), nested])
    config = pipe.to_config()
    assert config["augment"][1] == {"op": "RandomChoice", "p": [2.0, 1.0], "ops": [
        {"op": "RandomApply", "p": 0.7, "ops": [{"op": "ColorJitter", "brightness": 0.3}, {"op": "HorizontalFlip"}]},
        {"op": "VerticalFlip"}]}
    again = mp.Pipeline.from_config(json.loads(json.dumps(config)))
    assert again.augment[1] == nested and again.to_config() == config
    path = tmp_path / "pipe.yaml"
    pipe.save_config(path)
    assert_same(collect(pipe.loader(num_workers=0)), collect(mp.Pipeline.from_config(path).loader(num_workers=0)))


@pytest.mark.parametrize(("make", "match"), [
    (lambda: A.RandomChoice([]), "at least one op"),
    (lambda: A.RandomChoice([A.HorizontalFlip()], p=[1.0, 2.0]), "one weight"),
    (lambda: A.RandomChoice([A.HorizontalFlip(), A.VerticalFlip()], p=[0.0, 0.0]), "not all 0"),
    (lambda: A.RandomChoice([A.HorizontalFlip(), A.VerticalFlip()], p=[-1.0, 2.0]), "weight >= 0"),
    (lambda: A.RandomApply([A.HorizontalFlip()], p=1.5), "p=1.5"),
    (lambda: A.RandomOrder([A.HorizontalFlip(), "flip"]), "expected mediapipe.augment ops"),
    (lambda: A.RandomApply([A.Normalize(out="norm")]), "out='norm'"),
    (lambda: A.RandomApply([A.HorizontalFlip()], keys=("image",)), "inner ops"),
    (lambda: A.RandomChoice([A.MixUp(num_classes=3), A.ColorJitter(0.2)]), "once per batch"),
])
def test_bad_compositions_are_refused_naming_the_composite(make, match):
    with pytest.raises((TypeError, ValueError)) as info:
        make()
    assert match in str(info.value) and "Random" in str(info.value)


def test_an_inner_op_that_changes_a_fields_type_or_dtype_is_refused(image_folder):
    with pytest.raises(PipelineError, match=r"augment\[1\] RandomApply.ops\[0\] ToDtype made 'image'"):
        collect(pipeline(image_folder, [A.RandomResizedCrop(32), A.RandomApply([A.ToDtype("float32")])])
                .loader(num_workers=0))
    with pytest.raises(PipelineError, match=r"augment\[0\] RandomChoice.ops\[1\] HorizontalFlip .*label"):
        pipeline(image_folder, [A.RandomChoice([A.ColorJitter(0.1), A.HorizontalFlip(key="label")])])


def test_dali_refuses_a_composite_by_name():
    from mediapipe.loaders.dali.lowering import unsupported

    assert unsupported([A.RandomChoice([A.HorizontalFlip()])]) == ["augment[0] RandomChoice"]
