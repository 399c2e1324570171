"""Colour ops against torchvision.transforms.v2.functional, applied per sample with the same params.

Tolerances: uint8 results are exact (the kernels follow torchvision's float32 arithmetic and
its truncation); float results within 1e-5 (operation order differs slightly).
"""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF

from mediapipe import augment as A
from mediapipe.augment.base import op_from_config
from mediapipe.augment.functional import color as FC
from mediapipe.rng import SampleRNG
from mediapipe.stages.collate import stack_params
from mediapipe.synthetic import photo_like

TV_ADJUST = {"brightness": TF.adjust_brightness, "contrast": TF.adjust_contrast,
             "saturation": TF.adjust_saturation, "hue": TF.adjust_hue}


def images(n: int = 6, height: int = 40, width: int = 56, seed: int = 0) -> torch.Tensor:
    return torch.stack([torch.from_numpy(photo_like(height, width, seed + i)).permute(2, 0, 1) for i in range(n)])


def draw(op: A.Op, x: torch.Tensor, op_index: int = 2) -> tuple[list[dict], dict]:
    meta = {"size": tuple(x.shape[-2:]), "shape": tuple(x.shape[1:])}
    drawn = [op.sample_params(SampleRNG(0, 0, i, op_index), meta) for i in range(x.shape[0])]
    return drawn, stack_params(drawn)


def assert_matches(out: torch.Tensor, ref: torch.Tensor, atol: float = 1e-5) -> None:
    assert out.shape == ref.shape and out.dtype == ref.dtype
    if out.is_floating_point():
        torch.testing.assert_close(out, ref, atol=atol, rtol=0)
    else:
        assert torch.equal(out, ref), f"max abs diff {(out.int() - ref.int()).abs().max().item()}"


# -- Normalize, ToDtype ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_normalize_matches_torchvision(dtype) -> None:
    x = images(4)
    x = x if dtype == torch.uint8 else x.float() / 255
    before = x.clone()
    op = A.Normalize(mean=A.IMAGENET_MEAN, std=A.IMAGENET_STD)
    out = op.apply(x, {})
    ref = TF.normalize(TF.to_dtype(x, torch.float32, scale=True), list(A.IMAGENET_MEAN), list(A.IMAGENET_STD))
    assert_matches(out, ref, atol=2e-6 * 255)
    assert torch.equal(x, before)  # pure: the input is not written
    assert out.data_ptr() != x.data_ptr()


def test_normalize_float_input_is_not_mutated_and_half_output() -> None:
    x = images(2).float() / 255
    before = x.clone()
    out = A.Normalize(dtype="float16").apply(x, {})
    assert out.dtype == torch.float16 and torch.equal(x, before)


def test_normalize_rejects_wrong_channel_count() -> None:
    with pytest.raises(ValueError, match="3 means for 1 channels"):
        A.Normalize().apply(torch.zeros(2, 1, 4, 4, dtype=torch.uint8), {})


@pytest.mark.parametrize(("src", "dst"), [(torch.uint8, "float32"), (torch.float32, "uint8")])
def test_to_dtype_matches_torchvision_scale(src, dst) -> None:
    x = images(2)
    x = x if src == torch.uint8 else x.float() / 255
    out = A.ToDtype(dst).apply(x, {})
    ref = TF.to_dtype(x, FC.dtype_of(dst), scale=True)
    if dst == "uint8":  # x * 255.999 truncated, as torchvision: the source comes back
        assert torch.equal(out, images(2)) and torch.equal(out, ref)
    else:
        assert_matches(out, ref)


# -- the four adjustments, one factor per sample ------------------------------------------------------------
@pytest.mark.parametrize("name", ["brightness", "contrast", "saturation", "hue"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_adjust_kernels_match_torchvision(name: str, dtype) -> None:
    x = images(5)
    x = x if dtype == torch.uint8 else x.float() / 255
    factors = torch.tensor([0.0, 0.5, 1.0, 1.3, 2.0]) if name != "hue" else torch.tensor([-0.5, -0.2, 0.0, 0.1, 0.45])
    out = getattr(FC, f"adjust_{name}")(x, factors)
    for i in range(5):
        assert_matches(out[i], TV_ADJUST[name](x[i], float(factors[i])))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_color_jitter_matches_torchvision_in_each_samples_order(dtype) -> None:
    x = images(8)
    x = x if dtype == torch.uint8 else x.float() / 255
    op = A.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)
    drawn, params = draw(op, x)
    assert len({d["order"] for d in drawn}) > 2  # orders differ between samples
    before = x.clone()
    out = op.apply(x, params)
    assert torch.equal(x, before)  # pure
    for i, d in enumerate(drawn):
        ref = x[i]
        for j in d["order"]:
            name = FC.JITTER_ORDER[j]
            ref = TV_ADJUST[name](ref, float(params[name][i]))  # the float32 factor the kernel saw
        assert_matches(out[i], ref)


def test_color_jitter_skips_identity_adjustments() -> None:
    op = A.ColorJitter(brightness=(0.5, 1.5), hue=0.0, saturation=(1.0, 1.0))
    assert set(op.ranges()) == {"brightness"}
    p = op.sample_params(SampleRNG(0, 0, 0, 0), {})
    assert set(p) == {"order", "brightness"} and 0.5 <= p["brightness"] <= 1.5
    assert sorted(p["order"]) == [0, 1, 2, 3]
    x = images(3)
    _, params = draw(op, x)
    for i in range(3):
        assert_matches(op.apply(x, params)[i], TF.adjust_brightness(x[i], float(params["brightness"][i])))


def test_color_jitter_factor_ranges_like_torchvision() -> None:
    op = A.ColorJitter(brightness=1.5, contrast=0.2, hue=0.3)
    assert op.ranges() == {"brightness": (0.0, 2.5), "contrast": (0.8, 1.2), "hue": (-0.3, 0.3)}
    draws = [op.sample_params(SampleRNG(0, 0, i, 0), {}) for i in range(300)]
    assert all(0.0 <= d["brightness"] <= 2.5 and -0.3 <= d["hue"] <= 0.3 for d in draws)
    first = [d["order"][0] for d in draws]
    assert all(first.count(k) > 40 for k in range(4))  # each adjustment comes first about 1/4 of the time


def test_color_jitter_one_channel_input_is_not_written() -> None:
    x = images(6)[:, :1].contiguous()
    before = x.clone()
    op = A.ColorJitter(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.2)
    out = op.apply(x, draw(op, x)[1])
    assert torch.equal(x, before) and out.shape == x.shape


def test_color_jitter_clip_one_draw_for_all_frames() -> None:
    clips = torch.stack([images(3, 24, 32, seed=10 * b) for b in range(4)])  # (B, T, C, H, W)
    op = A.ColorJitter(brightness=0.5, saturation=0.5, hue=0.2)
    drawn, params = draw(op, clips)
    out = op.apply(clips, params)
    for t in range(3):
        assert torch.equal(out[:, t], op.apply(clips[:, t].contiguous(), params))


# -- grayscale, blur ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_random_grayscale_matches_torchvision(dtype) -> None:
    x = images(8)
    x = x if dtype == torch.uint8 else x.float() / 255
    op = A.RandomGrayscale(p=0.5)
    drawn, params = draw(op, x)
    assert any(d["gray"] for d in drawn) and not all(d["gray"] for d in drawn)
    out = op.apply(x, params)
    for i, d in enumerate(drawn):
        assert_matches(out[i], TF.rgb_to_grayscale(x[i], num_output_channels=3) if d["gray"] else x[i])


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_random_grayscale_extremes(p: float) -> None:
    x = images(4)
    op = A.RandomGrayscale(p=p)
    out = op.apply(x, draw(op, x)[1])
    if p:
        assert (out == out[:, :1]).all()
    else:
        assert torch.equal(out, x)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("kernel_size", [3, (7, 5)])
def test_gaussian_blur_matches_torchvision(dtype, kernel_size) -> None:
    x = images(5)
    x = x if dtype == torch.uint8 else x.float() / 255
    op = A.GaussianBlur(kernel_size, sigma=(0.3, 3.0))
    _, params = draw(op, x)
    out = op.apply(x, params)
    ks = [kernel_size] * 2 if isinstance(kernel_size, int) else list(kernel_size)
    for i in range(5):
        ref = TF.gaussian_blur(x[i], ks, [float(params["sigma"][i])] * 2)
        if dtype == torch.uint8:  # separable vs 2-D convolution: a .5 may round the other way
            assert (out[i].int() - ref.int()).abs().max() <= 1
        else:
            assert_matches(out[i], ref)


def test_gaussian_blur_clip_and_single_sample() -> None:
    clips = torch.stack([images(2, 20, 24, seed=b) for b in range(3)]).float()
    op = A.GaussianBlur(5, sigma=(0.5, 2.0))
    drawn, params = draw(op, clips)
    out = op.apply(clips, params)
    for b, d in enumerate(drawn):
        assert torch.allclose(op.apply(clips[b], d), out[b], atol=1e-5)  # one sample, plain params
        for t in range(2):
            ref = TF.gaussian_blur(clips[b, t], [5, 5], [float(params["sigma"][b])] * 2)
            torch.testing.assert_close(out[b, t], ref, atol=1e-4, rtol=0)


# -- fields, config, validation ---------------------------------------------------------------------------------
def test_keys_share_params_and_out_writes_new_field() -> None:
    x = images(4)
    op = A.ColorJitter(brightness=0.5, hue=0.2, keys=("image", "other"), out=("view1", "view2"))
    data = {"image": x, "other": x.clone()}
    op.apply_fields(data, draw(op, x)[1])
    assert torch.equal(data["view1"], data["view2"]) and not torch.equal(data["view1"], x)
    assert data["image"] is x


@pytest.mark.parametrize("op", [A.ColorJitter(0.1, (0.5, 1.5), 0.2, 0.05), A.GaussianBlur((3, 5), 1.0),
                                A.RandomGrayscale(0.3), A.Normalize(mean=(0.5,), std=(0.25,))])
def test_config_round_trip(op) -> None:
    assert op_from_config(op.to_config()) == op


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: A.ColorJitter(brightness=-0.1), "brightness"),
        (lambda: A.ColorJitter(contrast=(1.5, 0.5)), "contrast"),
        (lambda: A.ColorJitter(hue=0.6), "hue"),
        (lambda: A.ColorJitter(saturation=(1, 2, 3)), "saturation"),
        (lambda: A.RandomGrayscale(p=-0.1), "p=-0.1"),
        (lambda: A.GaussianBlur(4), "kernel_size"),
        (lambda: A.GaussianBlur(3, sigma=0.0), "sigma"),
        (lambda: A.GaussianBlur(3, sigma=(2.0, 1.0)), "sigma"),
        (lambda: A.Normalize(mean=(0.5, 0.5), std=(0.2,)), "std"),
        (lambda: A.Normalize(dtype="int3"), "int3"),
    ],
)
def test_argument_validation(make, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("flip", ["HorizontalFlip", "VerticalFlip"])
def test_normalize_that_does_the_flip_before_it_equals_flip_then_normalize(image_folder, flip):
    """On the CPU a flip right before Normalize is done by Normalize (one pass fewer): same bits."""
    import mediapipe as mp

    def pipeline(device: str, ops: list) -> mp.Pipeline:
        return mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()},
                           [A.RandomResizedCrop(40), *ops], batch_size=6, seed=2, device=device)

    flip_op = getattr(A, flip)(p=0.5)
    fused = pipeline("cpu", [flip_op, A.Normalize()])
    assert "done by [2] Normalize" in fused.plan.describe()
    # the same two ops with something between them are never fused: the reference
    unfused = pipeline("cpu", [flip_op, A.ToDtype("uint8", scale=False), A.Normalize()])
    assert "done by" not in unfused.plan.describe()
    flipped = 0
    for a, b in zip(fused.loader(num_workers=0), unfused.loader(num_workers=0)):
        assert torch.equal(a["image"], b["image"])
        flipped += 1
    assert flipped == 4
    keyed = pipeline("cpu", [getattr(A, flip)(keys=("image",)), A.Normalize(out="norm")])
    assert "done by" not in keyed.plan.describe()  # Normalize writing a new field leaves the flip alone


def test_normalize_mirror_kernel_matches_torchvision_on_each_sample():
    x = torch.randint(0, 256, (5, 3, 7, 9), dtype=torch.uint8)
    mirror = torch.tensor([True, False, True, True, False])
    mean, std = torch.tensor([0.4, 0.5, 0.6]), torch.tensor([0.2, 0.25, 0.3])
    out = FC.normalize(x, mean, std, mirror=mirror)
    for i in range(5):
        xi = TF.horizontal_flip(x[i]) if mirror[i] else x[i]
        ref = TF.normalize(TF.to_dtype(xi, torch.float32, scale=True), mean.tolist(), std.tolist())
        torch.testing.assert_close(out[i], ref, atol=1e-6, rtol=1e-6)


def test_color_jitter_on_a_device_reads_nothing_back_and_gives_the_host_values(monkeypatch):
    """On a device the jitter keeps each step's result with torch.where instead of counting the
    samples that drew it (a count read back makes the host wait): the same values as the host's
    gather/scatter path, and it runs on the meta device, where nothing can be read."""
    from mediapipe.augment.functional import color as FC

    gen = torch.Generator().manual_seed(3)
    x = torch.randint(0, 256, (6, 3, 20, 24), dtype=torch.uint8, generator=gen)
    order = torch.stack([torch.randperm(4, generator=gen) for _ in range(6)])
    factors = {"brightness": torch.rand(6, generator=gen) + 0.5, "contrast": torch.rand(6, generator=gen) + 0.5,
               "saturation": torch.rand(6, generator=gen) + 0.5, "hue": torch.rand(6, generator=gen) - 0.5}
    host = FC.color_jitter(x, order, **factors)
    from mediapipe.augment.functional import selected

    monkeypatch.setattr(selected, "on_host", lambda x, flags: False)  # the device's torch.where, here
    monkeypatch.setattr(FC, "on_host", lambda x, flags: False)
    where = FC.color_jitter(x, order, **factors)
    monkeypatch.undo()
    assert torch.equal(host, where)
    meta = FC.color_jitter(x.to("meta"), order.to("meta"), **{n: f.to("meta") for n, f in factors.items()})
    assert meta.device.type == "meta" and meta.shape == x.shape and meta.dtype == torch.uint8
