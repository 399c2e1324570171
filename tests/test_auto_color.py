"""The auto-augment colour ops (RandomPosterize, RandomSolarize, RandomEqualize, RandomAutocontrast,
RandomAdjustSharpness, RandomInvert) against torchvision.transforms.v2.functional, sample by sample
with the same values. uint8 and float results are exact: the kernels follow torchvision's
arithmetic step for step (float32 compares and blends, the same roundings and truncations)."""

from __future__ import annotations

import numpy as np
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


def test_uint8_smoothing_in_integers_equals_torchvisions_float_convolution() -> None:
    """Sharpness smooths uint8 in integers, round((box + 4 centre) / 13), where torchvision convolves
    in float32 and rounds: the same on noise over every level, and at the extremes."""
    g = torch.Generator().manual_seed(1)
    noise = torch.randint(0, 256, (6, 3, 31, 45), dtype=torch.uint8, generator=g)
    noise[0], noise[1, :, ::2] = 255, 0
    factors = torch.tensor([0.0, 0.25, 0.9, 1.0, 1.6, 3.0], dtype=torch.float64)
    out = FA.adjust_sharpness(noise, factors)
    for i in range(6):
        assert_equal(out[i], TF.adjust_sharpness(noise[i], float(factors[i])))


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


# -- the DALI lowering: the torch backend's keyed coins, DALI's operators -------------------------------
@pytest.fixture(scope="module")
def png_folder(tmp_path_factory):
    """Lossless PNGs (DALI's decoder gives the torch backend's pixels), so the ops compare exactly."""
    from PIL import Image

    root = tmp_path_factory.mktemp("auto_color_png") / "class0"
    root.mkdir()
    for i in range(12):
        Image.fromarray(photo_like(44 + 3 * i, 70 - 2 * i, 300 + i)).save(root / f"img{i:02d}.png")
    return root.parent


def dali_and_torch(root, ops, seed: int = 4) -> tuple[dict, dict]:
    import mediapipe as mp

    pipe = mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image()}, [A.CenterCrop(40), *ops],
                       batch_size=12, seed=seed, device="cpu")
    return next(iter(pipe.loader(backend="dali"))), next(iter(pipe.loader(backend="torch")))


@pytest.mark.parametrize("ops", [
    [A.RandomPosterize(3, p=0.5)], [A.RandomSolarize(120.0, p=0.5)], [A.RandomInvert(p=0.5)],
    [A.RandomAutocontrast(p=0.5)],
    [A.RandomInvert(p=0.5), A.RandomAutocontrast(p=0.6), A.RandomSolarize(200.0, p=0.7), A.RandomPosterize(5, 0.5)],
    [A.ToDtype(), A.RandomPosterize(2, p=0.5), A.RandomSolarize(0.4, p=0.5), A.RandomInvert(0.5),
     A.RandomAutocontrast(0.5)],
])
def test_lowered_ops_equal_the_torch_backend(png_folder, ops) -> None:
    pytest.importorskip("nvidia.dali")
    a, b = dali_and_torch(png_folder, ops)
    assert a["image"].dtype == b["image"].dtype and torch.equal(a["index"], b["index"])
    if a["image"].is_floating_point():  # float images: the same float32 steps, a rounding apart at most
        torch.testing.assert_close(a["image"], b["image"], atol=1e-6, rtol=0)
    else:
        assert torch.equal(a["image"], b["image"])


def opencv_equalize(image: torch.Tensor) -> torch.Tensor:
    """DALI's equalize written out (OpenCV's table): round(255 (cdf - cdf_min) / (N - cdf_min)) per channel."""
    out = []
    for channel in image.numpy():
        hist = np.bincount(channel.reshape(-1), minlength=256)
        cdf, cdf_min = hist.cumsum(), hist.cumsum()[hist > 0][0]
        lut = np.round((cdf - cdf_min) * 255.0 / max(1, channel.size - cdf_min)).clip(0, 255).astype(np.uint8)
        out.append(lut[channel])
    return torch.from_numpy(np.stack(out))


def test_lowered_equalize_takes_the_keyed_coins_and_opencvs_table(png_folder) -> None:
    """DALI's equalize is OpenCV's, not Pillow's (torchvision's): the lowering takes the keyed coins and
    DALI's table, stated in lowering_auto; on these small images it is several levels from torchvision's."""
    pytest.importorskip("nvidia.dali")
    a, b = dali_and_torch(png_folder, [A.RandomEqualize(p=0.5)])
    x = dali_and_torch(png_folder, [])[1]["image"]
    applied = [not torch.equal(b["image"][i], x[i]) for i in range(12)]
    assert any(applied) and not all(applied)
    for i, on in enumerate(applied):
        assert torch.equal(a["image"][i], opencv_equalize(x[i]) if on else x[i])
        if on:
            assert (a["image"][i].float() - b["image"][i].float()).abs().mean() < 20


def test_unlowered_ops_are_refused_saying_why(png_folder) -> None:
    pytest.importorskip("nvidia.dali")
    import mediapipe as mp
    from mediapipe.errors import PipelineError

    pipe = mp.Pipeline(mp.loaders.folder(png_folder), {"image": mp.decoders.image()},
                       [A.CenterCrop(40), A.RandomAdjustSharpness(2.0), A.Normalize(), A.RandomEqualize()],
                       batch_size=4, device="cpu")
    with pytest.raises(PipelineError, match=r"augment\[1\] RandomAdjustSharpness\(DALI's experimental.filter"):
        pipe.loader(backend="dali")
    pipe = mp.Pipeline(mp.loaders.folder(png_folder), {"image": mp.decoders.image()},
                       [A.CenterCrop(40), A.Normalize(), A.RandomEqualize()], batch_size=4, device="cpu")
    with pytest.raises(PipelineError, match="RandomEqualize on float32 CHW images.*before Normalize"):
        pipe.loader(backend="dali")
