"""Detection ops against torchvision v2 on the same parameters, and the laws of their draws.

Each geometric op moves an image, its mask, one mask per object, boxes (each format) and
keypoints with one draw; each is compared with torchvision's functional on ``tv_tensors`` fed the
drawn parameters: boxes and keypoints within 1e-4 px, masks exact. SanitizeBoundingBoxes and
ClampBoundingBoxes are compared with torchvision's on one sample and on list and padded batches.
The draws are checked for what they promise (an IoU crop overlaps an object by its minimum IoU,
a zoom-out canvas is within ``side_range``...), over many keyed draws.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2 as T
import torchvision.transforms.v2.functional as TF
from torchvision import tv_tensors

from mediapipe import augment as A
from mediapipe.augment.base import ObjectCountError, Stage
from mediapipe.augment.functional.objects import convert_boxes
from mediapipe.errors import PipelineError
from mediapipe.fields import FieldType, boxes, per_object
from mediapipe.rng import SampleRNG
from mediapipe.stages.collate import TensorList, collate, stack_params
from tests.helpers import (
    BATCH_CASES,
    SAMPLE_CASES,
    H,
    W,
    check,
    sample,
    sample_types,
    some_boxes,
    some_points,
    tv,
    tv_detection_resize,
    tv_iou_crop,
    tv_letterbox,
    tv_zoom_out,
)
from tests.helpers import draw as draw_plain

FORMATS = ["xyxy", "xywh", "cxcywh"]


def detection_types(fmt: str, collate: str | None = None) -> dict[str, FieldType]:
    types = sample_types(fmt)
    types["boxes"] = boxes(fmt, collate=collate)
    types["masks"] = per_object("mask", collate=collate)
    types["labels"] = per_object(collate=collate)
    return types


def detection_sample(seed: int, fmt: str, n: int = 5, h: int = H, w: int = W) -> dict[str, torch.Tensor]:
    """An image, its class-id mask, and n objects: boxes, one mask each (its box's pixels), class
    ids and three keypoints each."""
    data = sample(seed, fmt, h, w)
    data["boxes"] = convert_boxes(some_boxes(seed, n=max(n, 2), h=h, w=w)[:n], "xyxy", fmt)
    data["points"] = some_points(seed, n=n, h=h, w=w)
    xyxy = convert_boxes(data["boxes"], fmt, "xyxy")
    masks = torch.zeros(n, h, w, dtype=torch.uint8)
    for k, (x0, y0, x1, y1) in enumerate(xyxy.tolist()):
        masks[k, max(0, int(y0)) : max(0, int(y1)), max(0, int(x0)) : max(0, int(x1))] = 1
    data["masks"], data["labels"] = masks, torch.arange(1, n + 1)
    return data


def draw(op, seed: int, data: dict, index: int = 0) -> dict:
    size = tuple(data["image"].shape[-2:])
    return op.sample_params(SampleRNG(seed, 0, index, 1), {"size": size, "shape": (3, *size),
                                                            "fields": {f: data[f] for f in op.draws_on()}})


CASES = [
    (A.RandomIoUCrop(), tv_iou_crop, 0),
    (A.RandomIoUCrop(min_scale=0.2, sampler_options=(0.1, 0.3)), tv_iou_crop, 0),
    (A.RandomZoomOut(p=1.0, fill=(10, 20, 30), side_range=(1.0, 2.5)), tv_zoom_out, 0),
    (A.RandomZoomOut(fill=7), tv_zoom_out, 0),
    (A.ScaleJitter((40, 56), scale_range=(0.5, 1.5)), tv_detection_resize, 1),
    (A.ScaleJitter(32, interpolation="nearest"), tv_detection_resize, 0),
    (A.RandomShortestSize((20, 36, 60), max_size=70), tv_detection_resize, 1),
    (A.Letterbox((40, 40)), tv_letterbox, 1),
    (A.Letterbox((30, 50), fill=(1, 2, 3), center=False, interpolation="bicubic"), tv_letterbox, 1),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_detection_ops_move_every_kind_as_torchvision(case, fmt) -> None:
    op, oracle, levels = CASES[case]
    op = op.bind(detection_types(fmt))
    assert op.inputs == ("image", "mask", "boxes", "points", "masks")  # not the class ids
    assert op.placement() is Stage.SAMPLE
    changed = 0
    for seed in range(4):
        data = detection_sample(seed, fmt)
        ref_in = tv(data, fmt)
        ref_in["masks"] = tv_tensors.Mask(data["masks"])
        p = draw(op, seed, data)
        fn = oracle(op, p, data)
        op.apply_fields(data, p)
        ref = {k: fn(v) for k, v in ref_in.items()}
        check(data, ref, levels)
        assert torch.equal(data["masks"], ref["masks"].as_subclass(torch.Tensor))
        changed += tuple(data["image"].shape[-2:]) != (H, W) or p.get("crop", False)
    assert changed >= 2  # the draws did something


def test_a_per_channel_fill_and_a_mask_filled_with_zero() -> None:
    op = A.RandomZoomOut(fill=(200, 100, 50), p=1.0, side_range=(2.0, 2.0)).bind(detection_types("xyxy"))
    data = detection_sample(0, "xyxy")
    data["mask"] = data["mask"] + 1  # no zeros in the mask before: every 0 after is padding
    op.apply_fields(data, {"padding": (10, 20, 54, 28)})
    assert data["image"].shape == (3, 96, 128) and data["image"].dtype == torch.uint8
    assert data["image"][:, 0, 0].tolist() == [200, 100, 50] and data["image"][:, -1, -1].tolist() == [200, 100, 50]
    assert (data["mask"][:, :20] == 0).all() and (data["mask"][:, 20:68, 10:74] > 0).all()
    torch.testing.assert_close(data["boxes"][2:], convert_boxes(detection_sample(0, "xyxy")["boxes"][2:], "xyxy", "xyxy")
                               + torch.tensor([10.0, 20.0, 10.0, 20.0]))


# -- draws: what each random op promises ------------------------------------------------------------------
def iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    lo, hi = torch.maximum(a[:, :2], b[:2]), torch.minimum(a[:, 2:], b[2:])
    inter = (hi - lo).clamp(min=0).prod(1)
    return inter / ((a[:, 2:] - a[:, :2]).prod(1) + (b[2:] - b[:2]).prod() - inter)


def test_iou_crops_overlap_an_object_by_the_minimum_iou_within_the_scale_and_aspect_ranges() -> None:
    op = A.RandomIoUCrop(min_scale=0.3, max_scale=0.9, min_aspect_ratio=0.6, max_aspect_ratio=1.8,
                         sampler_options=(0.5,)).bind(detection_types("xyxy"))
    objects = torch.tensor([[10.0, 8.0, 40.0, 30.0], [50.0, 20.0, 60.0, 44.0], [0.0, 0.0, 5.0, 5.0]])
    cropped = 0
    for index in range(300):
        p = op.sample_params(SampleRNG(5, 0, index, 1), {"size": (H, W), "fields": {"boxes": objects}})
        if not p["crop"]:
            assert (p["top"], p["left"], p["height"], p["width"]) == (0, 0, H, W)
            continue
        cropped += 1
        top, left, h, w = p["top"], p["left"], p["height"], p["width"]
        assert 0 <= top and top + h <= H and 0 <= left and left + w <= W
        assert int(0.3 * W) <= w <= int(0.9 * W) and int(0.3 * H) <= h <= int(0.9 * H)
        assert 0.6 <= w / h <= 1.8
        crop = torch.tensor([left, top, left + w, top + h], dtype=torch.float32)
        cx, cy = (objects[:, 0] + objects[:, 2]) / 2, (objects[:, 1] + objects[:, 3]) / 2
        inside = (left < cx) & (cx < left + w) & (top < cy) & (cy < top + h)
        assert inside.any() and iou(objects[inside], crop).max() >= 0.5
    assert cropped >= 250  # a fit is found for almost every sample


def test_iou_crop_keeps_the_sample_whole_when_told_or_when_no_crop_can_hold_an_object() -> None:
    op = A.RandomIoUCrop(sampler_options=(1.0,)).bind(detection_types("xyxy"))
    objects = torch.tensor([[10.0, 8.0, 40.0, 30.0]])
    meta = {"size": (H, W), "fields": {"boxes": objects}}
    assert not any(op.sample_params(SampleRNG(0, 0, i, 1), meta)["crop"] for i in range(20))
    none = A.RandomIoUCrop().bind(detection_types("xyxy"))
    assert not none.sample_params(SampleRNG(0, 0, 0, 1), {"size": (H, W), "fields": {"boxes": objects[:0]}})["crop"]
    # a 1-pixel object: no crop of at least 30% of each side overlaps it by 0.9; torchvision loops forever
    hopeless = A.RandomIoUCrop(sampler_options=(0.9,), trials=5).bind(detection_types("xyxy"))
    p = hopeless.sample_params(SampleRNG(0, 0, 0, 1), {"size": (H, W), "fields": {"boxes": torch.tensor([[3.0, 3, 4, 4]])}})
    assert not p["crop"]
    data = detection_sample(0, "xyxy")
    before = {k: v.clone() for k, v in data.items()}
    hopeless.apply_fields(data, p)
    assert all(torch.equal(data[k], before[k]) for k in data)


def test_iou_crop_draws_as_torchvision_draws() -> None:
    """The crop sizes torchvision's RandomIoUCrop draws and ours: the same law (means of the
    crop's area fraction and aspect over many samples, within sampling error)."""
    objects = torch.tensor([[10.0, 8.0, 40.0, 30.0], [30.0, 25.0, 60.0, 45.0]])
    ours = A.RandomIoUCrop().bind(detection_types("xyxy"))
    torch.manual_seed(0)
    theirs = T.RandomIoUCrop()
    image = tv_tensors.Image(torch.zeros(1, H, W))
    bxs = tv_tensors.BoundingBoxes(objects, format="XYXY", canvas_size=(H, W))
    ours_area, theirs_area = [], []
    for i in range(300):
        p = ours.sample_params(SampleRNG(1, 0, i, 1), {"size": (H, W), "fields": {"boxes": objects}})
        ours_area.append(p["height"] * p["width"] / (H * W))
        tp = theirs.make_params([image, bxs])
        theirs_area.append(tp["height"] * tp["width"] / (H * W) if tp else 1.0)
    mean_o, mean_t = sum(ours_area) / 300, sum(theirs_area) / 300
    whole_o, whole_t = sum(a == 1.0 for a in ours_area) / 300, sum(a == 1.0 for a in theirs_area) / 300
    assert abs(mean_o - mean_t) < 0.05 and abs(whole_o - whole_t) < 0.07, (mean_o, mean_t, whole_o, whole_t)


def test_zoom_out_canvas_is_within_side_range_and_applied_with_probability_p() -> None:
    op = A.RandomZoomOut(side_range=(1.5, 3.0), p=0.4)
    applied = 0
    for index in range(500):
        left, top, right, bottom = op.sample_params(SampleRNG(2, 0, index, 1), {"size": (H, W)})["padding"]
        if not (left or top or right or bottom):
            continue
        applied += 1
        cw, ch = W + left + right, H + top + bottom
        assert int(1.5 * W) <= cw <= int(3.0 * W) and int(1.5 * H) <= ch <= int(3.0 * H)
        assert abs(cw / W - ch / H) < 2.5 / H  # one r for both sides
        assert min(left, top, right, bottom) >= 0
    assert 0.33 < applied / 500 < 0.47


def test_scale_jitter_and_shortest_size_keep_the_aspect_ratio_within_their_ranges() -> None:
    jitter = A.ScaleJitter((60, 80), scale_range=(0.5, 2.0))
    scales = []
    for index in range(300):
        h, w = jitter.sample_params(SampleRNG(3, 0, index, 1), {"size": (H, W)})["size"]
        s = min(60 / H, 80 / W)
        scales.append(w / (W * s))
        assert 0.5 * s * H - 1 <= h <= 2.0 * s * H and abs(h / w - H / W) < 2 / min(h, w)
    assert min(scales) < 0.6 and max(scales) > 1.9  # the range is covered
    shortest = A.RandomShortestSize((20, 30, 40), max_size=50)
    seen = set()
    for index in range(100):
        h, w = shortest.sample_params(SampleRNG(3, 0, index, 1), {"size": (H, W)})["size"]
        seen.add(h)
        assert w <= 50 and abs(h / w - H / W) < 2 / h
    assert seen == {20, 30, 37}  # 40 would make the longer side 53.3: capped at 50, so r = 50 / 64
    assert A.RandomShortestSize(40, max_size=50).sample_params(SampleRNG(0, 0, 0, 1), {"size": (H, W)})["size"] \
        == (37, 50)  # r = min(40 / 48, 50 / 64)


def test_letterbox_fits_pads_to_size_and_centres() -> None:
    op = A.Letterbox((64, 64))
    assert op.sample_params(None, {"size": (48, 96)}) == {"size": (32, 64), "padding": (0, 16, 0, 16)}
    assert op.sample_params(None, {"size": (100, 33)}) == {"size": (64, 21), "padding": (21, 0, 22, 0)}
    assert op.sample_params(None, {"size": (16, 16)}) == {"size": (64, 64), "padding": (0, 0, 0, 0)}  # scales up
    corner = A.Letterbox((64, 64), center=False)
    assert corner.sample_params(None, {"size": (100, 33)}) == {"size": (64, 21), "padding": (0, 0, 43, 0)}


# -- clamping and sanitizing ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_clamp_bounding_boxes_as_torchvision_on_a_sample_and_on_batches(fmt) -> None:
    data = detection_sample(1, fmt)
    op = A.ClampBoundingBoxes().bind(detection_types(fmt))
    assert op.inputs == ("boxes",) and op.reads() == ("boxes", "image") and op.placement() is Stage.BATCH
    ref = TF.clamp_bounding_boxes(tv(data, fmt)["boxes"]).as_subclass(torch.Tensor)
    single = dict(data)
    op.apply_fields(single, {})
    torch.testing.assert_close(single["boxes"], ref, atol=1e-4, rtol=0)
    assert torch.equal(single["image"], data["image"])
    samples = [{k: v for k, v in detection_sample(s, fmt, n=n).items() if k in ("image", "boxes")}
               for s, n in ((1, 5), (2, 0), (3, 3))]
    for policy in ("list", "pad"):
        batch = collate(samples, {"image": "stack", "boxes": (policy, 0)})
        op.apply_fields(batch, {})
        for i, s in enumerate(samples):
            rows = batch["boxes"][i] if policy == "list" else batch["boxes"][i, : int(batch["boxes_lengths"][i])]
            expected = TF.clamp_bounding_boxes(tv_tensors.BoundingBoxes(s["boxes"], format=fmt.upper(),
                                                                        canvas_size=(H, W))).as_subclass(torch.Tensor)
            torch.testing.assert_close(rows, expected, atol=1e-4, rtol=0)
        if policy == "pad":
            assert not batch["boxes"][1].any()  # the sample without boxes is still padding


def sanitize_oracle(data: dict, fmt: str, min_size: float, min_area: float) -> dict:
    """torchvision's SanitizeBoundingBoxes on the sample, class ids and keypoints as its labels."""
    inputs = {"image": tv_tensors.Image(data["image"]),
              "boxes": tv_tensors.BoundingBoxes(data["boxes"], format=fmt.upper(), canvas_size=(H, W)),
              "masks": tv_tensors.Mask(data["masks"]), "labels": data["labels"], "points": data["points"]}
    out = T.SanitizeBoundingBoxes(min_size, min_area, labels_getter=lambda d: (d["labels"], d["points"]))(inputs)
    return {k: v.as_subclass(torch.Tensor) for k, v in out.items()}


def awkward_sample(seed: int, fmt: str, n: int) -> dict:
    """n objects, among them degenerate ones: flat, tiny, reversed, past the border, negative."""
    data = detection_sample(seed, fmt, n=n)
    bad = torch.tensor([[5.0, 5.0, 5.0, 20.0], [10.0, 10.0, 11.5, 11.5], [30.0, 20.0, 20.0, 30.0],
                        [W - 4.0, 3.0, W + 0.5, 9.0], [-0.5, 2.0, 8.0, 9.0], [2.0, 2.0, 6.0, 4.0]])
    xyxy = convert_boxes(data["boxes"], fmt, "xyxy")
    for k in range(min(n, 6)):
        if (seed + k) % 2:
            xyxy[k] = bad[(seed + k) % 6]
    data["boxes"] = convert_boxes(xyxy, "xyxy", fmt)
    return data


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("min_size", "min_area"), [(1.0, 1.0), (3.0, 20.0)])
def test_sanitize_drops_the_boxes_torchvision_drops_and_their_rows(fmt, min_size, min_area) -> None:
    op = A.SanitizeBoundingBoxes(min_size, min_area).bind(detection_types(fmt))
    assert op.inputs == ("boxes", "points", "masks", "labels") and op.reads()[-1] == "image"
    dropped = 0
    for seed in range(6):
        data = awkward_sample(seed, fmt, n=6)
        ref = sanitize_oracle(data, fmt, min_size, min_area)
        op.apply_fields(data, {})
        torch.testing.assert_close(data["boxes"], ref["boxes"], atol=1e-4, rtol=0)
        for f in ("labels", "points", "masks"):
            assert torch.equal(data[f], ref[f]), f
        assert data["mask"].shape == (1, H, W)  # the class-id mask is not per object: untouched
        dropped += 6 - len(data["boxes"])
    assert dropped >= 8


@pytest.mark.parametrize("policy", ["list", "pad"])
def test_sanitize_on_list_and_padded_batches_keeps_each_samples_rows(policy) -> None:
    fmt = "xywh"
    op = A.SanitizeBoundingBoxes(2.0, 4.0).bind(detection_types(fmt, collate=policy))
    assert op.placement() is Stage.BATCH
    samples = [awkward_sample(s, fmt, n) for s, n in ((0, 6), (1, 0), (2, 4), (3, 6))]
    refs = [sanitize_oracle(s, fmt, 2.0, 4.0) for s in samples]
    policies = {"image": "stack", **{f: (policy, 0) for f in ("boxes", "points", "masks", "labels")}}
    batch = collate(samples, policies)
    op.apply_fields(batch, {})
    for i, ref in enumerate(refs):
        for f in ("boxes", "points", "masks", "labels"):
            if policy == "list":
                got = batch[f][i]
            else:
                n = int(batch[f"{f}_lengths"][i])
                assert n == len(ref["boxes"])
                got = batch[f][i, :n]
                assert not batch[f][i, n:].any()  # zeros past the new length
            assert torch.equal(got, ref[f]) if f != "boxes" else torch.allclose(got, ref["boxes"], atol=1e-4), (i, f)
    if policy == "list":
        assert isinstance(batch["boxes"], TensorList)


def test_sanitize_images_of_several_sizes_each_with_its_canvas() -> None:
    op = A.SanitizeBoundingBoxes().bind(detection_types("xyxy", collate="list"))
    box = torch.tensor([[50.0, 2.0, 60.0, 12.0]])  # inside a 64-wide image, past a 40-wide one
    batch = {"image": [torch.zeros(3, 48, 64), torch.zeros(3, 48, 40)], "boxes": [box, box.clone()],
             "points": [torch.zeros(1, 2)] * 2, "masks": [torch.zeros(1, 48, 64), torch.zeros(1, 48, 40)],
             "labels": [torch.tensor([1]), torch.tensor([2])]}
    op.apply_fields(batch, {})
    assert [len(b) for b in batch["boxes"]] == [1, 0] and [m.shape[0] for m in batch["masks"]] == [1, 0]


def test_sanitize_refuses_rows_that_do_not_match_the_boxes() -> None:
    op = A.SanitizeBoundingBoxes().bind(detection_types("xyxy"))
    data = detection_sample(0, "xyxy")
    data["labels"] = data["labels"][:3]
    with pytest.raises(ObjectCountError, match=r"'boxes' has \[5\] objects but 'labels' has \[3\] rows"):
        op.apply_fields(data, {})
    only_labels = A.SanitizeBoundingBoxes(labels="labels").bind(detection_types("xyxy"))
    assert only_labels.inputs == ("boxes", "labels")
    assert A.SanitizeBoundingBoxes(labels=()).bind(detection_types("xyxy")).inputs == ("boxes",)


def test_sanitize_and_clamp_bind_errors_name_the_field() -> None:
    types = detection_types("xyxy")
    with pytest.raises(PipelineError, match=r"labels=\('image',\)\): field 'image' is image, not one row per object"):
        A.SanitizeBoundingBoxes(labels="image").bind(types)
    with pytest.raises(PipelineError, match="no field 'nope'"):
        A.SanitizeBoundingBoxes(labels="nope").bind(types)
    with pytest.raises(PipelineError, match=r"name one with key=, of \['boxes', 'crowd'\]"):
        A.SanitizeBoundingBoxes().bind({**types, "crowd": boxes()})
    assert A.SanitizeBoundingBoxes(key="crowd").bind({**types, "crowd": boxes()}).inputs[0] == "crowd"
    with pytest.raises(PipelineError, match="needs the image its boxes are in pixels of"):
        A.ClampBoundingBoxes().bind({"boxes": boxes()})
    with pytest.raises(PipelineError, match="canvas_key='boxes' is not an image"):
        A.ClampBoundingBoxes(canvas_key="boxes").bind(types)
    with pytest.raises(PipelineError, match="RandomIoUCrop draws its crop from the boxes"):
        A.RandomIoUCrop().bind({"image": FieldType("image")})
    stacked = {**types, "labels": per_object(collate="stack")}
    assert A.SanitizeBoundingBoxes().bind(stacked).placement() is Stage.SAMPLE  # counts change before batching


def test_a_clip_and_its_boxes_go_through_detection_ops_as_each_frame_would() -> None:
    types = {"video": FieldType("video"), "boxes": boxes()}
    data0 = detection_sample(0, "xyxy")
    clip = torch.stack([detection_sample(s, "xyxy")["image"] for s in range(3)])
    for op in (A.RandomIoUCrop(), A.RandomZoomOut(p=1.0), A.ScaleJitter((40, 40)), A.Letterbox(32)):
        video_op = op.bind(types)
        p = draw(video_op, 4, {"image": clip, "boxes": data0["boxes"]})
        data = {"video": clip.clone(), "boxes": data0["boxes"].clone()}
        video_op.apply_fields(data, p)
        single = op.bind({"image": FieldType("image"), "boxes": boxes()})
        for t in range(3):
            alone = {"image": clip[t], "boxes": data0["boxes"].clone()}
            single.apply_fields(alone, p)
            assert torch.equal(data["video"][t], alone["image"])
            torch.testing.assert_close(data["boxes"], alone["boxes"])


def test_objects_of_no_sample_pass_through_every_op() -> None:
    """A sample without objects: (0, 4) boxes, (0, H, W) masks per object, (0,) class ids."""
    types = detection_types("xyxy")
    for op in (A.RandomIoUCrop(), A.RandomZoomOut(p=1.0), A.ScaleJitter((40, 40)), A.RandomShortestSize(30),
               A.Letterbox(32), A.ClampBoundingBoxes(), A.SanitizeBoundingBoxes()):
        op = op.bind(types)
        data = detection_sample(0, "xyxy", n=0)
        p = draw(op, 1, data)
        op.apply_fields(data, p)
        h, w = data["image"].shape[-2:]
        assert data["boxes"].shape == (0, 4) and data["masks"].shape == (0, h, w) and data["labels"].shape == (0,)


def test_draws_depend_on_the_key_only() -> None:
    op = A.RandomIoUCrop().bind(detection_types("xyxy"))
    data = detection_sample(0, "xyxy")
    assert draw(op, 3, data, index=7) == draw(op, 3, data, index=7)
    assert len({tuple(sorted(draw(op, 3, data, index=i).items())) for i in range(10)}) > 5


FILLED = [lambda f: A.Letterbox(40, fill=f), lambda f: A.RandomZoomOut(p=1.0, fill=f),
          lambda f: A.RandomRotation(30, fill=f), lambda f: A.RandomAffine(20, fill=f), lambda f: A.Pad(2, fill=f),
          lambda f: A.RandomCrop(70, pad_if_needed=True, fill=f)]


@pytest.mark.parametrize("make", range(len(FILLED)))
def test_a_fill_the_images_cannot_hold_is_refused_with_the_reason(make) -> None:
    """A fill is in the images' units: NaN or infinite is refused when the op is made; one past an
    integer dtype's range (torch refused 300 for uint8 in a pad and wrapped -1 to 255), or with
    one value per channel for another number of channels, when the op meets such images."""
    make = FILLED[make]
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"fill=.*expected a finite number"):
            make(bad)
    types = {"image": FieldType("image"), "boxes": boxes()}
    data = detection_sample(0, "xyxy")

    def run(fill, image):
        op = make(fill).bind(types)
        sample = {"image": image.clone(), "boxes": data["boxes"].clone()}
        if op.placement() is Stage.SAMPLE:
            op.apply_fields(sample, draw(op, 0, sample))
            return sample["image"]
        batch = {"image": image[None].clone(), "boxes": TensorList([data["boxes"].clone()])}
        op.apply_fields(batch, stack_params([draw(op, 0, sample)]))
        return batch["image"][0]

    for fill in (300, -1):
        with pytest.raises(ValueError, match=rf"fill={fill} does not fit torch.uint8 images \(0..255\)"):
            run(fill, data["image"])
    out = run(300, data["image"].float())  # a float image holds it
    assert out.dtype == torch.float32 and out.max() == 300
    if type(make(0)) not in (A.Pad, A.RandomCrop):  # (those take one number)
        with pytest.raises(ValueError, match=r"fill=\(1, 2\) has 2 values for images of 3 channels"):
            run((1, 2), data["image"])
        assert run((10, 20, 30), data["image"])[:, 0, 0].tolist() == [10, 20, 30]


def iou_crop_all_at_once(op, rng: SampleRNG, height: int, width: int, xyxy: np.ndarray) -> dict:
    """RandomIoUCrop's draw written out as its docstring states it, every trial of an option tested
    at once against every box: what the op must give, however it bounds its work."""
    for _ in range(50):
        min_iou = rng.choice(op.sampler_options)
        if min_iou >= 1.0:
            break
        u = rng.numpy().random((op.trials, 4))
        size = np.floor(np.array([width, height]) * (op.min_scale + (op.max_scale - op.min_scale) * u[:, :2]))
        corner = np.floor((np.array([width, height]) - size) * u[:, 2:])
        crops = np.concatenate((corner, corner + size), axis=1)
        aspect = size[:, 0] / np.maximum(size[:, 1], 1.0)
        ok = (size.min(axis=1) > 0) & (op.min_aspect_ratio <= aspect) & (aspect <= op.max_aspect_ratio)
        centres = (xyxy[:, :2] + xyxy[:, 2:]) * 0.5
        inside = ((crops[:, None, :2] < centres) & (centres < crops[:, None, 2:])).all(axis=2)
        inter = np.minimum(xyxy[None, :, 2:], crops[:, None, 2:]) - np.maximum(xyxy[None, :, :2], crops[:, None, :2])
        inter = inter.clip(min=0).prod(axis=2)
        union = (xyxy[:, 2:] - xyxy[:, :2]).prod(axis=1) + size.prod(axis=1)[:, None] - inter
        ok &= np.where(inside, inter / np.maximum(union, 1e-12), -1.0).max(axis=1) >= min_iou
        if ok.any():
            t = int(np.argmax(ok))
            return {"crop": True, "top": int(corner[t, 1]), "left": int(corner[t, 0]), "height": int(size[t, 1]),
                    "width": int(size[t, 0])}
    return {"crop": False, "top": 0, "left": 0, "height": height, "width": width}


def test_iou_crop_with_thousands_of_objects_takes_the_crop_of_the_written_out_draw_in_bounded_memory() -> None:
    """A label file may hold a million objects: the IoU test of every trial against every box at
    once held arrays of trials x boxes (gigabytes, minutes per sample). Boxes too small to reach the
    minimum IoU are left out first and trials are tested a block at a time: the same crops as the
    draw written out, and a bounded peak."""
    import tracemalloc

    g = torch.Generator().manual_seed(0)
    for options, n in (((0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0), 40), ((0.5,), 300), ((0.3, 0.9), 3000)):
        op = A.RandomIoUCrop(sampler_options=options).bind(detection_types("xyxy"))
        xy = torch.rand(n, 2, generator=g) * torch.tensor([W, H])
        objects = torch.cat((xy, xy + 0.5 + torch.rand(n, 2, generator=g) * 30), 1)
        objects[: n // 4, 2:] = objects[: n // 4, :2]  # degenerate ones too
        for index in range(40):
            p = op.sample_params(SampleRNG(2, 0, index, 1), {"size": (H, W), "fields": {"boxes": objects}})
            assert p == iou_crop_all_at_once(op, SampleRNG(2, 0, index, 1), H, W, objects.double().numpy())
    n = 200_000  # tiny objects, and one an 0.5 IoU crop can hold
    xy = torch.rand(n, 2, generator=g) * torch.tensor([W - 2, H - 2])
    objects = torch.cat((xy, xy + 1.0), 1)
    objects[-1] = torch.tensor([8.0, 6.0, 56.0, 42.0])
    op = A.RandomIoUCrop(sampler_options=(0.5,)).bind(detection_types("xyxy"))
    tracemalloc.start()
    try:
        p = op.sample_params(SampleRNG(3, 0, 0, 1), {"size": (H, W), "fields": {"boxes": objects}})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert p["crop"] and peak < 64 << 20, peak  # every trial against every box at once: 40 x 200,000 x 8 bytes a plane


def boxes_on_the_edges(h: int = H, w: int = W) -> torch.Tensor:
    """xyxy boxes a hostile file holds: the whole image, zero-sized ones at its corners and inside,
    one touching its right edge from outside, wholly outside it, its last pixel."""
    return torch.tensor([[0, 0, w, h], [0, 0, 0, 0], [w, h, w, h], [10, 10, 10, 20], [w, 0, w + 5, 5],
                         [-10, -10, -1, -1], [w + 1, h + 1, w + 9, h + 9], [5.5, 6.25, 30.75, 40.5],
                         [w - 1, h - 1, w, h]], dtype=torch.float32)


@pytest.mark.parametrize("fmt", FORMATS)
def test_boxes_on_the_edges_zero_sized_or_outside_move_as_torchvision_moves_them(fmt) -> None:
    """Every geometric op, sample and batch stage (list and padded boxes), in every box format."""
    def hostile(seed: int) -> dict:
        data = sample(seed, fmt)
        data["boxes"] = convert_boxes(boxes_on_the_edges(), "xyxy", fmt)
        data["points"] = torch.tensor([[[0, 0], [W, H], [W - 1, H - 1]], [[-5, 3], [W + 2, H / 2], [10.5, 7.25]]])
        return data

    for (op, oracle, levels), detection in [(case, False) for case in SAMPLE_CASES] + [(case, True) for case in CASES]:
        op = op.bind(sample_types(fmt))
        for seed in range(2):
            data = hostile(seed)
            ref_in = tv(data, fmt)
            p = draw(op, seed, data) if detection else draw_plain(op, seed)
            fn = oracle(op, p, data) if detection else oracle(op, p)
            op.apply_fields(data, p)
            check(data, {k: fn(v) for k, v in ref_in.items()}, levels)
    for (op, oracle), policy in ((case, c) for case in BATCH_CASES for c in ("list", "pad")):
        types = sample_types(fmt)
        types["boxes"] = boxes(fmt, collate=policy)
        op = op.bind(types)
        samples = [hostile(seed) for seed in range(3)]
        drawn = [draw_plain(op, 9, index=i) for i in range(3)]
        batch = {k: torch.stack([s[k] for s in samples]) for k in ("image", "mask", "points")}
        batch["boxes"] = (TensorList(s["boxes"] for s in samples) if policy == "list"
                          else torch.stack([s["boxes"] for s in samples]))
        if policy == "pad":
            batch["boxes_lengths"] = torch.full((3,), len(samples[0]["boxes"]))
        op.apply_fields(batch, stack_params(drawn))
        for i, (s, p) in enumerate(zip(samples, drawn)):
            fn = oracle(op, p)
            ref = {k: fn(v) for k, v in tv(s, fmt).items()}
            ours = {k: batch[k][i] for k in ("image", "mask", "points", "boxes")}
            check(ours, ref, image_levels=int(getattr(op, "interpolation", "") == "bilinear"))
