"""Geometry ops against torchvision.transforms.v2.functional, applied per sample with the same params.

Tolerances: crops, pads, flips and the affine warps (rotation, affine) are exact on uint8
(same grids, same rounding); resizes allow 1 grey level.
"""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from torchvision.transforms import InterpolationMode

from mediapipe import augment as A
from mediapipe.augment.base import Stage, op_from_config
from mediapipe.fields import FieldType
from mediapipe.rng import SampleRNG
from mediapipe.stages.collate import stack_params
from mediapipe.synthetic import photo_like


def images(n: int = 6, height: int = 48, width: int = 64, seed: int = 0) -> torch.Tensor:
    """(n, 3, height, width) uint8 photographic-looking images."""
    return torch.stack([torch.from_numpy(photo_like(height, width, seed + i)).permute(2, 0, 1) for i in range(n)])


def draw(op: A.Op, x: torch.Tensor, op_index: int = 1, seed: int = 0) -> tuple[list[dict], dict]:
    """Each sample's params (as the graph draws them) and the params stacked over the batch."""
    meta = {"size": tuple(x.shape[-2:]), "shape": tuple(x.shape[1:])}
    drawn = [op.sample_params(SampleRNG(seed, 0, i, op_index), meta) for i in range(x.shape[0])]
    return drawn, stack_params(drawn)


def assert_close_uint8(out: torch.Tensor, ref: torch.Tensor, max_diff: int = 0) -> None:
    assert out.shape == ref.shape and out.dtype == ref.dtype
    diff = (out.int() - ref.int()).abs().max().item()
    assert diff <= max_diff, f"max abs diff {diff} > {max_diff}"


# -- sample-stage ops (one sample at a time) -----------------------------------------------------------
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest"])
def test_random_resized_crop_matches_torchvision(interpolation: str) -> None:
    x = images(4, 60, 80)
    op = A.RandomResizedCrop((24, 32), scale=(0.1, 1.0), interpolation=interpolation)
    drawn, _ = draw(op, x)
    mode = InterpolationMode(interpolation)
    for i, p in enumerate(drawn):
        out = op.apply(x[i], p)
        ref = TF.resized_crop(x[i], p["top"], p["left"], p["height"], p["width"], [24, 32], mode, antialias=True)
        assert_close_uint8(out, ref, max_diff=1)


def test_random_resized_crop_params_stay_inside_and_fall_back() -> None:
    op = A.RandomResizedCrop(16, scale=(0.08, 1.0))
    for i in range(200):
        p = op.sample_params(SampleRNG(1, 0, i, 0), {"size": (30, 90)})
        assert 0 <= p["top"] and p["top"] + p["height"] <= 30
        assert 0 <= p["left"] and p["left"] + p["width"] <= 90
    # a ratio range the image cannot hold: torchvision's fallback, a central crop with the ratio clamped
    op = A.RandomResizedCrop(16, scale=(0.99, 1.0), ratio=(5.0, 6.0))
    p = op.sample_params(SampleRNG(1, 0, 0, 0), {"size": (100, 100)})
    assert p == {"top": 40, "left": 0, "height": 20, "width": 100}


@pytest.mark.parametrize(("size", "max_size"), [(32, None), ((20, 50), None), (None, 40), (30, 45)])
def test_resize_matches_torchvision(size, max_size) -> None:
    x = images(2, 48, 80)
    op = A.Resize(size, max_size=max_size)
    for i in range(2):
        p = op.sample_params(SampleRNG(0, 0, i, 0), {"size": (48, 80)})
        out = op.apply(x[i], p)
        tv_size = None if size is None else ([size] if isinstance(size, int) else list(size))
        ref = TF.resize(x[i], tv_size, max_size=max_size, antialias=True)
        assert_close_uint8(out, ref, max_diff=1)


def test_resize_tall_image_and_max_size_cap() -> None:
    op = A.Resize(32, max_size=50)
    assert op.output_size(100, 40) == (50, 20)  # shorter side 32 would make the longer 80 > 50
    assert A.Resize(None, max_size=64).output_size(100, 40) == (64, 25)


@pytest.mark.parametrize("size", [(24, 30), (60, 90)])  # the second pads: larger than the image
def test_center_crop_matches_torchvision(size) -> None:
    x = images(2, 48, 64)
    op = A.CenterCrop(size)
    for i in range(2):
        out = op.apply(x[i], op.sample_params(SampleRNG(0, 0, i, 0), {"size": (48, 64)}))
        assert torch.equal(out, TF.center_crop(x[i], list(size)))


@pytest.mark.parametrize("padding_mode", ["constant", "edge", "reflect", "symmetric"])
@pytest.mark.parametrize("padding", [3, (2, 5), (1, 2, 3, 4)])
def test_pad_matches_torchvision(padding, padding_mode: str) -> None:
    x = images(1, 20, 24)[0]
    op = A.Pad(padding, fill=7, padding_mode=padding_mode)
    tv_padding = [padding] if isinstance(padding, int) else list(padding)
    ref = TF.pad(x, tv_padding, fill=7, padding_mode=padding_mode)
    assert torch.equal(op.apply(x, {}), ref)


@pytest.mark.parametrize(
    ("kwargs", "hw"),
    [
        ({}, (48, 64)),
        ({"padding": 4, "padding_mode": "reflect"}, (48, 64)),
        ({"padding": (1, 2, 3, 4), "fill": 9}, (48, 64)),
        ({"pad_if_needed": True, "padding_mode": "edge"}, (20, 28)),  # smaller than the crop
    ],
)
def test_random_crop_matches_torchvision(kwargs, hw) -> None:
    x = images(5, *hw)
    op = A.RandomCrop((32, 40), **kwargs)
    drawn, _ = draw(op, x)
    for i, p in enumerate(drawn):
        ref = x[i]
        if any(p["padding"]):
            ref = TF.pad(ref, list(p["padding"]), fill=op.fill, padding_mode=op.padding_mode)
        ref = TF.crop(ref, p["top"], p["left"], 32, 40)
        assert torch.equal(op.apply(x[i], p), ref)
    assert len({(p["top"], p["left"]) for p in drawn}) > 1  # positions are drawn per sample


def test_random_crop_too_large_without_padding_raises() -> None:
    with pytest.raises(ValueError, match="pad_if_needed"):
        A.RandomCrop(64).sample_params(SampleRNG(0, 0, 0, 0), {"size": (48, 64)})


def test_random_crop_hint_only_without_padding() -> None:
    op = A.RandomCrop(16)
    p = op.sample_params(SampleRNG(0, 0, 0, 0), {"size": (48, 64)})
    assert op.decode_hint(p, {}).roi == (p["top"], p["left"], 16, 16)
    padded = A.RandomCrop(16, padding=2)
    assert padded.decode_hint(padded.sample_params(SampleRNG(0, 0, 0, 0), {"size": (48, 64)}), {}) is None


# -- flips (batch stage) ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("op_cls", "tv_flip"), [(A.HorizontalFlip, TF.horizontal_flip),
                                                 (A.VerticalFlip, TF.vertical_flip)])
def test_flips_match_torchvision_per_sample(op_cls, tv_flip) -> None:
    x = images(8)
    before = x.clone()
    op = op_cls(p=0.5)
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    flags = [p["flip"] for p in drawn]
    assert any(flags) and not all(flags)  # the batch mixes flipped and unflipped samples
    for i, flip in enumerate(flags):
        assert torch.equal(out[i], tv_flip(x[i]) if flip else x[i])
    assert torch.equal(x, before)  # the kernel is pure


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_flip_probability_extremes(p: float) -> None:
    x = images(6)
    op = A.HorizontalFlip(p=p)
    drawn, params = draw(op, x)
    assert all(d["flip"] == bool(p) for d in drawn)
    assert torch.equal(op.apply(x, params), x.flip(-1) if p else x)


def test_flip_rate_is_near_p() -> None:
    op = A.HorizontalFlip(p=0.3)
    rate = sum(op.sample_params(SampleRNG(0, 0, i, 0), {})["flip"] for i in range(2000)) / 2000
    assert 0.26 < rate < 0.34


def test_flip_clip_flips_every_frame_alike() -> None:
    clips = torch.stack([images(3, 16, 20, seed=10 * b) for b in range(4)])  # (B, T, C, H, W)
    op = A.HorizontalFlip(p=0.5)
    drawn, params = draw(op, clips)
    out = op.apply(clips, params)
    for b, p in enumerate(drawn):
        assert torch.equal(out[b], clips[b].flip(-1) if p["flip"] else clips[b])


def test_batch_op_runs_on_one_sample_with_plain_params() -> None:
    # when a later sample-stage op reads its output, a batch-stage op is placed in the sample stage
    x = images(4)
    op = A.HorizontalFlip(p=0.5)
    drawn, params = draw(op, x)
    batch = op.apply(x, params)
    for i, p in enumerate(drawn):
        assert torch.equal(op.apply(x[i], p), batch[i])


# -- rotation and affine (batch stage, one grid_sample) -------------------------------------------------------
def _tv_rotate(img, p, op):
    return TF.rotate(img, float(p["angle"]), interpolation=InterpolationMode(op.interpolation), expand=op.expand,
                     center=list(op.center) if op.center else None,
                     fill=list(op.fill) if isinstance(op.fill, tuple) else op.fill)


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize(("center", "fill"), [(None, 0), ((10.0, 20.0), (10, 200, 30)), (None, None)])
def test_random_rotation_matches_torchvision(interpolation, center, fill) -> None:
    x = images(6)
    op = A.RandomRotation(45, interpolation=interpolation, center=center, fill=fill)
    assert op.placement() is Stage.BATCH
    _, params = draw(op, x)
    out = op.apply(x, params)
    for i in range(6):
        # the kernel sees the float32 stacked angle: give torchvision the same number
        assert_close_uint8(out[i], _tv_rotate(x[i], {"angle": params["angle"][i]}, op))


def test_random_rotation_float_input() -> None:
    x = images(3).float() / 255
    op = A.RandomRotation((-90, 90), interpolation="bilinear")
    _, params = draw(op, x)
    out = op.apply(x, params)
    for i in range(3):
        torch.testing.assert_close(out[i], _tv_rotate(x[i], {"angle": params["angle"][i]}, op), atol=1e-5, rtol=0)


def test_random_rotation_expand_runs_per_sample() -> None:
    x = images(2, 30, 50)
    op = A.RandomRotation(60, expand=True, interpolation="bilinear")
    assert op.placement() is Stage.SAMPLE
    for i in range(2):
        p = op.sample_params(SampleRNG(0, 0, i, 0), {"size": (30, 50)})
        ref = TF.rotate(x[i], float(torch.tensor(p["angle"], dtype=torch.float32)), InterpolationMode.BILINEAR,
                        expand=True, fill=0)
        out = op.apply(x[i], p)
        assert out.shape != x[i].shape
        assert_close_uint8(out, ref)


def test_random_affine_matches_torchvision() -> None:
    x = images(6)
    op = A.RandomAffine(30, translate=(0.2, 0.1), scale=(0.7, 1.3), shear=(-10, 10, -5, 5),
                        interpolation="bilinear", fill=(5, 50, 250))
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    assert len({d["translate_x"] for d in drawn}) > 1
    for i in range(6):
        q = {k: v[i].item() for k, v in params.items()}
        ref = TF.affine(x[i], angle=q["angle"], translate=[q["translate_x"], q["translate_y"]], scale=q["scale"],
                        shear=[q["shear_x"], q["shear_y"]], interpolation=InterpolationMode.BILINEAR,
                        fill=[5, 50, 250])
        assert_close_uint8(out[i], ref)


def test_random_affine_nearest_with_center_and_x_shear() -> None:
    x = images(4)
    op = A.RandomAffine(10, shear=20, center=(5.0, 7.0))
    _, params = draw(op, x)
    out = op.apply(x, params)
    assert (params["shear_y"] == 0).all()
    for i in range(4):
        q = {k: v[i].item() for k, v in params.items()}
        ref = TF.affine(x[i], angle=q["angle"], translate=[0, 0], scale=1.0, shear=[q["shear_x"], 0.0],
                        center=[5.0, 7.0])
        assert_close_uint8(out[i], ref)


@pytest.mark.parametrize("op", [A.RandomRotation(40, interpolation="bilinear"),
                                A.RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2))])
def test_warps_apply_one_transform_per_clip(op) -> None:
    clips = torch.stack([images(3, 24, 32, seed=10 * b) for b in range(4)])  # (B, T, C, H, W)
    _, params = draw(op, clips)
    out = op.apply(clips, params)
    assert out.shape == clips.shape
    for t in range(3):  # frame t of every clip equals a batch of frames t under the same params
        assert torch.equal(out[:, t], op.apply(clips[:, t].contiguous(), params))


def test_identity_rotation_is_exact() -> None:
    x = images(3)
    op = A.RandomRotation((0, 0), interpolation="bilinear")
    assert torch.equal(op.apply(x, draw(op, x)[1]), x)


# -- fields, config, validation --------------------------------------------------------------------------------
def test_keys_share_params_across_fields() -> None:
    x = images(4)
    op = A.RandomRotation(30, keys=("image", "mask"))
    _, params = draw(op, x)
    data = {"image": x, "mask": x.clone()}
    op.apply_fields(data, params)
    assert not torch.equal(data["image"], x)
    assert torch.equal(data["image"], data["mask"])


IMAGE_AND_MASK = {"image": FieldType("image"), "mask": FieldType("mask")}


def test_a_mask_is_warped_with_nearest_and_zero_fill_because_it_is_a_mask() -> None:
    x = images(4)
    mask = (x[:, :1] > 128).to(torch.uint8) * 3  # class ids 0 and 3
    op = A.RandomAffine(25, scale=(0.8, 1.2), interpolation="bilinear", fill=100).bind(IMAGE_AND_MASK)
    assert op.inputs == ("image", "mask")
    _, params = draw(op, x)
    data = {"image": x, "mask": mask}
    op.apply_fields(data, params)
    nearest = A.RandomAffine(25, scale=(0.8, 1.2), interpolation="nearest", fill=0)
    assert torch.equal(data["mask"], nearest.apply(mask, params))
    assert set(data["mask"].unique().tolist()) <= {0, 3}  # no blended class ids
    assert torch.equal(data["image"], op.apply(x, params))


@pytest.mark.parametrize("op", [A.RandomResizedCrop(24), A.Resize((20, 30))])
def test_a_mask_is_resized_with_nearest(op) -> None:
    op = op.bind(IMAGE_AND_MASK)
    x = images(1, 48, 64)[0]
    mask = (x[:1] > 128).to(torch.uint8) * 7
    p = op.sample_params(SampleRNG(0, 0, 0, 0), {"size": (48, 64)})
    data = {"image": x, "mask": mask}
    op.apply_fields(data, p)
    assert torch.equal(data["image"], op.apply(x, p))  # the image keeps bilinear
    assert set(data["mask"].unique().tolist()) <= {0, 7}
    if isinstance(op, A.Resize):
        assert torch.equal(data["mask"], TF.resize(mask, [20, 30], InterpolationMode.NEAREST))
    else:
        ref = TF.resized_crop(mask, p["top"], p["left"], p["height"], p["width"], [24, 24], InterpolationMode.NEAREST)
        assert torch.equal(data["mask"], ref)
    assert op.fusable(FieldType("image")) and not op.fusable(FieldType("mask"))  # a mask's decoder never smooths it


def test_out_writes_a_new_field() -> None:
    x = images(4)
    op = A.VerticalFlip(p=1.0, out="view2")
    data = {"image": x}
    op.apply_fields(data, draw(op, x)[1])
    assert data["image"] is x and torch.equal(data["view2"], x.flip(-2))
    assert op.writes() == ("view2",)


@pytest.mark.parametrize("op", [A.RandomCrop(32, padding=(1, 2)), A.Pad((1, 2, 3, 4), padding_mode="edge"),
                                A.RandomRotation(15, fill=(1, 2, 3)),
                                A.RandomAffine(5, translate=(0.1, 0.2), shear=(1, 2, 3, 4))])
def test_config_round_trip(op) -> None:
    assert op_from_config(op.to_config()) == op


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: A.RandomCrop(0), "size"),
        (lambda: A.RandomCrop(8, padding=-1), "padding"),
        (lambda: A.RandomCrop(8, padding_mode="wrap"), "padding_mode"),
        (lambda: A.Pad((1, 2, 3)), "padding"),
        (lambda: A.Pad(1, fill=(1, 2)), "fill"),
        (lambda: A.RandomRotation(-5), "degrees"),
        (lambda: A.RandomRotation((10, -10)), "degrees"),
        (lambda: A.RandomRotation(5, interpolation="bicubic"), "interpolation"),
        (lambda: A.RandomRotation(5, center=(1.0,)), "center"),
        (lambda: A.RandomAffine(5, translate=(0.5, 1.5)), "translate"),
        (lambda: A.RandomAffine(5, scale=(0.0, 1.0)), "scale"),
        (lambda: A.RandomAffine(5, shear=(1, 2, 3)), "shear"),
        (lambda: A.HorizontalFlip(p=1.5), "p=1.5"),
        (lambda: A.RandomResizedCrop(8, scale=(0.5, 0.1)), "scale"),
        (lambda: A.Resize(None), "max_size"),
    ],
)
def test_argument_validation(make, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


# -- a fractional box (a crop drawn on the full image, seen on a DCT-reduced decode) -------------------
def _triangle_resample(x: torch.Tensor, box: tuple[float, float, float, float], size: tuple[int, int]) -> torch.Tensor:
    """The definition, in float64: output sample i of an axis sits at start + (i + 0.5) * scale and
    averages the pixels within one scale of it (pixel centres at x + 0.5), weighted by a triangle
    of half-width max(scale, 1) - torchvision's antialiased bilinear, placed at fractional coordinates."""
    def weights(start: float, length: float, out: int, extent: int) -> torch.Tensor:
        scale = length / out
        support = max(scale, 1.0)
        centres = start + (torch.arange(out, dtype=torch.float64) + 0.5) * scale
        pixels = torch.arange(extent, dtype=torch.float64) + 0.5
        w = (1 - (pixels[None, :] - centres[:, None]).abs() / support).clamp(min=0)
        return w / w.sum(1, keepdim=True)

    top, left, height, width = box
    wy = weights(top, height, size[0], x.shape[-2])
    wx = weights(left, width, size[1], x.shape[-1])
    return torch.einsum("ih,chw,jw->cij", wy, x.double(), wx)


@pytest.mark.parametrize("box", [(10.5, 3.25, 200.5, 150.75), (0.5, 0.25, 180.0, 230.5), (33.75, 47.5, 131.25, 160.0)])
def test_a_fractional_box_is_resampled_where_it_lies(box) -> None:
    from mediapipe.augment.functional import geometry as G

    x = images(1, 240, 280, seed=3)[0]
    size = (56, 64)
    got = G.resize_box(x, box, size)
    expected = _triangle_resample(x, box, size)
    # inside, the grid is within 1/32 output pixel of the box (the borders may see the pixels
    # just outside the box, which a crop would cut off); uint8 rounding and torch's fixed-point
    # weights add about half a level
    inner = (got.double() - expected)[:, 1:-1, 1:-1]
    assert inner.abs().mean() < 0.6 and inner.abs().max() <= 6
    # against the box rounded to whole pixels, which the old fused path resampled
    rounded = G.resized_crop_image(x, round(box[0]), round(box[1]), round(box[2]), round(box[3]), size)
    assert (rounded.double() - expected)[:, 1:-1, 1:-1].abs().mean() > 2 * inner.abs().mean()


def test_an_integer_box_is_the_crop_and_resize() -> None:
    from mediapipe.augment.functional import geometry as G

    x = images(1, 120, 160, seed=4)[0]
    expected = TF.resized_crop(x, 7, 9, 90, 100, [40, 48], antialias=True)
    assert torch.equal(G.resize_box(x, (7.0, 9.0, 90.0, 100.0), (40, 48)), expected)


def test_axis_windows_reach_the_box_near_the_edge_too() -> None:
    from mediapipe.augment.functional import geometry as G

    rng = torch.Generator().manual_seed(0)
    missed = 0
    for _ in range(300):  # boxes of whole full-resolution pixels, on a decode at 1/2 scale
        extent = int(torch.randint(200, 1300, (1,), generator=rng))
        length = float(torch.randint(100, extent, (1,), generator=rng)) / 2
        start = float(torch.randint(0, 2 * int(extent / 2 - length) + 1, (1,), generator=rng)) / 2
        window = G.axis_window(start, length, 64, -(-extent // 2))
        assert window.first + window.skip * window.scale == pytest.approx(start, abs=window.error * window.scale + 1e-9)
        missed += window.error > G.BOX_TOLERANCE  # plan_decode then decodes at a larger scale
    assert missed < 15  # a scale of a whole number of pixels cannot reach a half-pixel start
    near_edge = G.axis_window(0.5, 300.0, 64, 400)  # half a pixel in: the grid starts before the image
    assert near_edge.first < 0 and near_edge.error <= G.BOX_TOLERANCE
