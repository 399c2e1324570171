"""The auto-augment policies (AutoAugment, RandAugment, TrivialAugmentWide, AugMix) against
torchvision v2: every output is the torchvision candidate for its input and its drawn
(op, magnitude bin, sign), computed by torchvision's own ``_apply_image_or_video_transform`` on
that sample alone; the draws cover the op space uniformly; batches are the same with 0 and 2
workers, and with the batch ops in the workers or in the training process.

Tolerances: uint8 with nearest interpolation is exact. With bilinear warps (AugMix's default) an
image may differ by one grey level where a sample lands on a .5 after rounding: our grid is one
batched ``bmm`` over the samples, torchvision's one matrix product per image, and their float32
coordinates differ in the last bit (the same bound as RandomAffine's bilinear tests).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.base import op_from_config
from mediapipe.augment.functional import auto_augment as FP
from mediapipe.errors import PipelineError
from mediapipe.fields import FieldType, boxes, keypoints
from mediapipe.rng import SampleRNG
from mediapipe.stages.collate import TensorList, stack_params
from mediapipe.synthetic import photo_like
from tests.helpers import collect, mask_of, some_boxes, some_points, write_image_folder

TF = pytest.importorskip("torchvision.transforms.v2.functional")
TV = pytest.importorskip("torchvision.transforms.v2")
from torchvision import tv_tensors  # noqa: E402

H, W = 40, 56
TV_CLASS = {"AutoAugment": TV.AutoAugment, "RandAugment": TV.RandAugment, "TrivialAugmentWide": TV.TrivialAugmentWide,
            "AugMix": TV.AugMix}


def images(n: int, height: int = H, width: int = W, seed: int = 0) -> torch.Tensor:
    return torch.stack([torch.from_numpy(photo_like(height, width, seed + i)).permute(2, 0, 1) for i in range(n)])


def draw(op: A.Op, x: torch.Tensor, first: int = 0) -> tuple[list[dict], dict]:
    meta = {"size": tuple(x.shape[-2:]), "shape": tuple(x.shape[1:])}
    drawn = [op.sample_params(SampleRNG(0, 0, first + i, 2), meta) for i in range(x.shape[0])]
    return drawn, stack_params(drawn)


def tv_policy(op: A.Op):
    """torchvision's transform of the same name and settings (the oracle's dispatcher)."""
    cls = TV_CLASS[type(op).__name__]
    fill = list(op.fill) if isinstance(op.fill, tuple) else op.fill
    return cls(interpolation=op.interpolation, fill=fill)


def tv_magnitude(tv, name: str, num_bins: int, magnitude_bin: int, sign: int, size: tuple[int, int]) -> float:
    """torchvision's magnitude for (op, bin, sign): ``float(magnitudes[bin])``, negated for sign -1."""
    fn, signed = tv._AUGMENTATION_SPACE[name]
    table = fn(num_bins, *size)
    if table is None:
        return 0.0
    magnitude = float(table[magnitude_bin])
    return -magnitude if signed and sign < 0 else magnitude


def tv_chain(op: A.Op, tv, t, ops, bins, signs, num_bins: int):
    """The drawn ops of one sample applied by torchvision, one after another."""
    size = tuple(t.shape[-2:])
    for op_id, magnitude_bin, sign in zip(ops, bins, signs):
        if op_id < 0:
            continue
        name = op.space[op_id].name
        magnitude = tv_magnitude(tv, name, num_bins, magnitude_bin, sign, size)
        t = tv._apply_image_or_video_transform(t, name, magnitude, interpolation=tv.interpolation, fill=tv._fill)
    return t


def tv_candidate(op: A.Op, x: torch.Tensor, d: dict) -> torch.Tensor:
    """torchvision's output for one sample ``x`` and its draw ``d``."""
    tv = tv_policy(op)
    if isinstance(op, A.AugMix):
        mix = torch.tensor(d["mix"], dtype=torch.float32)
        combined = torch.tensor(d["weights"], dtype=torch.float32) * mix[1]
        out = mix[0] * x
        for chain in range(op.mixture_width):
            s = slice(chain * op.depth, (chain + 1) * op.depth)
            out.add_(combined[chain] * tv_chain(op, tv, x, d["ops"][s], d["bins"][s], d["signs"][s], 10))
        return out.to(x.dtype)
    num_bins = 10 if isinstance(op, A.AutoAugment) else op.num_magnitude_bins
    return tv_chain(op, tv, x, d["ops"], d["bins"], d["signs"], num_bins)


def levels_apart(a: torch.Tensor, b: torch.Tensor) -> int:
    b = b.as_subclass(torch.Tensor)
    assert a.shape == b.shape and a.dtype == b.dtype
    return int((a.double() - b.double()).abs().max().item() * (255 if a.is_floating_point() else 1))


# -- our spaces are torchvision's --------------------------------------------------------------------
@pytest.mark.parametrize(("name", "tv_space"), [
    ("AutoAugment", TV.AutoAugment._AUGMENTATION_SPACE), ("RandAugment", TV.RandAugment._AUGMENTATION_SPACE),
    ("TrivialAugmentWide", TV.TrivialAugmentWide._AUGMENTATION_SPACE),
    ("AugMix", TV.AugMix._AUGMENTATION_SPACE), ("AugMix-partial", TV.AugMix._PARTIAL_AUGMENTATION_SPACE)])
def test_op_spaces_magnitudes_and_signs_are_torchvisions(name, tv_space) -> None:
    ours = FP.SPACES[name]
    assert [op.name for op in ours] == list(tv_space)
    for op in ours:
        fn, signed = tv_space[op.name]
        assert op.signed == signed or op.magnitudes is None, op.name
        for bins, size in [(10, (H, W)), (31, (224, 160)), (7, (33, 97))]:
            expected, table = fn(bins, *size), FP.magnitude_table(op, bins, *size)
            assert (expected is None) == (table is None), op.name
            if table is not None:
                assert torch.equal(table, expected.to(torch.float64)), (op.name, bins, size)


def test_autoaugment_policies_are_torchvisions() -> None:
    from mediapipe.augment.auto_augment import POLICIES

    for policy in ("imagenet", "cifar10", "svhn"):
        assert [tuple(s) for s in TV.AutoAugment(TV.AutoAugmentPolicy(policy))._policies] == list(POLICIES[policy])


# -- every output is torchvision's candidate for its draw ------------------------------------------------
POLICY_CASES = [
    A.TrivialAugmentWide(),
    A.TrivialAugmentWide(num_magnitude_bins=7, fill=(20.0, 200.0, 90.0)),
    A.RandAugment(),
    A.RandAugment(num_ops=3, magnitude=25, fill=128.0),
    A.AutoAugment("imagenet"),
    A.AutoAugment("cifar10"),
    A.AutoAugment("svhn", fill=7.0),
    A.AugMix(interpolation="nearest"),
    A.AugMix(severity=10, mixture_width=2, chain_depth=2, alpha=0.5, all_ops=False, interpolation="nearest"),
]


@pytest.mark.parametrize("case", range(len(POLICY_CASES)))
def test_each_output_is_torchvisions_candidate_for_its_draw(case) -> None:
    op = POLICY_CASES[case]
    x = images(16 if isinstance(op, A.AugMix) else 32)
    before = x.clone()
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    assert torch.equal(x, before)  # pure: the input is not written
    assert out.shape == x.shape and out.dtype == torch.uint8
    drawn_ops = {o for d in drawn for o in d["ops"] if o >= 0}
    assert len(drawn_ops) >= 8  # a batch groups many ops
    for i, d in enumerate(drawn):
        assert levels_apart(out[i], tv_candidate(op, x[i], d)) == 0, (i, d)


@pytest.mark.parametrize("op", [A.TrivialAugmentWide(interpolation="bilinear"), A.AugMix(),
                                A.RandAugment(interpolation="bilinear", fill=(1.0, 2.0, 3.0))])
def test_bilinear_warps_within_one_level_of_torchvision(op) -> None:
    x = images(32, seed=50)
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    worst = max(levels_apart(out[i], tv_candidate(op, x[i], d)) for i, d in enumerate(drawn))
    assert worst <= 1


def test_float_images_follow_torchvision_too() -> None:
    op = A.TrivialAugmentWide()
    x = images(32, seed=7).float() / 255
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    assert out.dtype == torch.float32
    for i, d in enumerate(drawn):
        torch.testing.assert_close(out[i], tv_candidate(op, x[i], d).as_subclass(torch.Tensor), atol=1e-6, rtol=0)


def test_grey_images_as_torchvision() -> None:
    op = A.RandAugment(num_ops=2, magnitude=14)
    x = images(24)[:, :1].contiguous()
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    for i, d in enumerate(drawn):
        assert levels_apart(out[i], tv_candidate(op, x[i], d)) == 0


def test_clips_one_draw_per_clip_as_torchvision_video() -> None:
    op = A.TrivialAugmentWide()
    clips = torch.stack([images(3, 24, 32, seed=10 * b) for b in range(16)])  # (B, T, C, H, W)
    drawn, params = draw(op, clips)
    out = op.apply(clips, params)
    for b, d in enumerate(drawn):
        assert levels_apart(out[b], tv_candidate(op, tv_tensors.Video(clips[b]), d)) == 0


def test_one_sample_in_the_sample_stage_equals_its_row_of_the_batch() -> None:
    x = images(12)
    for op in (A.TrivialAugmentWide(), A.AugMix(), A.AutoAugment()):
        drawn, params = draw(op, x)
        batch = op.apply(x, params)
        for i, d in enumerate(drawn):
            assert torch.equal(op.apply(x[i], d), batch[i])


@pytest.mark.parametrize("fill", [None, 9.0, (20.0, 200.0, 90.4)])
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_whole_pixel_translations_by_slicing_equal_torchvisions_warp(fill, interpolation) -> None:
    """On the CPU a uint8 translation is a slice copy: the same pixels as torchvision's affine, every
    shift from none to past the image, both ways, on images and masks."""
    x = images(9, 20, 30)
    shifts = torch.tensor([[0, 0], [3, 0], [-7, 0], [0, 5], [0, -19], [29, 0], [-31, 0], [0, 20], [12, -4]],
                          dtype=torch.float64)
    image = FP.WarpSettings("image", (20, 30), interpolation, fill)
    out, masks = FP._translate(x, shifts, image), FP._translate(x[:, 0], shifts, FP.WarpSettings("mask", (20, 30)))
    tv_fill = list(fill) if isinstance(fill, tuple) else fill
    for i, (dx, dy) in enumerate(shifts.int().tolist()):
        ref = TF.affine(x[i], 0.0, [dx, dy], 1.0, [0.0, 0.0], interpolation=TV.InterpolationMode(interpolation),
                        fill=tv_fill)
        assert torch.equal(out[i], ref), (dx, dy)
        mask = TF.affine(tv_tensors.Mask(x[i, :1]), 0.0, [dx, dy], 1.0, [0.0, 0.0])
        assert torch.equal(masks[i], mask.as_subclass(torch.Tensor)[0]), (dx, dy)


def test_a_device_takes_each_group_whole_and_warps_translations_with_the_same_result(monkeypatch) -> None:
    """What a device runs (each op's group in one call, translations through the warp) equals the CPU's
    cache-sized pieces and slice copies, sample for sample."""
    from mediapipe.augment.functional import auto_color as AC

    op = A.RandAugment(num_ops=3, magnitude=17, fill=(5.0, 6.0, 7.0))
    x = images(24)
    params = draw(op, x)[1]
    cpu = op.apply(x, params)
    monkeypatch.setattr(AC, "rows_per_chunk", lambda t: max(1, t.shape[0]))
    monkeypatch.setattr(FP, "_translate", lambda t, shift, s: FP._warp(t, s, translate=shift))
    assert torch.equal(op.apply(x, params), cpu)


# -- masks, boxes and keypoints move with the geometric ops ---------------------------------------------
def tv_targets(op: A.Op, tv, data: dict, d: dict, size: tuple[int, int]) -> dict:
    """The sample's mask, boxes and points through torchvision's dispatcher for each drawn geometric op
    (the colour ops leave them: torchvision's policies refuse them, their meaning is unchanged)."""
    t = {"mask": tv_tensors.Mask(data["mask"]),
         "boxes": tv_tensors.BoundingBoxes(data["boxes"], format="XYXY", canvas_size=size),
         "points": tv_tensors.KeyPoints(data["points"], canvas_size=size)}
    for op_id, magnitude_bin, sign in zip(d["ops"], d["bins"], d["signs"]):
        if op_id < 0 or not op.space[op_id].geometric:
            continue
        name = op.space[op_id].name
        magnitude = tv_magnitude(tv, name, op.num_bins(), magnitude_bin, sign, size)
        t = {k: tv._apply_image_or_video_transform(v, name, magnitude, interpolation="nearest", fill=tv._fill)
             for k, v in t.items()}
    return t


@pytest.mark.parametrize("op", [A.TrivialAugmentWide(), A.RandAugment(num_ops=3, magnitude=20), A.AutoAugment("svhn")])
@pytest.mark.parametrize("collate", ["list", "pad"])
def test_masks_boxes_and_keypoints_move_with_the_image(op, collate) -> None:
    types = {"image": FieldType("image"), "mask": FieldType("mask"), "boxes": boxes("xyxy", collate=collate),
             "points": keypoints()}
    op = op.bind(types)
    assert op.inputs == ("image", "mask", "boxes", "points")
    x = images(24)
    samples = [{"mask": mask_of(x[i]), "boxes": some_boxes(i, h=H, w=W), "points": some_points(i, h=H, w=W)}
               for i in range(24)]
    samples[3]["boxes"] = samples[3]["boxes"][:0]  # a sample without objects
    batch = {"image": x, "mask": torch.stack([s["mask"] for s in samples]),
             "points": torch.stack([s["points"] for s in samples])}
    if collate == "list":
        batch["boxes"] = TensorList(s["boxes"] for s in samples)
    else:
        lengths = torch.tensor([len(s["boxes"]) for s in samples])
        padded = torch.zeros(24, int(lengths.max()), 4)
        for i, s in enumerate(samples):
            padded[i, : len(s["boxes"])] = s["boxes"]
        batch["boxes"], batch["boxes_lengths"] = padded, lengths
    drawn, params = draw(op, x)
    assert sum(any(o >= 0 and op.space[o].geometric for o in d["ops"]) for d in drawn) >= 5
    op.apply_fields(batch, params)
    tv = tv_policy(op)
    for i, (s, d) in enumerate(zip(samples, drawn)):
        ref = tv_targets(op, tv, s, d, (H, W))
        n = len(s["boxes"])
        assert torch.equal(batch["mask"][i], ref["mask"].as_subclass(torch.Tensor)), i
        torch.testing.assert_close(batch["boxes"][i][:n], ref["boxes"].as_subclass(torch.Tensor), atol=1e-4, rtol=0)
        torch.testing.assert_close(batch["points"][i], ref["points"].as_subclass(torch.Tensor), atol=1e-4, rtol=0)
        assert levels_apart(batch["image"][i], tv_candidate(op, x[i], d)) == 0
        if collate == "pad":
            assert not batch["boxes"][i][n:].any()  # padding stays zero


def test_augmix_refuses_masks_and_boxes_and_names_the_way_out() -> None:
    types = {"image": FieldType("image"), "mask": FieldType("mask")}
    with pytest.raises(PipelineError, match="AugMix cannot transform field 'mask'.*out="):
        A.AugMix().bind(types, where="augment[1] ")
    kept = A.AugMix(keys="image", out="mixed").bind(types)  # the original image keeps its mask
    assert kept.outputs == ("mixed",)


# -- the draws cover the op space uniformly -------------------------------------------------------------
CHI2_999 = {6: 22.46, 8: 26.12, 12: 32.91, 13: 34.53, 24: 51.18, 30: 59.70}  # chi-square, p = 0.001


def chi2(counts: np.ndarray) -> float:
    expected = counts.sum() / len(counts)
    return float(((counts - expected) ** 2 / expected).sum())


def test_trivial_augment_draws_ops_bins_and_signs_uniformly() -> None:
    op = A.TrivialAugmentWide()
    drawn = [op.sample_params(SampleRNG(3, 1, i, 5), {"size": (H, W)}) for i in range(7000)]
    ops = np.array([d["ops"][0] for d in drawn])
    bins = np.array([d["bins"][0] for d in drawn])
    assert chi2(np.bincount(ops, minlength=14)) < CHI2_999[13]
    assert chi2(np.bincount(bins, minlength=31)) < CHI2_999[30]
    signed = np.array([op.space[o].signed for o in ops])
    negative = np.array([d["signs"][0] < 0 for d in drawn])
    assert not negative[~signed].any()
    assert abs(negative[signed].mean() - 0.5) < 0.03


def test_rand_augment_draws_each_slot_uniformly_and_independently() -> None:
    op = A.RandAugment(num_ops=2, magnitude=5)
    drawn = [op.sample_params(SampleRNG(0, 0, i, 1), {"size": (H, W)}) for i in range(5000)]
    ops = np.array([d["ops"] for d in drawn])
    assert all(d["bins"] == (5, 5) for d in drawn)
    for slot in range(2):
        assert chi2(np.bincount(ops[:, slot], minlength=14)) < CHI2_999[13]
    pairs = np.bincount(ops[:, 0] * 14 + ops[:, 1], minlength=196)  # independent: every pair, ~25 each
    assert pairs.min() > 5


def test_auto_augment_draws_sub_policies_uniformly_with_their_probabilities() -> None:
    from mediapipe.augment.auto_augment import POLICIES

    op = A.AutoAugment("imagenet")
    drawn = [op.sample_params(SampleRNG(0, 0, i, 1), {"size": (H, W)}) for i in range(6000)]
    policies = np.array([d["policy"] for d in drawn])
    assert chi2(np.bincount(policies, minlength=25)) < CHI2_999[24]
    for slot in range(2):  # each op applies with its probability (within 5 points over ~1400 draws of each)
        for p in (0.4, 0.6, 0.8):
            chosen = [d for d in drawn if POLICIES["imagenet"][d["policy"]][slot][1] == p]
            assert abs(np.mean([d["ops"][slot] >= 0 for d in chosen]) - p) < 0.05


def test_augmix_draws_depths_ops_bins_and_weights() -> None:
    op = A.AugMix(severity=4)
    drawn = [op.sample_params(SampleRNG(0, 0, i, 1), {"size": (H, W)}) for i in range(3000)]
    ops = np.array([d["ops"] for d in drawn]).reshape(-1, 3)  # (samples * chains, depth slots)
    depths = (ops >= 0).sum(1)
    assert (ops[:, 0] >= 0).all() and chi2(np.bincount(depths, minlength=4)[1:]) < 16.27  # 2 dof
    applied = ops[ops >= 0]
    assert chi2(np.bincount(applied, minlength=13)) < CHI2_999[12]
    bins = np.array([d["bins"] for d in drawn]).reshape(-1, 3)[ops >= 0]
    assert bins.max() == 3 and chi2(np.bincount(bins, minlength=4)) < 16.27
    mix, weights = np.array([d["mix"] for d in drawn]), np.array([d["weights"] for d in drawn])
    assert np.allclose(mix.sum(1), 1) and np.allclose(weights.sum(1), 1)
    assert abs(mix[:, 0].mean() - 0.5) < 0.02 and abs(weights.mean() - 1 / 3) < 0.02  # Dirichlet(1, ...) means


# -- in a pipeline: the same batches with 0 and 2 workers, the batch ops in a worker or not ---------------
@pytest.fixture(scope="module")
def photo_folder(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("auto_augment"), 24, scale=0.2)


def recipe(root, **kwargs) -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image()},
                       [A.RandomResizedCrop(48), A.HorizontalFlip(), A.TrivialAugmentWide(),
                        A.AugMix(keys="image", out="mixed"), A.RandAugment(), A.Normalize()],
                       batch_size=8, seed=5, device="cpu", **kwargs)


def test_same_batches_with_0_and_2_workers_and_batch_ops_in_workers_or_not(photo_folder) -> None:
    pipe = recipe(photo_folder)
    inline = collect(pipe.loader(num_workers=0))
    workers = collect(pipe.loader(num_workers=2))  # a CPU device: the batch ops run in the workers
    threads = collect(pipe.loader(num_workers=2, worker_type="thread"))
    assert len(inline) == 3
    for a, b, c in zip(inline, workers, threads):
        assert a.keys() == b.keys() == c.keys()
        for k in ("image", "mixed", "label", "index"):
            assert torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]), k
        assert a["image"].shape == (8, 3, 48, 48) and a["image"].dtype == torch.float32
        assert a["mixed"].shape == (8, 3, 48, 48) and not torch.equal(a["mixed"], a["image"])


def test_a_pipeline_applies_each_samples_keyed_draw(photo_folder) -> None:
    """The batch stage draws with the sample's key, so a sample's policy output is its own whatever
    the batch: batch 0's images equal the op applied to the crops with the keyed draws."""
    ops = [A.RandomResizedCrop(40), A.TrivialAugmentWide()]
    base = mp.Pipeline(mp.loaders.folder(photo_folder), {"image": mp.decoders.image()}, ops[:1],
                       batch_size=8, seed=3, device="cpu")
    full = mp.Pipeline(mp.loaders.folder(photo_folder), {"image": mp.decoders.image()}, ops,
                       batch_size=8, seed=3, device="cpu")
    crops, augmented = next(iter(base.loader(shuffle=False))), next(iter(full.loader(shuffle=False)))
    meta = {"size": (40, 40), "shape": (3, 40, 40)}
    drawn = [ops[1].sample_params(SampleRNG(3, 0, int(i), 1), meta) for i in crops["index"]]
    assert torch.equal(augmented["image"], ops[1].apply(crops["image"], stack_params(drawn)))


def test_config_round_trip_and_pickles() -> None:
    import pickle

    for op in POLICY_CASES + [A.RandAugment(num_ops=0)]:
        assert op_from_config(op.to_config()) == op
        assert pickle.loads(pickle.dumps(op)) == op


def test_no_ops_is_the_identity() -> None:
    op = A.RandAugment(num_ops=0)
    x = images(4)
    assert torch.equal(op.apply(x, draw(op, x)[1]), x)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: A.AutoAugment("mnist"), "policy"), (lambda: A.AutoAugment(interpolation="bicubic"), "interpolation"),
    (lambda: A.RandAugment(num_ops=-1), "num_ops"), (lambda: A.RandAugment(magnitude=31), "magnitude"),
    (lambda: A.RandAugment(num_magnitude_bins=1, magnitude=0), "num_magnitude_bins"),
    (lambda: A.TrivialAugmentWide(num_magnitude_bins=1), "num_magnitude_bins"),
    (lambda: A.TrivialAugmentWide(fill=float("nan")), "fill"),
    (lambda: A.AugMix(severity=11), "severity"), (lambda: A.AugMix(mixture_width=0), "mixture_width"),
    (lambda: A.AugMix(alpha=0.0), "alpha"),
])
def test_argument_validation(make, match) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_dali_refuses_the_policies_saying_it_draws_otherwise(photo_folder) -> None:
    pytest.importorskip("nvidia.dali")
    pipe = mp.Pipeline(mp.loaders.folder(photo_folder), {"image": mp.decoders.image()},
                       [A.RandomResizedCrop(32), A.TrivialAugmentWide(), A.RandAugment(), A.AutoAugment("svhn"),
                        A.AugMix(), A.Normalize()], batch_size=4, device="cpu")
    with pytest.raises(PipelineError) as info:
        pipe.loader(backend="dali")
    message = str(info.value)
    for i, name in enumerate(("TrivialAugmentWide", "RandAugment", "AutoAugment", "AugMix"), start=1):
        assert f"augment[{i}] {name}(nvidia.dali.auto_aug draws its ops" in message, message
    assert "augment[0]" not in message and "augment[5]" not in message  # the crop and Normalize lower


def test_the_recipe_bench_scenario_runs_the_recipe_on_each_backend(photo_folder) -> None:
    """image-train-recipe is torchvision's recipe in this library's ops and in torchvision's v2, and its
    library and torchvision streams deliver batches (DALI's peer is the same scenario in DALI's operators)."""
    from mediapipe.bench import images, scenarios
    from mediapipe.bench.image_data import RECIPE, scenario_ops, torchvision_transform

    scenario = scenarios.SCENARIOS[RECIPE]
    assert set(scenario.backends) == {"mediapipe", "torchvision", "dali"} and scenario.kind == "image"
    assert [type(op).__name__ for op in scenario_ops(RECIPE)] == [
        "RandomResizedCrop", "HorizontalFlip", "TrivialAugmentWide", "Normalize", "RandomErasing"]
    assert scenario_ops(RECIPE)[-1].p == 0.1
    names = [type(t).__name__ for t in torchvision_transform(RECIPE).transforms]
    assert names[:3] == ["RandomResizedCrop", "RandomHorizontalFlip", "TrivialAugmentWide"]
    assert names[-1] == "RandomErasing" and torchvision_transform(RECIPE).transforms[-1].p == 0.1
    for backend in ("mediapipe", "torchvision"):
        stream = images.open_stream(RECIPE, backend, photo_folder, device="cpu", workers=0, batch_size=4,
                                    options={"max_batches": 2})
        samples, _ = next(iter(stream))
        assert samples == 4
        stream.close()
