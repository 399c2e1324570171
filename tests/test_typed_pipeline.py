"""Typed fields through whole pipelines, as a hostile user would drive them: an image, its mask,
boxes and keypoints through every geometric op; no boxes at all; boxes outside the image; a
mask of another size; a clip with boxes; list and padded boxes; a config round trip; DALI.

Objects are drawn at known boxes into the image and its mask (one class id each); after the
pipeline, each object's box recovered from the mask's pixels must match its transformed box.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.errors import DecodeError, PipelineError
from mediapipe.loaders.sources.folder import ManifestSource
from mediapipe.stages.collate import TensorList
from tests.helpers import BoxManifest, write_objects


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> Path:
    return write_objects(tmp_path_factory.mktemp("objects"))


def pipeline(rows: Path, ops: list, **kwargs) -> mp.Pipeline:
    return mp.Pipeline(BoxManifest(rows), {"image": mp.decoders.image(), "mask": mp.decoders.mask()}, ops,
                       batch_size=4, seed=kwargs.pop("seed", 2), device="cpu", **kwargs)


GEOMETRY = [A.RandomResizedCrop(64, scale=(0.5, 1.0)), A.Pad(4), A.RandomCrop(64, padding=3), A.HorizontalFlip(),
            A.VerticalFlip(), A.RandomRotation(20, interpolation="bilinear"),
            A.RandomAffine(10, translate=(0.05, 0.05), scale=(0.9, 1.1), shear=5), A.ColorJitter(0.3, 0.3),
            A.Normalize()]


def assert_boxes_follow_pixels(batch: dict, tolerance: float = 2.5) -> int:
    """Each object's box against the box of its class id's pixels in the mask; returns how many."""
    checked = 0
    boxes_ = batch["boxes"]
    for i in range(batch["mask"].shape[0]):
        rows = boxes_[i] if isinstance(boxes_, list) else boxes_[i, : int(batch["boxes_lengths"][i])]
        for k, box in enumerate(rows):
            ys, xs = torch.nonzero(batch["mask"][i, 0] == k + 1, as_tuple=True)
            if len(xs) < 30:  # (nearly) cropped away: its box shrinks to (nearly) nothing
                assert (box[2] - box[0]) * (box[3] - box[1]) < 40 * tolerance * tolerance
                continue
            seen = torch.stack((xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)).float()
            assert (box - seen).abs().max() <= tolerance, (i, k, box, seen)
            checked += 1
    return checked


OTHER_GEOMETRY = [A.Resize(72), A.RandomRotation(30, expand=True), A.Resize((80, 80), interpolation="nearest"),
                  A.CenterCrop(64), A.VerticalFlip(), A.ColorJitter(0.3, 0.3), A.Normalize()]


@pytest.mark.parametrize(("collate", "ops"), [("list", GEOMETRY), ("pad", GEOMETRY), ("list", OTHER_GEOMETRY)])
def test_every_geometric_op_moves_mask_boxes_and_keypoints_with_the_pixels(objects, collate, ops):
    pipe = pipeline(objects, ops, collate={"boxes": collate, "points": collate})
    plan = pipe.plan
    first = type(ops[0]).__name__
    assert f"{first}: sample (fused into decode) on image, mask, boxes, points" in repr(pipe)
    assert plan.ops[-2].inputs == ("image",)  # colour: the image only
    assert {n: str(t) for n, t in pipe.field_types.items() if n in ("image", "mask", "boxes")} == \
        {"image": "image", "mask": "mask", "boxes": "boxes (xyxy)"}
    checked = 0
    for epoch in range(2):
        loader = pipe.loader(num_workers=0)
        loader.set_epoch(epoch)
        for batch in loader:
            assert batch["image"].shape[1:] == (3, 64, 64) and batch["mask"].dtype == torch.uint8
            assert set(batch["mask"].unique().tolist()) <= {0, 1, 2, 3}  # class ids, never blended
            if collate == "list":
                assert isinstance(batch["boxes"], list) and all(b.shape[1:] == (4,) for b in batch["boxes"])
            else:
                assert batch["boxes"].ndim == 3 and batch["boxes_lengths"].shape == (4,)
            checked += assert_boxes_follow_pixels(batch, tolerance=2.5 if ops is GEOMETRY else 3.5)
            for i in range(4):  # each keypoint (an object's centre) sits inside its box
                n = len(batch["boxes"][i]) if collate == "list" else int(batch["boxes_lengths"][i])
                pts = batch["points"][i][:n]
                for box, pt in zip(batch["boxes"][i][:n], pts):
                    if (box[2] - box[0]) * (box[3] - box[1]) > 100:
                        assert box[0] - 1 <= pt[0] <= box[2] + 1 and box[1] - 1 <= pt[1] <= box[3] + 1
    assert checked >= 10


def test_same_boxes_with_workers_and_as_a_dataset(objects):
    pipe = pipeline(objects, GEOMETRY[:4] + [A.RandomRotation(15)])
    inline = [b["boxes"] for b in pipe.loader(num_workers=0, shuffle=False)]
    workers = [b["boxes"] for b in pipe.loader(num_workers=2, shuffle=False)]
    for a, b in zip(inline, workers, strict=True):
        assert isinstance(b, list) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    item = pipe.dataset()[1]
    assert torch.equal(item["boxes"], inline[0][1])


def test_samples_without_boxes_and_boxes_outside_the_image(tmp_path):
    rows = write_objects(tmp_path, count=5, outside=True)
    for collate in ("list", "pad"):
        pipe = pipeline(rows, GEOMETRY, collate={"boxes": collate})
        for batch in pipe.loader(num_workers=0, shuffle=False):
            for i in range(batch["image"].shape[0]):
                rows_ = batch["boxes"][i] if collate == "list" else batch["boxes"][i, : batch["boxes_lengths"][i]]
                assert rows_.shape[1:] == (4,) and torch.isfinite(rows_).all()
                # clamped to the image: the annotation outside it is a degenerate box on its edge
                assert (rows_ >= 0).all() and (rows_[:, 0::2] <= 64).all() and (rows_[:, 1::2] <= 64).all()
                assert ((rows_[:, 2] - rows_[:, 0]) * (rows_[:, 3] - rows_[:, 1]))[-1] == 0


def test_a_mask_of_another_size_names_the_file_and_the_op(tmp_path):
    rows = write_objects(tmp_path, count=4, mask_size={2: (30, 40)})
    pipe = pipeline(rows, [A.RandomResizedCrop(48), A.HorizontalFlip()])
    with pytest.raises(DecodeError, match=r"2\.jpg.*RandomResizedCrop draws once for \['image', 'mask', 'boxes', "
                                          r"'points'\] on the decoded \(\d+, \d+\), but mask is \(30, 40\)"):
        list(pipe.loader(num_workers=0, shuffle=False))
    pipe = pipeline(rows, [A.HorizontalFlip(), A.RandomResizedCrop(48)])  # the flip is not fused into a decoder
    with pytest.raises(DecodeError, match=r"HorizontalFlip draws once .* their sizes differ: image \(\d+, \d+\), "
                                          r"mask \(30, 40\)"):
        list(pipe.loader(num_workers=0, shuffle=False))
    skipping = pipeline(rows, [A.RandomResizedCrop(48)], on_error="skip")
    loader = skipping.loader(num_workers=0, shuffle=False)
    assert sum(b["image"].shape[0] for b in loader) == 4
    assert loader.stats.errors == {"RandomResizedCrop: fields of one draw differ in size": 1}


def test_a_clip_with_boxes(tmp_path):
    from mediapipe.synthetic.video import render_frames, write_video

    rows = []
    for i in range(4):
        write_video(tmp_path / f"v{i}.mkv", render_frames(48, 64, 12, seed=i), gop=4)
        rows.append({"path": f"v{i}.mkv", "label": i % 2, "boxes": [[10, 8, 30, 28], [40, 20, 64, 48]][: i % 3],
                     "points": [[12, 9]] * (i % 3)})
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    pipe = mp.Pipeline(BoxManifest(tmp_path / "rows.jsonl"), {"video": mp.decoders.video(clip_len=4)},
                       [A.RandomResizedCrop(32, scale=(0.4, 1.0)), A.HorizontalFlip(), A.TemporalReverse(),
                        A.Normalize()],
                       batch_size=2, seed=1, device="cpu", collate={"boxes": "pad"})
    assert "RandomResizedCrop: sample (fused into decode) on video, boxes, points" in repr(pipe)
    assert pipe.plan.ops[2].inputs == ("video",)  # time: the clip only (its boxes hold for every frame)
    batches = list(pipe.loader(num_workers=0, shuffle=False))
    assert batches[0]["video"].shape == (2, 4, 3, 32, 32) and batches[1]["boxes"].shape[1:] == (2, 4)
    ref = mp.Pipeline(BoxManifest(tmp_path / "rows.jsonl"), {"video": mp.decoders.video(clip_len=4)},
                      [A.RandomResizedCrop(32, scale=(0.4, 1.0))], batch_size=2, seed=1, device="cpu",
                      collate={"boxes": "pad"})
    flips = 0
    for b, r in zip(batches, ref.loader(num_workers=0, shuffle=False)):
        for i in range(2):  # the boxes of a clip the flip mirrored are mirrored; the others kept
            n = int(b["boxes_lengths"][i])
            ours, before = b["boxes"][i, :n], r["boxes"][i, :n]
            mirrored = torch.stack((32 - before[:, 2], before[:, 1], 32 - before[:, 0], before[:, 3]), 1)
            frames_mirrored = torch.equal(b["video"][i].flip(0), b["video"][i].flip(0))  # (reversed in time too)
            assert frames_mirrored and (torch.allclose(ours, before) or torch.allclose(ours, mirrored))
            flips += n > 0 and not torch.allclose(ours, before)
    assert flips >= 1


def test_config_round_trip_keeps_kinds_and_collate(objects):
    pipe = pipeline(objects, GEOMETRY[:3], collate={"boxes": "pad"})
    config = pipe.to_config()
    assert config["decode"]["mask"]["field_kind"] == "mask" and config["collate"] == {"boxes": "pad"}
    again = mp.Pipeline.from_config(json.loads(json.dumps(config)))
    assert again.field_types == pipe.field_types and again.augment == pipe.augment
    a = next(iter(pipe.loader(num_workers=0, shuffle=False)))
    b = next(iter(again.loader(num_workers=0, shuffle=False)))
    assert all(torch.equal(a[k], b[k]) for k in ("image", "mask", "boxes", "boxes_lengths"))


def test_build_time_errors_name_the_op_the_field_and_its_kind(objects):
    with pytest.raises(PipelineError, match=r"augment\[1\] Normalize cannot transform field 'mask' of kind mask"):
        pipeline(objects, [A.Resize((32, 32)), A.Normalize(keys=("image", "mask"))])
    with pytest.raises(PipelineError, match=r"augment\[1\] MixUp cannot transform field 'boxes' of kind boxes"):
        pipeline(objects, [A.Resize((32, 32)), A.MixUp(num_classes=3, keys=("image", "boxes"))])
    with pytest.raises(PipelineError, match=r"HorizontalFlip moves \['boxes'\] but no image"):
        pipeline(objects, [A.Resize((32, 32)), A.HorizontalFlip(keys="boxes")])
    with pytest.raises(PipelineError, match=r"Pad cannot transform field 'boxes'.*padding_mode='edge'"):
        pipeline(objects, [A.Pad(2, padding_mode="edge")])
    with pytest.raises(PipelineError, match=r"collate\['boxes'\]: collate='bogus'"):
        pipeline(objects, [], collate={"boxes": "bogus"})
    with pytest.raises(PipelineError, match=r"collate\['nothing'\]: no decoder or source"):
        pipeline(objects, [], collate={"nothing": "pad"})
    with pytest.raises(PipelineError, match=r"augment\[0\] Gain has no field to transform.*audio"):
        pipeline(objects, [A.Gain()])
    # moving the pixels but not what is drawn on them would silently misalign them
    with pytest.raises(PipelineError, match=r"augment\[0\] RandomResizedCrop moves \['image'\] but not \['mask', "
                                            r"'boxes', 'points'\].*leave keys unset"):
        pipeline(objects, [A.RandomResizedCrop(32, key="image")])
    pipeline(objects, [A.RandomResizedCrop(32, key="image", out="crop")])  # a new field: the rest stays valid
    pipeline(objects, [A.Resize((64, 64)), A.ColorJitter(0.2, key="image")])  # colour moves nothing


def test_dali_refuses_boxes_at_build_time(objects):
    pytest.importorskip("nvidia.dali")
    pipe = pipeline(objects, [A.RandomResizedCrop(48), A.HorizontalFlip()])
    with pytest.raises(PipelineError, match=r"augment\[0\] RandomResizedCrop\(field 'boxes' of kind boxes \(xyxy\)"):
        pipe.loader(backend="dali")


def test_list_boxes_cross_processes_packed():
    import pickle

    boxes_ = TensorList([torch.rand(3, 4), torch.rand(0, 4), torch.rand(1, 4)])
    again = pickle.loads(pickle.dumps(boxes_))
    assert isinstance(again, TensorList) and [b.shape[0] for b in again] == [3, 0, 1]
    assert all(torch.equal(a, b) for a, b in zip(boxes_, again))


class ListManifest(BoxManifest):
    """Boxes straight from the JSON rows, as lists: whatever an annotation file holds."""

    kind = "test-list-manifest"

    def ref(self, index: int):
        ref = ManifestSource.ref(self, index)
        ref.fields["boxes"] = self._rows[index]["boxes"]
        ref.fields["points"] = self._rows[index]["points"]
        return ref


def test_bad_annotations_name_the_sample_and_the_field(tmp_path):
    rows = write_objects(tmp_path, count=4)
    lines = [json.loads(line) for line in rows.read_text().splitlines()]
    lines[1]["boxes"] = [[1, 2, 3]]  # three numbers
    lines[2]["boxes"] = [[1, 2, float("nan"), 4]]
    rows.write_text("\n".join(json.dumps(r) for r in lines))
    ops = [A.Resize((32, 32)), A.HorizontalFlip()]
    source = ListManifest(rows)
    pipe = mp.Pipeline(source, {"image": mp.decoders.image(), "mask": mp.decoders.mask()}, ops, batch_size=4,
                       device="cpu")
    with pytest.raises(DecodeError, match=r"1\.jpg.*field 'boxes' \(boxes\) has shape \(1, 3\), expected \(N, 4\)"):
        list(pipe.loader(num_workers=0, shuffle=False))
    replacing = mp.Pipeline(source, {"image": mp.decoders.image(), "mask": mp.decoders.mask()}, ops, batch_size=4,
                            device="cpu", on_error="replace", collate={"boxes": "pad"})
    batch = next(iter(replacing.loader(num_workers=0, shuffle=False)))
    assert batch["valid"].tolist() == [True, False, False, True]
    assert batch["boxes_lengths"][1:3].tolist() == [0, 0]  # a failed sample has no objects
    loader = replacing.loader(num_workers=0, shuffle=False)
    list(loader)
    assert loader.stats.errors == {"source: bad annotation": 2}


def test_normalize_does_the_flip_on_the_image_and_the_flip_still_moves_the_rest(objects):
    pipe = pipeline(objects, [A.Resize((64, 64)), A.HorizontalFlip(p=0.5), A.Normalize()], collate={"boxes": "pad"})
    assert pipe.plan.absorbed == {2: pipe.plan.placed[1]}  # the flip is done by Normalize, on the CPU
    flipped = 0
    unflipped = pipeline(objects, [A.Resize((64, 64))], collate={"boxes": "pad"}).loader(num_workers=0, shuffle=False)
    for batch, ref in zip(pipe.loader(num_workers=0, shuffle=False), unflipped, strict=True):
        assert_boxes_follow_pixels(batch, tolerance=1.5)
        red = batch["image"][:, 0]
        for i in range(batch["image"].shape[0]):
            for k in range(int(batch["boxes_lengths"][i])):  # the object's red pixels are under its mask
                inside = batch["mask"][i, 0] == k + 1
                assert red[i][inside].mean() > red[i][~inside].mean() + 0.8
        flipped += sum(not torch.equal(a, b) for a, b in zip(batch["boxes"], ref["boxes"]))
    assert flipped >= 1


def test_images_of_several_sizes_batch_as_lists_with_their_boxes(objects):
    """No size-equalising op: images, masks and boxes batch as lists, and the batch ops run on each
    sample with its own canvas."""
    pipe = pipeline(objects, [A.Resize(48), A.HorizontalFlip(), A.RandomRotation(10), A.Normalize()],
                    collate={"image": "list", "mask": "list"})
    assert pipe.plan.absorbed == {}  # Normalize's flip-while-writing needs a stacked batch
    shapes = set()
    for batch in pipe.loader(num_workers=2, shuffle=False):
        assert isinstance(batch["image"], list) and isinstance(batch["boxes"], list)
        for image, mask in zip(batch["image"], batch["mask"]):
            assert image.dtype == torch.float32 and image.shape[-2:] == mask.shape[-2:] and min(image.shape[-2:]) == 48
            shapes.add(tuple(image.shape))
        for mask, boxes_ in zip(batch["mask"], batch["boxes"]):
            assert_boxes_follow_pixels({"mask": mask[None], "boxes": [boxes_]})
    assert len(shapes) > 1


def test_boxes_stacked_by_mistake_say_how_to_batch_them(objects):
    pipe = pipeline(objects, [A.Resize((32, 32))], collate={"boxes": "stack"})
    with pytest.raises(PipelineError, match=r"field 'boxes' has shapes .*collate=\{'boxes': 'list'\}"):
        list(pipe.loader(num_workers=0, shuffle=False))


def test_dali_resamples_a_mask_as_a_mask(tmp_path):
    """The lowering asks the kernels' rule: nearest and fill 0 for a mask, whatever the op's
    interpolation and fill for the image. The photo and its mask are one PNG of class ids here
    (a folder source gives both fields the same file)."""
    pytest.importorskip("nvidia.dali")
    (tmp_path / "c").mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        ids = np.zeros((120, 160), np.uint8)
        for k in range(1, 4):
            y, x = rng.integers(0, 80), rng.integers(0, 110)
            ids[y : y + 40, x : x + 50] = k
        Image.fromarray(ids).save(tmp_path / "c" / f"{i}.png")
    ops = [A.RandomResizedCrop(48, scale=(0.4, 1.0), interpolation="bicubic"), A.HorizontalFlip(),
           A.RandomRotation(20, interpolation="bilinear", fill=128)]
    pipe = mp.Pipeline(mp.loaders.folder(tmp_path), {"image": mp.decoders.image(), "mask": mp.decoders.mask()},
                       ops, batch_size=4, seed=3, device="cpu")
    dali = next(iter(pipe.loader(backend="dali", rng="keyed", shuffle=False)))
    ours = next(iter(pipe.loader(shuffle=False)))
    assert set(dali["mask"].unique().tolist()) <= {0, 1, 2, 3}  # never blended, and filled with 0, not 128
    assert not set(dali["image"].unique().tolist()) <= {0, 1, 2, 3, 128}  # the image is: bicubic and bilinear
    assert (dali["mask"] == ours["mask"]).float().mean() > 0.9  # the same draws (borders round apart)


class SparseManifest(BoxManifest):
    """Rows that leave out boxes and keypoints when an image has no object (as annotation files
    often do); keypoints of 2 per object."""

    kind = "test-sparse-manifest"

    def ref(self, index: int):
        ref = ManifestSource.ref(self, index)
        row = self._rows[index]
        if row["boxes"]:
            ref.fields["boxes"] = row["boxes"]
            ref.fields["points"] = [[p, p] for p in row["points"]]  # (N, 2, 2)
        return ref


@pytest.mark.parametrize("collate", ["list", "pad"])
def test_a_sample_without_the_field_has_no_objects(objects, collate):
    pipe = mp.Pipeline(SparseManifest(objects), {"image": mp.decoders.image(), "mask": mp.decoders.mask()},
                       [A.RandomResizedCrop(40), A.HorizontalFlip()], batch_size=4, device="cpu",
                       collate={"boxes": collate, "points": collate})
    batch = next(iter(pipe.loader(num_workers=0, shuffle=False)))  # samples 0 (none), 1, 2, 3
    n = [len(b) for b in batch["boxes"]] if collate == "list" else batch["boxes_lengths"].tolist()
    assert n[0] == 0 and all(k > 0 for k in n[1:])
    points = batch["points"]
    assert (points[0].shape == (0, 2)) if collate == "list" else (points.shape[2:] == (2, 2) and not points[0].any())
