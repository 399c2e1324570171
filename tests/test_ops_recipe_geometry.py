"""RandomPerspective and ElasticTransform against torchvision v2 on the same parameters.

The draws are torchvision's own: its ``make_params`` runs with ``torch.randint`` (perspective's
corners) or ``torch.rand`` (elastic's noise) answering from our keyed draw, and what it computes
(the coefficients, the displacement field) must equal what our op drew. Then an image, its mask,
boxes (each format) and keypoints go through our op and through torchvision's functional on
``tv_tensors``: uint8 images and masks exact, float images within 1e-6, boxes and keypoints within
1e-4 px (torchvision moves them in float32, we in float64). Batches mix samples that warp and
samples that do not, with boxes as lists or padded, and clips.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch

from mediapipe import augment as A
from mediapipe.augment.base import op_from_config
from mediapipe.augment.functional.objects import convert_boxes
from mediapipe.fields import FieldType, boxes
from mediapipe.rng import op_rng
from mediapipe.stages.collate import TensorList, stack_params
from tests.helpers import H, W, assert_same, check, collect, image, sample, sample_types, tv

TF = pytest.importorskip("torchvision.transforms.v2.functional")
T = pytest.importorskip("torchvision.transforms.v2")
from torchvision import tv_tensors  # noqa: E402


def draw(op, seed: int, index: int = 0, size=(H, W)) -> dict:
    return op.sample_params(op_rng(seed, 0, index, 1), {"size": size, "shape": (3, *size)})


def tv_perspective_params(op, seed: int, index: int = 0, size=(H, W)) -> tuple[bool, list[float]]:
    """torchvision's own draw and coefficients, its torch.randint answering from our key."""
    rng = op_rng(seed, 0, index, 1)
    applied = rng.random() < op.p
    with mock.patch("torch.randint", lambda low, high, size: torch.tensor([rng.integers(low, high)])):
        params = T.RandomPerspective(op.distortion_scale, p=1.0).make_params([torch.zeros(3, *size)])
    return applied, params["coefficients"]


def tv_elastic_field(op, noise: np.ndarray) -> torch.Tensor:
    """torchvision's displacement field from our uniform draw (its torch.rand answering with it)."""
    planes = iter(torch.from_numpy(noise)[:, None, None])
    with mock.patch("torch.rand", lambda *args, **kwargs: next(planes)):
        return T.ElasticTransform(list(op.alpha), list(op.sigma)).make_params([torch.zeros(3, *noise.shape[1:])])[
            "displacement"]


def _fill(op, t):
    return 0 if isinstance(t, tv_tensors.Mask) else (list(op.fill) if isinstance(op.fill, tuple) else op.fill)


def _mode(op, t):
    return TF.InterpolationMode.NEAREST if isinstance(t, tv_tensors.Mask) else TF.InterpolationMode(op.interpolation)


def tv_perspective(op, applied: bool, coefficients: list[float]):
    return lambda t: TF.perspective(t, None, None, interpolation=_mode(op, t), fill=_fill(op, t),
                                    coefficients=coefficients) if applied else t


def tv_elastic(op, field: torch.Tensor):
    return lambda t: TF.elastic(t, field, interpolation=_mode(op, t), fill=_fill(op, t))


PERSPECTIVES = [A.RandomPerspective(p=1.0), A.RandomPerspective(0.8, p=1.0, interpolation="nearest", fill=17),
                A.RandomPerspective(0.3, p=1.0, fill=None), A.RandomPerspective(0.6, p=1.0, fill=(10, 200, 90))]
ELASTICS = [A.ElasticTransform(alpha=30.0, sigma=3.0), A.ElasticTransform(alpha=(60.0, 20.0), sigma=(2.0, 4.0),
                                                                          interpolation="nearest", fill=40),
            A.ElasticTransform(alpha=8.0, sigma=0.0, fill=None)]


# -- the draws are torchvision's -----------------------------------------------------------------------
@pytest.mark.parametrize("size", [(H, W), (31, 77), (224, 160)])
@pytest.mark.parametrize("distortion_scale", [0.0, 0.5, 1.0])
def test_perspective_draws_torchvisions_corners_and_coefficients(size, distortion_scale):
    op = A.RandomPerspective(distortion_scale, p=0.5)
    applied = []
    for seed in range(6):
        p = draw(op, seed, size=size)
        flag, coefficients = tv_perspective_params(op, seed, size=size)
        assert list(p["coefficients"]) == coefficients and p["apply"] == flag
        applied.append(flag)
    if distortion_scale == 0.0:  # no corner moves: the identity up to float32 rounding
        assert np.allclose(coefficients, [1, 0, 0, 0, 1, 0, 0, 0], atol=1e-5)


def test_perspective_applies_with_probability_p():
    op = A.RandomPerspective(p=0.3)
    flags = [draw(op, 0, index=i)["apply"] for i in range(2000)]
    assert abs(np.mean(flags) - 0.3) < 4 * np.sqrt(0.3 * 0.7 / 2000)  # within 4 standard errors


@pytest.mark.parametrize("op", ELASTICS)
def test_elastic_field_is_torchvisions_from_the_same_noise(op):
    for seed in range(3):
        noise = draw(op, seed)["noise"]
        assert noise.dtype == np.float32 and noise.shape == (2, H, W) and 0 <= noise.min() and noise.max() < 1
        assert torch.equal(op.field(torch.from_numpy(noise)[None])[0], tv_elastic_field(op, noise)[0])


# -- every kind of field, one sample -------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["xyxy", "xywh", "cxcywh"])
@pytest.mark.parametrize("case", range(len(PERSPECTIVES)))
def test_perspective_moves_every_kind_as_torchvision(case, fmt):
    op = PERSPECTIVES[case].bind(sample_types(fmt))
    assert op.inputs == ("image", "mask", "boxes", "points")
    for seed in range(3):
        data = sample(seed, fmt)
        ref_in = tv(data, fmt)
        p = draw(op, seed)
        op.apply_fields(data, p)
        fn = tv_perspective(op, *tv_perspective_params(op, seed))
        check(data, {k: fn(v) for k, v in ref_in.items()})


@pytest.mark.parametrize("fmt", ["xyxy", "xywh", "cxcywh"])
@pytest.mark.parametrize("case", range(len(ELASTICS)))
def test_elastic_moves_every_kind_as_torchvision(case, fmt):
    op = ELASTICS[case].bind(sample_types(fmt))
    for seed in range(3):
        data = sample(seed, fmt)
        ref_in = tv(data, fmt)
        p = draw(op, seed)
        op.apply_fields(data, p)
        fn = tv_elastic(op, tv_elastic_field(op, p["noise"]))
        check(data, {k: fn(v) for k, v in ref_in.items()})


@pytest.mark.parametrize("op", [PERSPECTIVES[0], ELASTICS[0]])
def test_float_images_match_torchvision(op):
    x = image(3).float() / 255
    p = draw(op, 3)
    out = op.apply(x, p)
    if isinstance(op, A.RandomPerspective):
        ref = tv_perspective(op, *tv_perspective_params(op, 3))(x)
    else:
        ref = tv_elastic(op, tv_elastic_field(op, p["noise"]))(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)


# -- batches: samples that warp and samples that do not, boxes listed or padded, clips --------------------
def _batch(samples: list[dict], collate: str) -> dict:
    batch = {k: torch.stack([s[k] for s in samples]) for k in ("image", "mask", "points")}
    if collate == "list":
        batch["boxes"] = TensorList(s["boxes"] for s in samples)
    else:
        lengths = torch.tensor([len(s["boxes"]) for s in samples])
        padded = torch.zeros(len(samples), int(lengths.max()), 4)
        for i, s in enumerate(samples):
            padded[i, : len(s["boxes"])] = s["boxes"]
        batch["boxes"], batch["boxes_lengths"] = padded, lengths
    return batch


@pytest.mark.parametrize("collate", ["list", "pad"])
@pytest.mark.parametrize("make", [lambda: A.RandomPerspective(0.7, p=0.5), lambda: ELASTICS[0]])
def test_batch_stage_moves_each_sample_as_torchvision(make, collate):
    types = sample_types("cxcywh" if collate == "list" else "xyxy")
    fmt = types["boxes"].format
    types["boxes"] = boxes(fmt, collate=collate)
    op = make().bind(types)
    samples = [sample(seed, fmt) for seed in range(6)]
    samples[2]["boxes"] = samples[2]["boxes"][:0]  # a sample without objects
    drawn = [draw(op, 9, index=i) for i in range(6)]
    if isinstance(op, A.RandomPerspective):
        assert 0 < sum(d["apply"] for d in drawn) < 6  # some warp, some do not
    batch = _batch(samples, collate)
    op.apply_fields(batch, stack_params(drawn))
    for i, (s, p) in enumerate(zip(samples, drawn)):
        if isinstance(op, A.RandomPerspective):
            fn = tv_perspective(op, *tv_perspective_params(op, 9, index=i))
        else:
            fn = tv_elastic(op, tv_elastic_field(op, p["noise"]))
        n = len(s["boxes"])
        ref = {k: fn(v) for k, v in tv(s, fmt).items()}
        ours = {"image": batch["image"][i], "mask": batch["mask"][i], "points": batch["points"][i],
                "boxes": batch["boxes"][i][:n]}
        check(ours, ref)
        if collate == "pad":
            assert batch["boxes_lengths"][i] == n and not batch["boxes"][i][n:].any()


@pytest.mark.parametrize("op", [A.RandomPerspective(p=0.5, fill=(5, 6, 7)), ELASTICS[1]])
def test_a_clip_moves_as_a_whole(op):
    clips = torch.stack([torch.stack([image(10 * b + t) for t in range(3)]) for b in range(4)])  # (B, T, C, H, W)
    op = op.bind({"video": FieldType("video")})
    drawn = [draw(op, 4, index=b) for b in range(4)]
    out = op.apply(clips, stack_params(drawn), "video")
    for b, p in enumerate(drawn):
        if isinstance(op, A.RandomPerspective):
            fn = tv_perspective(op, *tv_perspective_params(op, 4, index=b))
        else:
            fn = tv_elastic(op, tv_elastic_field(op, p["noise"]))
        assert torch.equal(out[b], fn(tv_tensors.Video(clips[b])).as_subclass(torch.Tensor))


def test_elastic_boxes_are_never_copied_per_row():
    """Each box reads its own sample's field, made once per batch: the rows' parameters are their
    sample numbers, not (rows, H, W, 2) copies of the field."""
    op = ELASTICS[0].bind(sample_types("xyxy"))
    samples = [sample(seed, "xyxy") for seed in range(3)]
    drawn = [draw(op, 1, index=i) for i in range(3)]
    batch = _batch(samples, "pad")
    seen = []
    real = A.recipe_geometry._ElasticRows.transform

    def spy(self, x, params, field, canvas_size):
        seen.append({k: tuple(v.shape) for k, v in params.items()})
        return real(self, x, params, field, canvas_size)

    with mock.patch.object(A.recipe_geometry._ElasticRows, "transform", spy):
        op.apply_fields(batch, stack_params(drawn))
    rows = sum(len(s["boxes"]) for s in samples)
    assert seen == [{"sample": (rows,)}, {"sample": (3 * 4,)}]  # the boxes, then the keypoints (4 per sample)


# -- in pipelines: workers, the batch stage's place, the meta device ----------------------------------------
OPS = [A.RandomResizedCrop(48, scale=(0.3, 1.0)), A.RandomPerspective(0.6, p=0.5), A.ElasticTransform(20.0, 2.0)]


def test_same_batches_with_0_or_2_workers_and_wherever_the_batch_stage_runs(image_folder):
    import mediapipe as mp

    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()}, OPS, batch_size=6, seed=3,
                       device="cpu")
    assert [p.op for p in pipe.plan.batch_ops][-2:] == OPS[1:]
    inline = collect(pipe.loader(num_workers=0))
    assert_same(inline, collect(pipe.loader(num_workers=2)))
    assert_same(inline, collect(pipe.loader(num_workers=2, batch_ops_in_workers=False)))
    assert len(inline) == 4 and not torch.equal(inline[0]["image"], inline[1]["image"])


def test_on_the_meta_device_nothing_is_read_back(image_folder):
    """On a device the batch ops never read a value back to the host (the meta device has none)."""
    import mediapipe as mp

    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()}, OPS, batch_size=6, seed=3,
                       device="meta")
    batch = next(iter(pipe.loader(num_workers=0)))
    assert batch["image"].device.type == "meta" and batch["image"].shape == (6, 3, 48, 48)
    assert batch["image"].dtype == torch.uint8


# -- config, arguments --------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", [*PERSPECTIVES, *ELASTICS])
def test_config_round_trip(op):
    assert op_from_config(op.to_config()) == op


@pytest.mark.parametrize(("make", "match"), [
    (lambda: A.RandomPerspective(1.5), "distortion_scale"),
    (lambda: A.RandomPerspective(p=-0.1), "p=-0.1"),
    (lambda: A.RandomPerspective(interpolation="bicubic"), "interpolation"),
    (lambda: A.RandomPerspective(fill=float("nan")), "fill"),
    (lambda: A.ElasticTransform(alpha=-1.0), "alpha"),
    (lambda: A.ElasticTransform(sigma=(0.0, 3.0)), "sigma"),
    (lambda: A.ElasticTransform(sigma=(1.0, 2.0, 3.0)), "sigma"),
    (lambda: A.ElasticTransform(interpolation="bicubic"), "interpolation"),
])
def test_arguments_are_checked_naming_the_op(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_an_image_too_small_for_the_elastic_blur_is_refused_when_drawn():
    op = A.ElasticTransform(sigma=5.0)  # 41 taps: 20 pixels reflected at each border
    with pytest.raises(ValueError, match=r"ElasticTransform\(sigma=\(5.0, 5.0\)\).*18x64"):
        draw(op, 0, size=(18, 64))
    assert draw(op, 0, size=(21, 64))["noise"].shape == (2, 21, 64)


def test_boxes_of_a_warp_land_where_their_pixels_go():
    """A bright square's box (and its centre as a keypoint) lands on the square's warped pixels."""
    types = {"image": FieldType("image"), "boxes": boxes(), "points": FieldType("keypoints")}
    op = A.RandomPerspective(0.5, p=1.0, interpolation="bilinear").bind(types)
    img = torch.zeros(1, 60, 80)
    img[0, 24:30, 34:40] = 1.0
    for seed in range(5):
        data = {"image": img.clone(), "boxes": torch.tensor([[34.0, 24.0, 40.0, 30.0]]),
                "points": torch.tensor([[37.0, 27.0]])}
        op.apply_fields(data, draw(op, seed, size=(60, 80)))
        out = data["image"][0]
        ys, xs = torch.meshgrid(torch.arange(60) + 0.5, torch.arange(80) + 0.5, indexing="ij")
        seen = torch.stack(((out * xs).sum() / out.sum(), (out * ys).sum() / out.sum()))
        torch.testing.assert_close(data["points"][0], seen, atol=0.3, rtol=0)
        box = convert_boxes(data["boxes"], "xyxy", "cxcywh")[0]
        torch.testing.assert_close(box[:2], seen, atol=0.3, rtol=0)


# -- DALI: warp_perspective with the keyed homographies -------------------------------------------------
@pytest.fixture(scope="module")
def png_folder(tmp_path_factory):
    """Lossless PNGs (both backends decode the same pixels): the warps are compared, not decoders."""
    from PIL import Image

    from mediapipe.synthetic import photo_like

    root = tmp_path_factory.mktemp("png") / "class0"
    root.mkdir()
    for i in range(8):
        Image.fromarray(photo_like(60 + 3 * i, 80 - 2 * i, 700 + i)).save(root / f"img{i}.png")
    return root.parent


@pytest.mark.parametrize("op", [A.RandomPerspective(p=1.0), A.RandomPerspective(0.7, p=0.5, fill=128),
                                A.RandomPerspective(0.6, p=1.0, interpolation="nearest", fill=17),
                                A.RandomPerspective(0.4, p=1.0, fill=None)])
def test_dali_warp_perspective_gives_the_torch_backends_pixels(png_folder, op):
    """DALI's warp_perspective on the keyed homographies, torchvision's border blend rebuilt around it:
    bilinear within one grey level, at rounding ties only; nearest takes another pixel (or the fill)
    where a sampling point falls on a pixel edge (measured: under 0.03% of the pixels either way)."""
    pytest.importorskip("nvidia.dali")
    import mediapipe as mp

    pipe = mp.Pipeline(mp.loaders.folder(png_folder), {"image": mp.decoders.image()}, [A.CenterCrop((52, 60)), op],
                       batch_size=4, seed=6, device="cpu")
    for a, b in zip(pipe.loader(backend="dali"), pipe.loader(backend="torch"), strict=True):
        assert torch.equal(a["index"], b["index"]) and a["image"].shape == b["image"].shape == (4, 3, 52, 60)
        diff = (a["image"].int() - b["image"].int()).abs()
        assert (diff > 0).float().mean() < 0.001, (diff > 0).float().mean()
        assert op.interpolation == "nearest" or diff.max() <= 1, diff.max()


def test_dali_refuses_the_elastic_transform_by_name(png_folder):
    pytest.importorskip("nvidia.dali")
    import mediapipe as mp
    from mediapipe.errors import PipelineError

    pipe = mp.Pipeline(mp.loaders.folder(png_folder), {"image": mp.decoders.image()},
                       [A.CenterCrop(48), A.ElasticTransform()], batch_size=4, device="cpu")
    with pytest.raises(PipelineError, match=r"augment\[1\] ElasticTransform"):
        pipe.loader(backend="dali")


def test_dali_warps_a_mask_with_its_image(tmp_path):
    """A mask follows its image's homography with nearest and fill 0, as on the torch backend."""
    pytest.importorskip("nvidia.dali")
    import json

    from PIL import Image

    import mediapipe as mp
    from mediapipe.synthetic import photo_like

    rows = []
    for i in range(4):
        photo = photo_like(60, 72, 40 + i)
        mask = ((photo.astype(int).sum(-1) > 380) * 255).astype(np.uint8)
        Image.fromarray(photo).save(tmp_path / f"{i}.png")
        Image.fromarray(mask).save(tmp_path / f"{i}_mask.png")
        rows.append({"path": f"{i}.png", "mask": f"{i}_mask.png", "label": 0})
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    pipe = mp.Pipeline(mp.loaders.manifest(tmp_path / "rows.jsonl"), device="cpu", batch_size=4, seed=1,
                       decode={"image": mp.decoders.image(), "mask": mp.decoders.mask()},
                       augment=[A.CenterCrop((52, 60)), A.RandomPerspective(0.7, p=1.0, fill=200)])
    a, b = next(iter(pipe.loader(backend="dali"))), next(iter(pipe.loader(backend="torch")))
    assert set(torch.unique(a["mask"]).tolist()) <= {0, 255} and (a["mask"] == 0).float().mean() > 0.1
    assert (a["mask"] != b["mask"]).float().mean() < 0.002  # nearest: another pixel only at ties
    assert (a["image"].int() - b["image"].int()).abs().max() <= 1


@pytest.mark.parametrize("op", [PERSPECTIVES[0], ELASTICS[0]])
def test_half_images_keep_their_dtype_and_are_not_rounded(op):
    """float16 is warped in float32 and cast back, never rounded to whole values as uint8 is."""
    x = image(5).float() / 255
    p = draw(op, 5)
    half = op.apply(x.half(), p)
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.float(), op.apply(x, p), atol=1e-3, rtol=0)


def test_elastic_on_images_of_several_sizes_runs_per_sample(image_folder):
    """Images batched as a list (several sizes): each sample's field is drawn on its own size, in
    the sample stage (main: the batch's fields could not be stacked, a bare numpy ValueError)."""
    import mediapipe as mp

    op = A.ElasticTransform(10.0, 1.0)

    def pipeline(ops):
        return mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()}, ops, batch_size=3,
                           seed=2, device="cpu", collate={"image": "list"})

    pipe = pipeline([op])
    assert pipe.plan.placed[0].stage is A.Stage.SAMPLE
    warped = next(iter(pipe.loader(num_workers=0, shuffle=False)))
    plain = next(iter(pipeline([]).loader(num_workers=0, shuffle=False)))
    assert len({tuple(x.shape) for x in plain["image"]}) > 1
    for x, raw, index in zip(warped["image"], plain["image"], warped["index"].tolist()):
        meta = {"size": tuple(raw.shape[-2:]), "shape": tuple(raw.shape)}
        assert torch.equal(x, op.apply(raw, op.sample_params(op_rng(2, 0, index, 0), meta)))
