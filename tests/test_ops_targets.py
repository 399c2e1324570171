"""Geometric ops on every kind of field against torchvision v2 on the same parameters.

An image, its mask, boxes (each format) and keypoints go through one op with one draw; each is
compared with torchvision's functional on ``tv_tensors`` of the same kind: boxes and keypoints
within 1e-4 px, masks exact, images as in test_ops_geometry (exact, or 1 grey level for a
resize). Batch-stage ops run on a batch whose boxes are a list or padded, and on a clip.
"""

from __future__ import annotations

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from torchvision import tv_tensors

from mediapipe import augment as A
from mediapipe.augment.functional.objects import convert_boxes
from mediapipe.fields import FieldType, boxes, keypoints
from mediapipe.stages.collate import TensorList, stack_params
from tests.helpers import (
    BATCH_CASES,
    SAMPLE_CASES,
    H,
    W,
    check,
    draw,
    image,
    sample,
    sample_types,
    some_boxes,
    tv,
    tv_rotate,
)


@pytest.mark.parametrize("fmt", ["xyxy", "xywh", "cxcywh"])
@pytest.mark.parametrize("case", range(len(SAMPLE_CASES)))
def test_sample_stage_ops_move_every_kind_as_torchvision(case, fmt) -> None:
    op, oracle, levels = SAMPLE_CASES[case]
    op = op.bind(sample_types(fmt))
    assert op.inputs == ("image", "mask", "boxes", "points")
    for seed in range(3):
        data = sample(seed, fmt)
        ref_in = tv(data, fmt)
        p = draw(op, seed)
        op.apply_fields(data, p)
        fn = oracle(op, p)
        check(data, {k: fn(v) for k, v in ref_in.items()}, levels)


@pytest.mark.parametrize("fmt", ["xyxy", "cxcywh"])
@pytest.mark.parametrize("collate", ["list", "pad"])
@pytest.mark.parametrize("case", range(len(BATCH_CASES)))
def test_batch_stage_ops_move_every_kind_as_torchvision(case, collate, fmt) -> None:
    op, oracle = BATCH_CASES[case]
    types = sample_types(fmt)
    types["boxes"] = boxes(fmt, collate=collate)
    op = op.bind(types)
    samples = [sample(seed, fmt) for seed in range(4)]
    samples[2]["boxes"] = samples[2]["boxes"][:0]  # a sample without objects
    drawn = [draw(op, 9, index=i) for i in range(4)]
    batch = {"image": torch.stack([s["image"] for s in samples]), "mask": torch.stack([s["mask"] for s in samples]),
             "points": torch.stack([s["points"] for s in samples])}
    if collate == "list":
        batch["boxes"] = TensorList(s["boxes"] for s in samples)
    else:
        lengths = torch.tensor([len(s["boxes"]) for s in samples])
        padded = torch.zeros(4, int(lengths.max()), 4)
        for i, s in enumerate(samples):
            padded[i, : len(s["boxes"])] = s["boxes"]
        batch["boxes"], batch["boxes_lengths"] = padded, lengths
    op.apply_fields(batch, stack_params(drawn))
    for i, (s, p) in enumerate(zip(samples, drawn)):
        fn = oracle(op, p)
        ref = {k: fn(v) for k, v in tv(s, fmt).items()}
        n = len(s["boxes"])
        ours = {"image": batch["image"][i], "mask": batch["mask"][i], "points": batch["points"][i],
                "boxes": batch["boxes"][i][:n]}
        check(ours, ref, image_levels=int(op.interpolation == "bilinear") if hasattr(op, "interpolation") else 0)
        if collate == "pad":  # padding stays zero
            assert batch["boxes_lengths"][i] == n and not batch["boxes"][i][n:].any()


def test_rotation_with_expand_puts_boxes_where_the_pixels_go() -> None:
    """With ``expand`` the image grows and its turned content is centred in it. A small bright
    square's box (and its centre as a keypoint) must land where the square's pixels land:
    torchvision's boxes under expand shift to the turned canvas's corner instead, up to a pixel
    off its own image (and its canvas_size may differ from the image's): compared within 1 px."""
    types = {"image": FieldType("image"), "boxes": boxes(), "points": keypoints()}
    op = A.RandomRotation(60, expand=True, interpolation="bilinear").bind(types)
    assert op.placement() is A.Stage.SAMPLE
    x0, y0 = 20, 10
    img = torch.zeros(1, H, W)
    img[0, y0 : y0 + 4, x0 : x0 + 4] = 1.0
    box = torch.tensor([[x0, y0, x0 + 4.0, y0 + 4.0]])
    centre = torch.tensor([[x0 + 2.0, y0 + 2.0]])
    for seed in range(6):
        p = draw(op, seed)
        data = {"image": img.clone(), "boxes": box.clone(), "points": centre.clone()}
        op.apply_fields(data, p)
        out = data["image"][0]
        ys, xs = torch.meshgrid(torch.arange(out.shape[0]) + 0.5, torch.arange(out.shape[1]) + 0.5, indexing="ij")
        seen = torch.stack(((out * xs).sum() / out.sum(), (out * ys).sum() / out.sum()))
        torch.testing.assert_close(data["points"][0], seen, atol=0.05, rtol=0)  # where the pixels went
        b = data["boxes"][0]
        torch.testing.assert_close((b[:2] + b[2:]) / 2, seen, atol=0.05, rtol=0)
        ref = TF.rotate(tv_tensors.BoundingBoxes(box, format="XYXY", canvas_size=(H, W)), float(p["angle"]),
                        expand=True)
        torch.testing.assert_close(b, ref[0].as_subclass(torch.Tensor), atol=1.0, rtol=0)


@pytest.mark.parametrize("fmt", ["xyxy", "xywh"])
def test_rotation_with_expand_moves_masks_and_images_as_torchvision(fmt) -> None:
    op = A.RandomRotation(50, expand=True, interpolation="bilinear").bind(sample_types(fmt))
    for seed in range(4):
        data = sample(seed, fmt)
        ref_in = tv(data, fmt)
        p = draw(op, seed)
        op.apply_fields(data, p)
        ref = {k: tv_rotate(op, p)(v) for k, v in ref_in.items()}
        assert torch.equal(data["mask"], ref["mask"].as_subclass(torch.Tensor))
        assert (data["image"].int() - ref["image"].as_subclass(torch.Tensor).int()).abs().max() <= 1
        canvas = data["image"].shape[-2:]
        b = convert_boxes(data["boxes"], fmt, "xyxy")
        assert (b[:, 0::2] >= 0).all() and (b[:, 0::2] <= canvas[1]).all() and (b[:, 1::2] <= canvas[0]).all()


def test_a_clip_and_its_boxes_move_as_one() -> None:
    types = {"video": FieldType("video"), "boxes": boxes()}
    clip = torch.stack([image(s) for s in range(3)])  # (T, C, H, W)
    bx = some_boxes(1)
    for op in (A.RandomResizedCrop(24, scale=(0.3, 1.0)), A.Pad(2), A.CenterCrop(30)):
        op = op.bind(types)
        p = draw(op, 4)
        data = {"video": clip.clone(), "boxes": bx.clone()}
        op.apply_fields(data, p)
        single = op.bind({"image": FieldType("image"), "boxes": boxes()})
        for t in range(3):  # every frame as the image alone, the boxes as with that image
            alone = {"image": clip[t], "boxes": bx.clone()}
            single.apply_fields(alone, p)
            assert torch.equal(data["video"][t], alone["image"])
            torch.testing.assert_close(data["boxes"], alone["boxes"])
    flip = A.HorizontalFlip(p=1.0).bind(types)
    clips = torch.stack([clip, clip.flip(0)])  # a batch of two clips
    data = {"video": clips, "boxes": TensorList([bx, bx[:2]])}
    flip.apply_fields(data, stack_params([{"flip": True}, {"flip": False}]))
    assert torch.equal(data["video"][0], clips[0].flip(-1)) and torch.equal(data["video"][1], clips[1])
    ref = TF.horizontal_flip(tv_tensors.BoundingBoxes(bx, format="XYXY", canvas_size=(H, W)))
    torch.testing.assert_close(data["boxes"][0], ref.as_subclass(torch.Tensor))
    torch.testing.assert_close(data["boxes"][1], bx[:2])


@pytest.mark.parametrize("op", [A.Pad(3, padding_mode="reflect"), A.RandomCrop(40, padding=2, padding_mode="edge")])
def test_padding_modes_that_mirror_pixels_refuse_boxes(op) -> None:
    from mediapipe.errors import PipelineError

    op.bind({"image": FieldType("image"), "mask": FieldType("mask")})  # pixels alone: fine
    with pytest.raises(PipelineError, match=r"cannot transform field 'boxes' of kind boxes \(xyxy\).*padding_mode"):
        op.bind(sample_types("xyxy"), where="augment[0] ")


def test_each_kind_has_one_kernel_per_functional_named_after_it() -> None:
    from mediapipe.augment.functional import spatial
    from mediapipe.augment.functional.dispatch import Functional, register_kernel

    for functional in (spatial.hflip, spatial.vflip, spatial.resize, spatial.crop, spatial.resized_crop, spatial.pad,
                       spatial.affine):
        assert functional.kinds == {"image", "video", "mask", "boxes", "keypoints"}
        for kind in ("mask", "boxes", "keypoints"):  # images and videos share the image kernel
            assert functional.kernel(kind).__name__ == f"{functional.name}_{kind}"
        assert functional.kernel("video").__name__ == f"{functional.name}_image"
    with pytest.raises(ValueError, match="hflip already has a kernel for 'boxes': hflip_boxes"):
        register_kernel(spatial.hflip, "boxes")(lambda x, **kw: x)
    with pytest.raises(ValueError, match="unknown kind"):
        register_kernel(spatial.hflip, "pointcloud")
    blur = Functional("blur")
    register_kernel(blur, "image")(lambda x, sigma: x * sigma)
    assert blur(torch.ones(2), 3.0, kind="image").tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match=r"blur has no kernel for 'mask' fields; it transforms \['image'\]"):
        blur(torch.ones(2), 3.0, kind="mask")


def test_an_op_gains_a_kind_when_a_kernel_is_registered_for_it() -> None:
    from mediapipe.augment.functional.dispatch import Functional, register_kernel
    from mediapipe.errors import PipelineError

    shift = Functional("shift")
    register_kernel(shift, "image")(lambda x, by, **_: x + by)

    class _Shift(A.Op):  # (a leading underscore keeps it out of the op registry)
        functional = shift

        def transform(self, x, params, field, canvas_size):
            return shift(x, 1, kind=field.kind)

    Shift = _Shift
    types = {"image": FieldType("image"), "mask": FieldType("mask")}
    assert Shift().bind(types).inputs == ("image",)
    with pytest.raises(PipelineError, match="_Shift cannot transform field 'mask' of kind mask"):
        Shift(keys=("image", "mask")).bind(types)
    register_kernel(shift, "mask")(lambda x, by, **_: x)  # masks do not shift
    assert Shift().bind(types).inputs == ("image", "mask")
    data = {"image": torch.zeros(1, 2, 2), "mask": torch.zeros(1, 2, 2)}
    Shift().bind(types).apply_fields(data, {})
    assert data["image"].sum() == 4 and data["mask"].sum() == 0
