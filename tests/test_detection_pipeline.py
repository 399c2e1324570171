"""Detection pipelines end to end: objects drawn at known boxes into photos (and their class ids
into a mask), the detection ops run by the loader, and each object's box recovered from the pixels
compared with its transformed box; the objects' class ids follow their boxes through
SanitizeBoundingBoxes. Also: the same batches whatever the worker count, a config round trip,
the build-time refusals (MixUp with boxes, DALI), a bad annotation named with its file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.errors import DecodeError, PipelineError
from mediapipe.fields import boxes, keypoints, per_object
from tests.helpers import BoxManifest, write_objects


class LabelledBoxManifest(BoxManifest):
    """Boxes, their centres as keypoints, and their class ids as a per-object field: id k + 1 for
    the k-th box, the id its pixels carry in the mask."""

    kind = "test-labelled-box-manifest"

    def field_types(self) -> dict:
        return {"boxes": boxes("xyxy"), "points": keypoints(), "labels": per_object()}

    def ref(self, index: int):
        ref = super().ref(index)
        ref.fields["labels"] = list(range(1, len(self._rows[index]["boxes"]) + 1))
        return ref


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> Path:
    return write_objects(tmp_path_factory.mktemp("detection"), count=12)


def pipeline(rows: Path, ops: list, source: type = LabelledBoxManifest, **kwargs) -> mp.Pipeline:
    return mp.Pipeline(source(rows), {"image": mp.decoders.image(), "mask": mp.decoders.mask()}, ops,
                       batch_size=4, seed=kwargs.pop("seed", 3), device="cpu", **kwargs)


SSD = [A.RandomIoUCrop(), A.RandomZoomOut(side_range=(1.0, 2.0)), A.HorizontalFlip(), A.Letterbox(64, fill=0),
       A.ClampBoundingBoxes(), A.SanitizeBoundingBoxes()]
# (a mask resampled with nearest at each resize: sizes kept large enough that its edges stay within
# a pixel or two of the exactly scaled boxes)
MULTISCALE = [A.RandomShortestSize((96, 112), max_size=200), A.ScaleJitter((112, 112), scale_range=(0.8, 1.25)),
              A.RandomIoUCrop(min_scale=0.5, sampler_options=(0.1, 0.3)), A.Letterbox((64, 72), center=False),
              A.SanitizeBoundingBoxes(min_size=2.0)]


def rows_of(batch: dict, name: str, i: int) -> torch.Tensor:
    value = batch[name]
    return value[i] if isinstance(value, list) else value[i, : int(batch[f"{name}_lengths"][i])]


def check_objects_follow_pixels(batch: dict, tolerance: float = 2.5) -> int:
    """Each kept object's box against the box of its class id's pixels in the mask, and its image
    pixels (red, (200, g, 40) on a dark photo) inside it; returns how many objects were checked."""
    checked = 0
    for i in range(batch["image"].shape[0]):
        bxs, labels = rows_of(batch, "boxes", i), rows_of(batch, "labels", i)
        points = rows_of(batch, "points", i)
        assert len(bxs) == len(labels) == len(points)
        assert len(set(labels.tolist())) == len(labels)  # each object once
        for box, label, point in zip(bxs, labels, points):
            ys, xs = torch.nonzero(batch["mask"][i, 0] == label, as_tuple=True)
            assert len(xs) > 0, "a kept box whose object is not in the image"
            seen = torch.stack((xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)).float()
            assert (box - seen).abs().max() <= tolerance, (i, int(label), box, seen)
            x0, y0, x1, y1 = (int(v) for v in box.round())
            if x1 - x0 > 6 and y1 - y0 > 6:  # the object itself is in the image there
                red = batch["image"][i, 0, y0 + 2 : y1 - 2, x0 + 2 : x1 - 2].float()
                assert (red > 140).float().mean() > 0.8, (i, int(label))
            assert box[0] - 1 <= point[0] <= box[2] + 1 or len(xs) < 30  # the centre, unless cropped off
            checked += 1
    return checked


@pytest.mark.parametrize(("ops", "collate"), [(SSD, "list"), (SSD, "pad"), (MULTISCALE, "pad")])
def test_detection_ops_keep_boxes_labels_and_pixels_together(objects, ops, collate):
    fields = ("boxes", "points", "labels")
    pipe = pipeline(objects, ops, collate={f: collate for f in fields})
    first = type(ops[0]).__name__
    assert f"{first}: sample (fused into decode) on image, mask, boxes, points" in repr(pipe)
    sanitize = pipe.plan.placed[-1]
    assert sanitize.op.inputs == ("boxes", "points", "labels") and sanitize.stage.value == "batch"
    checked = dropped = 0
    total = sum(len(json.loads(line)["boxes"]) for line in objects.read_text().splitlines())
    for epoch in range(2):
        loader = pipe.loader(num_workers=0)
        loader.set_epoch(epoch)
        for batch in loader:
            assert batch["image"].shape[1:] == (3, *ops[3].size) and batch["image"].dtype == torch.uint8
            assert set(batch["mask"].unique().tolist()) <= {0, 1, 2, 3}
            if collate == "list":
                assert isinstance(batch["labels"], list) and batch["labels"][0].dtype == torch.int64
            else:
                assert torch.equal(batch["boxes_lengths"], batch["labels_lengths"])
            checked += check_objects_follow_pixels(batch)
            dropped -= sum(len(rows_of(batch, "boxes", i)) for i in range(batch["image"].shape[0]))
        dropped += total
    assert checked >= 15 and dropped >= 1  # objects kept and checked; some cropped away with their labels


def test_same_batches_whatever_the_number_of_workers(objects):
    pipe = pipeline(objects, SSD, collate={"boxes": "pad", "points": "pad"})
    runs = []
    for workers in (0, 2):
        loader = pipe.loader(num_workers=workers, shuffle=True)
        loader.set_epoch(1)
        runs.append(list(loader))
    assert len(runs[0]) == len(runs[1]) == 3
    for a, b in zip(*runs):
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["mask"], b["mask"])
        assert torch.equal(a["boxes"], b["boxes"]) and torch.equal(a["boxes_lengths"], b["boxes_lengths"])
        assert all(torch.equal(x, y) for x, y in zip(a["labels"], b["labels"]))


def test_config_round_trip_of_detection_ops(objects):
    ops = [A.RandomIoUCrop(min_scale=0.4, sampler_options=(0.0, 0.5)), A.RandomZoomOut(fill=(1, 2, 3), p=0.3),
           A.ScaleJitter(80, scale_range=(0.8, 1.2)), A.RandomShortestSize((40, 48), max_size=90),
           A.Letterbox((48, 56), fill=7, center=False), A.ClampBoundingBoxes(canvas_key="image"),
           A.SanitizeBoundingBoxes(min_size=2.0, labels="labels")]
    pipe = pipeline(objects, ops, collate={"boxes": "pad"})
    config = json.loads(json.dumps(pipe.to_config()))
    assert [c["op"] for c in config["augment"]][-2:] == ["ClampBoundingBoxes", "SanitizeBoundingBoxes"]
    again = mp.Pipeline.from_config(config)
    assert again.augment == pipe.augment and again.field_types == pipe.field_types
    assert str(again.field_types["labels"]) == "label per object"
    a = next(iter(pipe.loader(num_workers=0, shuffle=False)))
    b = next(iter(again.loader(num_workers=0, shuffle=False)))
    assert all(torch.equal(a[k], b[k]) for k in ("image", "mask", "boxes", "boxes_lengths"))
    assert all(torch.equal(x, y) for x, y in zip(a["labels"], b["labels"]))


def test_mixup_and_cutmix_refuse_pixels_with_objects_drawn_on_them(objects):
    for mix in (A.MixUp(num_classes=3), A.CutMix(num_classes=3)):
        name = type(mix).__name__
        with pytest.raises(PipelineError, match=rf"augment\[1\] {name} mixes \['image'\] with other samples of the "
                                                r"batch, but \['mask', 'boxes', 'points'\] are drawn on them"):
            pipeline(objects, [A.Letterbox(32), mix])
    pipeline(objects, [A.Letterbox(32), A.MixUp(num_classes=3, key="image", out="mixed")])  # a new field: fine


def test_dali_refuses_the_detection_ops_at_build_time(objects):
    pytest.importorskip("nvidia.dali")
    for op in (A.RandomIoUCrop(), A.RandomZoomOut(), A.ScaleJitter(64), A.RandomShortestSize(48), A.Letterbox(48)):
        pipe = pipeline(objects, [op, A.Resize((32, 32))])
        with pytest.raises(PipelineError, match=rf"backend='dali' has no DALI counterpart for: augment\[0\] "
                                                rf"{type(op).__name__}, "):
            pipe.loader(backend="dali")
    pipe = pipeline(objects, [A.Resize((32, 32)), A.ClampBoundingBoxes(), A.SanitizeBoundingBoxes()])
    with pytest.raises(PipelineError, match=r"augment\[1\] ClampBoundingBoxes, .*augment\[2\] SanitizeBoundingBoxes"):
        pipe.loader(backend="dali")


class MismatchedManifest(LabelledBoxManifest):
    """Sample 2 has one class id fewer than boxes: a bad annotation."""

    kind = "test-mismatched-manifest"

    def ref(self, index: int):
        ref = super().ref(index)
        if index == 2:
            ref.fields["labels"] = ref.fields["labels"][:-1]
        return ref


def test_labels_that_do_not_match_the_boxes_name_the_file(objects):
    # a sample-stage op after it reads the boxes: SanitizeBoundingBoxes runs per sample, in the workers
    ops = [A.Letterbox(32), A.SanitizeBoundingBoxes(), A.Letterbox(32)]
    per_sample = pipeline(objects, ops, source=MismatchedManifest)
    assert per_sample.plan.placed[1].stage.value == "sample"
    with pytest.raises(DecodeError, match=r"2\.jpg.*'boxes' has \[1\] objects but 'labels' has \[0\] rows"):
        list(per_sample.loader(num_workers=0, shuffle=False))
    skipping = pipeline(objects, ops, source=MismatchedManifest, on_error="skip")
    loader = skipping.loader(num_workers=0, shuffle=False)
    assert sum(b["image"].shape[0] for b in loader) == 12  # replaced by another sample
    assert loader.stats.errors == {"SanitizeBoundingBoxes: bad annotation": 1}
    in_batches = pipeline(objects, ops[:2], source=MismatchedManifest)  # the batch stage: the batch's counts
    with pytest.raises(ValueError, match=r"'boxes' has \[0, 1, 1, 1\] objects but 'labels' has \[0, 1, 0, 1\]"):
        list(in_batches.loader(num_workers=0, shuffle=False))


class InstanceMaskManifest(LabelledBoxManifest):
    """Also one mask per object, (N, H, W): its box's pixels; and an iscrowd flag per object."""

    kind = "test-instance-mask-manifest"

    def field_types(self) -> dict:
        return {**super().field_types(), "masks": per_object("mask"), "iscrowd": per_object("other")}

    def ref(self, index: int):
        ref = super().ref(index)
        row = self._rows[index]
        h, w = Image.open(row["path"]).size[::-1]  # (a path made absolute by the manifest)
        masks = torch.zeros(len(row["boxes"]), h, w, dtype=torch.uint8)
        for k, (x0, y0, x1, y1) in enumerate(row["boxes"]):
            masks[k, y0:y1, x0:x1] = 1
        ref.fields["masks"] = masks
        ref.fields["iscrowd"] = [k % 2 for k in range(len(row["boxes"]))]
        return ref


@pytest.mark.parametrize("collate", ["list", "pad"])
def test_one_mask_per_object_moves_and_is_dropped_with_its_box(objects, collate):
    ops = [A.RandomIoUCrop(), A.HorizontalFlip(), A.Letterbox(64, fill=0), A.RandomRotation(8),
           A.SanitizeBoundingBoxes()]
    pipe = pipeline(objects, ops, source=InstanceMaskManifest, collate={"masks": collate, "iscrowd": collate})
    assert pipe.plan.placed[0].op.inputs == ("image", "mask", "boxes", "points", "masks")
    assert pipe.plan.placed[-1].op.inputs == ("boxes", "points", "labels", "masks", "iscrowd")
    checked = 0
    for batch in pipe.loader(num_workers=0, shuffle=False):
        for i in range(batch["image"].shape[0]):
            bxs, masks, crowd = rows_of(batch, "boxes", i), rows_of(batch, "masks", i), rows_of(batch, "iscrowd", i)
            labels = rows_of(batch, "labels", i)
            assert len(bxs) == len(masks) == len(crowd) and masks.shape[-2:] == (64, 64)
            assert crowd.tolist() == [(int(k) - 1) % 2 for k in labels]  # the rows kept are the boxes'
            for box, mask in zip(bxs, masks):
                ys, xs = torch.nonzero(mask, as_tuple=True)
                seen = torch.stack((xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)).float()
                assert (box - seen).abs().max() <= 3.0, (box, seen)  # rotated: the box around the turned box
                checked += 1
    assert checked >= 8


def test_per_object_class_ids_are_checked_per_sample(objects, tmp_path):
    class Fractional(LabelledBoxManifest):
        kind = "test-fractional-manifest"

        def ref(self, index: int):
            ref = super().ref(index)
            if index == 1:
                ref.fields["labels"] = [1.5]
            if index == 3:
                del ref.fields["labels"]  # none given: none, whatever the boxes say
            return ref

    pipe = pipeline(objects, [A.Letterbox(32)], source=Fractional)
    with pytest.raises(DecodeError, match=r"1\.jpg.*field 'labels' \(class ids per object\) holds fractions"):
        list(pipe.loader(num_workers=0, shuffle=False))
    batch = next(iter(pipeline(objects, [A.Letterbox(32)], source=Fractional, on_error="replace").loader(
        num_workers=0, shuffle=False)))
    assert [len(v) for v in batch["labels"]] == [0, 0, 1, 0] and batch["labels"][2].dtype == torch.int64
    with pytest.raises(ValueError, match="one row per object is for"):
        per_object("image")
