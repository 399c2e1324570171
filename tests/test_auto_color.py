"""The auto-augment colour ops (RandomPosterize, RandomSolarize, RandomEqualize, RandomAutocontrast,
RandomAdjustSharpness, RandomInvert) against torchvision.transforms.v2.functional, sample by sample
with the same values. uint8 and float results are exact: the kernels follow torchvision's
arithmetic step for step (float32 compares and blends, the same roundings and truncations)."""

from __future__ import annotations

import pytest
import torch

from mediapipe import augment as A
from mediapipe.augment.base import op_from_config
from mediapipe.augment.functional import auto_color as FA
from mediapipe.rng import SampleRNG
from mediapipe.stages.collate import stack_params
from mediapipe.synthetic import photo_like

TF = pytest.importorskip("torchvision.transforms.v2.functional")


def images(n: int = 6, height: int = 36, width: int = 52, seed: int = 0) -> torch.Tensor:
    return torch.stack([torch.from_numpy(photo_like(height, width, seed + i)).permute(2, 0, 1) for i in range(n)])


def as_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x if dtype == torch.uint8 else x.float() / 255


def draw(op: A.Op, x: torch.Tensor) -> tuple[list[dict], dict]:
    meta = {"size": tuple(x.shape[-2:]), "shape": tuple(x.shape[1:])}
    drawn = [op.sample_params(SampleRNG(0, 0, i, 3), meta) for i in range(x.shape[0])]
    return drawn, stack_params(drawn)


def assert_equal(out: torch.Tensor, ref: torch.Tensor) -> None:
    ref = ref.as_subclass(torch.Tensor)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert torch.equal(out, ref), f"max abs diff {(out.double() - ref.double()).abs().max().item()}"


# -- each op with p=1, sample by sample against torchvision ------------------------------------------
CASES = [
    (A.RandomPosterize(bits=3, p=1.0), lambda t: TF.posterize(t, 3)),
    (A.RandomPosterize(bits=0, p=1.0), lambda t: TF.posterize(t, 0)),
    (A.RandomPosterize(bits=8, p=1.0), lambda t: TF.posterize(t, 8)),
    (A.RandomEqualize(p=1.0), TF.equalize),
    (A.RandomAutocontrast(p=1.0), TF.autocontrast),
    (A.RandomAdjustSharpness(sharpness_factor=1.7, p=1.0), lambda t: TF.adjust_sharpness(t, 1.7)),
    (A.RandomAdjustSharpness(sharpness_factor=0.0, p=1.0), lambda t: TF.adjust_sharpness(t, 0.0)),
    (A.RandomAdjustSharpness(sharpness_factor=0.3, p=1.0), lambda t: TF.adjust_sharpness(t, 0.3)),
    (A.RandomInvert(p=1.0), TF.invert),
]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_each_op_with_p_1_equals_torchvision(case, dtype) -> None:
    op, oracle = CASES[case]
    x = as_dtype(images(), dtype)
    before = x.clone()
    out = op.apply(x, draw(op, x)[1])
    assert torch.equal(x, before)  # pure: the input is not written
    for i in range(x.shape[0]):
        assert_equal(out[i], oracle(x[i]))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_solarize_equals_torchvision_at_thresholds_float32_rounds_across_a_level(dtype) -> None:
    # 255 * 0.6666667 = 170.0000051 in float64 but 170.0 in float32: torch compares a uint8 image
    # with a Python number in float32, so the pixels at 170 are inverted (a float64 compare would not)
    bound = 255.0 if dtype == torch.uint8 else 1.0
    x = as_dtype(images(), dtype)
    for threshold in (bound * 0.6666666865348816, bound * 0.3333333432674408, 0.0, bound, bound * 0.5):
        op = A.RandomSolarize(threshold=threshold, p=1.0)
        out = op.apply(x, draw(op, x)[1])
        for i in range(x.shape[0]):
            assert_equal(out[i], TF.solarize(x[i], threshold))


def test_per_sample_values_of_the_batched_kernels() -> None:
    """The kernels take one value per sample: bits, thresholds and factors differ within a batch."""
    x = images(5)
    bits = torch.tensor([0, 2, 5, 7, 8])
    thresholds = torch.tensor([0.0, 64.5, 128.0, 200.0, 255.0], dtype=torch.float64)
    factors = torch.tensor([0.0, 0.4, 1.0, 1.5, 2.0], dtype=torch.float64)
    post, sol, sharp = FA.posterize(x, bits), FA.solarize(x, thresholds), FA.adjust_sharpness(x, factors)
    for i in range(5):
        assert_equal(post[i], TF.posterize(x[i], int(bits[i])))
        assert_equal(sol[i], TF.solarize(x[i], float(thresholds[i])))
        assert_equal(sharp[i], TF.adjust_sharpness(x[i], float(factors[i])))


@pytest.mark.parametrize("make", [A.RandomPosterize, A.RandomSolarize, A.RandomEqualize, A.RandomAutocontrast,
                                  A.RandomAdjustSharpness, A.RandomInvert])
def test_p_selects_samples_and_the_others_pass_unchanged(make) -> None:
    op = make(p=0.5)
    x = images(12)
    drawn, params = draw(op, x)
    flags = [d["apply"] for d in drawn]
    assert any(flags) and not all(flags)
    out = op.apply(x, params)
    everything = make(p=1.0)
    full = everything.apply(x, draw(everything, x)[1])
    for i, flag in enumerate(flags):
        assert_equal(out[i], full[i] if flag else x[i])
    never = make(p=0.0)
    assert torch.equal(never.apply(x, draw(never, x)[1]), x)


def test_clips_one_draw_per_clip_each_frame_as_torchvision_video() -> None:
    clips = torch.stack([images(3, 20, 28, seed=10 * b) for b in range(4)])  # (B, T, C, H, W)
    for op, oracle in [(A.RandomEqualize(p=0.5), TF.equalize), (A.RandomAutocontrast(p=0.5), TF.autocontrast),
                       (A.RandomAdjustSharpness(2.0, p=0.5), lambda t: TF.adjust_sharpness(t, 2.0)),
                       (A.RandomPosterize(2, p=0.5), lambda t: TF.posterize(t, 2))]:
        drawn, params = draw(op, clips)
        out = op.apply(clips, params)
        for b, d in enumerate(drawn):
            assert_equal(out[b], oracle(clips[b]) if d["apply"] else clips[b])


def test_one_sample_in_the_sample_stage_equals_its_row_of_the_batch() -> None:
    x = images(4)
    for op in (A.RandomEqualize(p=0.7), A.RandomAdjustSharpness(0.5, p=0.7), A.RandomSolarize(100.0, p=0.7)):
        drawn, params = draw(op, x)
        batch = op.apply(x, params)
        for i, d in enumerate(drawn):
            assert torch.equal(op.apply(x[i], d), batch[i])


def test_grey_flat_and_tiny_images_as_torchvision() -> None:
    grey = images(3)[:, :1].contiguous()
    flat = torch.full((2, 3, 9, 11), 77, dtype=torch.uint8)  # autocontrast leaves it, equalize's step is 0
    few = torch.zeros(2, 3, 9, 11, dtype=torch.uint8)
    few[:, :, :4] = 200  # two values: equalize maps them as Pillow does
    tiny = images(2, 2, 5)  # sharpness needs more than 2 pixels a side: left as it is
    for x in (grey, flat, few, tiny):
        for kernel, oracle in [(FA.equalize, TF.equalize), (FA.autocontrast, TF.autocontrast),
                               (lambda t: FA.adjust_sharpness(t, torch.full((t.shape[0],), 1.8, dtype=torch.float64)),
                                lambda t: TF.adjust_sharpness(t, 1.8))]:
            out = kernel(x)
            for i in range(x.shape[0]):
                assert_equal(out[i], oracle(x[i]))


def test_solarize_threshold_above_the_dtype_is_refused_naming_the_op() -> None:
    op = A.RandomSolarize(threshold=128.0, p=1.0)
    x = images(2).float() / 255
    with pytest.raises(ValueError, match=r"RandomSolarize\(threshold=128.0\).*torch.float32"):
        op.apply(x, draw(op, x)[1])


def test_other_integer_images_are_refused() -> None:
    with pytest.raises(TypeError, match="uint8 or float"):
        FA.equalize(torch.zeros(1, 3, 4, 4, dtype=torch.int16))


@pytest.mark.parametrize("op", [A.RandomPosterize(2, p=0.3), A.RandomSolarize(100.0), A.RandomEqualize(0.2),
                                A.RandomAutocontrast(0.9), A.RandomAdjustSharpness(0.5, 0.4), A.RandomInvert(1.0)])
def test_config_round_trip(op) -> None:
    assert op_from_config(op.to_config()) == op


def test_positional_arguments_in_torchvisions_order() -> None:
    assert A.RandomPosterize(3, 0.2) == A.RandomPosterize(bits=3, p=0.2)
    assert A.RandomSolarize(192.0, 0.2).threshold == 192.0
    assert A.RandomAdjustSharpness(2.0, 0.1).p == 0.1
    assert A.RandomEqualize(0.25).p == 0.25


@pytest.mark.parametrize(("make", "match"), [
    (lambda: A.RandomPosterize(bits=9), "bits"), (lambda: A.RandomPosterize(p=1.5), "p=1.5"),
    (lambda: A.RandomSolarize(threshold=-1.0), "threshold"), (lambda: A.RandomAdjustSharpness(-0.5), "sharpness"),
    (lambda: A.RandomInvert(p=-0.1), "p=-0.1"),
])
def test_argument_validation(make, match) -> None:
    with pytest.raises(ValueError, match=match):
        make()
