"""The COCO source: boxes, labels, crowd flags, image ids and masks as the annotation file has them;
objects found again in the pixels after a crop and flip where the delivered boxes say; bad
annotation files refused with the file, the image id and the field named."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.errors import SourceError
from mediapipe.synthetic.detection import CATEGORIES
from tests.helpers import assert_boxes_are_where_the_pixels_are, miss, state_after


def coco_json(dataset) -> dict:
    return json.loads(dataset.annotations.read_text())


def objects_by_image(document: dict) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {image["id"]: [] for image in document["images"]}
    for a in document["annotations"]:
        out[a["image_id"]].append(a)
    return out


@pytest.mark.parametrize("box_format", ["xyxy", "xywh", "cxcywh"])
def test_boxes_labels_crowd_and_ids_are_the_files(detection_dataset, box_format):
    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, box_format=box_format)
    document = coco_json(detection_dataset)
    ids = sorted(c["id"] for c in document["categories"])
    assert source.classes == [name for _, name in sorted(CATEGORIES)] and source.category_ids == ids
    assert str(source.field_types()["boxes"]) == f"boxes ({box_format})"
    per_image = objects_by_image(document)
    assert len(source) == len(document["images"]) and any(not v for v in per_image.values())
    for i, image in enumerate(document["images"]):
        ref = source.ref(i)
        objs = per_image[image["id"]]
        assert ref.fields["image_id"] == image["id"] and ref.key == image["file_name"]
        assert ref.meta == {"width": image["width"], "height": image["height"]}
        xywh = torch.tensor([a["bbox"] for a in objs], dtype=torch.float64).reshape(-1, 4)
        x, y, w, h = xywh.unbind(1)
        expected = {"xyxy": torch.stack([x, y, x + w, y + h], 1), "xywh": xywh,
                    "cxcywh": torch.stack([x + w / 2, y + h / 2, w, h], 1)}[box_format]
        assert ref.fields["boxes"].dtype == torch.float32 and ref.fields["boxes"].shape == (len(objs), 4)
        torch.testing.assert_close(ref.fields["boxes"].double(), expected, atol=1e-4, rtol=0)
        assert ref.fields["labels"].tolist() == [ids.index(a["category_id"]) for a in objs]
        assert ref.fields["iscrowd"].tolist() == [a["iscrowd"] for a in objs]
        assert ref.blob("image", "image").path == str(detection_dataset.images / image["file_name"])


def test_masks_are_the_polygons_and_rle_of_each_object(detection_dataset):
    pytest.importorskip("pycocotools")
    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, masks=True)
    document = coco_json(detection_dataset)
    per_image = objects_by_image(document)
    kinds = set()
    for i, image in enumerate(document["images"]):
        masks = source.ref(i).fields["masks"]
        objs = per_image[image["id"]]
        assert masks.dtype == torch.uint8 and masks.shape == (len(objs), image["height"], image["width"])
        for mask, a in zip(masks, objs):
            assert set(mask.unique().tolist()) <= {0, 1}
            ys, xs = torch.nonzero(mask, as_tuple=True)
            x, y, w, h = a["bbox"]
            extent = [xs.min().item(), ys.min().item(), xs.max().item() + 1, ys.max().item() + 1]
            rectangle = isinstance(a["segmentation"], list) and len(a["segmentation"][0]) == 8
            kinds.add("rle" if a["iscrowd"] else "rectangle" if rectangle else "ellipse")
            if a["iscrowd"] or rectangle:  # RLE of the drawn pixels, polygons on pixel edges: exact
                assert extent == [x, y, x + w, y + h]
                assert mask.sum().item() == a["area"]
            else:  # 24 points around an ellipse: its pixels within a pixel
                assert np.abs(np.subtract(extent, [x, y, x + w, y + h])).max() <= 1
                assert abs(mask.sum().item() - a["area"]) < 0.08 * a["area"]
    assert kinds == {"rle", "rectangle", "ellipse"}


@pytest.mark.parametrize("collate", ["list", "pad"])
def test_objects_in_the_pixels_are_where_the_boxes_say_after_crop_and_flip(detection_dataset, collate):
    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, collate=collate)
    pipe = mp.Pipeline(source, {"image": mp.decoders.image()},
                       [A.RandomResizedCrop(96, scale=(0.4, 1.0)), A.HorizontalFlip(), A.VerticalFlip(p=0.3)],
                       batch_size=4, seed=5, device="cpu")
    assert "RandomResizedCrop: sample (fused into decode) on image, boxes" in repr(pipe)
    matched = 0
    for epoch in range(2):
        loader = pipe.loader(num_workers=1 if collate == "pad" else 0)
        loader.set_epoch(epoch)
        for batch in loader:
            if collate == "pad":
                assert batch["boxes"].shape[:2] == batch["labels"].shape[:2]
                assert torch.equal(batch["boxes_lengths"], batch["labels_lengths"])
            else:
                assert [len(b) for b in batch["boxes"]] == [len(v) for v in batch["labels"]]
            assert batch["image_id"].dtype == torch.int64
            matched += assert_boxes_are_where_the_pixels_are(batch)
    assert matched >= 40


@pytest.mark.parametrize("ops", [
    [A.RandomResizedCrop(80, scale=(0.5, 1.0)), A.HorizontalFlip()],
    [A.RandomIoUCrop(), A.Resize((80, 80)), A.SanitizeBoundingBoxes(), A.HorizontalFlip(), A.VerticalFlip(p=0.3)],
], ids=["resized-crop", "iou-crop-sanitize"])
def test_masks_and_boxes_move_with_the_pixels(detection_dataset, ops):
    pytest.importorskip("pycocotools")
    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, masks=True)
    pipe = mp.Pipeline(source, {"image": mp.decoders.image()}, ops, batch_size=4, seed=1, device="cpu")
    checked = empty = 0
    for epoch in range(2):
        loader = pipe.loader(num_workers=0)
        loader.set_epoch(epoch)
        for batch in loader:
            assert_boxes_are_where_the_pixels_are(batch, dropped_at_edges=isinstance(ops[0], A.RandomIoUCrop))
            for image, masks, boxes, labels, crowd in zip(batch["image"], batch["masks"], batch["boxes"],
                                                          batch["labels"], batch["iscrowd"]):
                assert masks.shape[1:] == image.shape[1:] and len(masks) == len(boxes) == len(labels) == len(crowd)
                empty += len(masks) == 0
                for mask, box in zip(masks, boxes):
                    ys, xs = torch.nonzero(mask, as_tuple=True)
                    if len(xs) < 20:
                        continue
                    extent = [xs.min().item(), ys.min().item(), xs.max().item() + 1, ys.max().item() + 1]
                    assert miss(box.tolist(), extent, *image.shape[1:]) <= 1.5
                    inside = image[:, ys, xs].float().mean(dim=1)  # the object's flat colour, not the dark photo
                    assert inside.max() > 180
                    checked += 1
    assert checked >= 30 and empty > 0  # samples without objects (one mask each: none) go through too


def test_sanitize_drops_the_same_rows_of_every_per_object_field(detection_dataset):
    pytest.importorskip("pycocotools")
    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, masks=True, collate="pad")
    assert {n: str(t) for n, t in source.field_types().items()} == {
        "boxes": "boxes (xyxy)", "labels": "label per object", "iscrowd": "other per object", "masks": "mask per object"}
    crop = [A.RandomIoUCrop(min_scale=0.3, max_scale=0.5, sampler_options=(0.0,)), A.Resize((64, 64))]
    before = mp.Pipeline(source, {"image": mp.decoders.image()}, crop, batch_size=16, seed=4, device="cpu")
    after = mp.Pipeline(source, {"image": mp.decoders.image()}, [*crop, A.SanitizeBoundingBoxes()], batch_size=16,
                        seed=4, device="cpu")
    a, b = next(iter(before.loader(shuffle=False))), next(iter(after.loader(shuffle=False)))
    dropped = 0
    for i in range(16):
        n, m = int(a["boxes_lengths"][i]), int(b["boxes_lengths"][i])
        boxes = a["boxes"][i, :n]
        keep = ((boxes[:, 2] - boxes[:, 0]) >= 1) & ((boxes[:, 3] - boxes[:, 1]) >= 1)  # zeros: centre cropped out
        assert m == int(keep.sum()) and int(b["labels_lengths"][i]) == int(b["iscrowd_lengths"][i]) == m
        assert torch.equal(b["boxes"][i, :m], boxes[keep])
        assert torch.equal(b["labels"][i, :m], a["labels"][i, :n][keep])
        assert torch.equal(b["iscrowd"][i, :m], a["iscrowd"][i, :n][keep])
        assert torch.equal(b["masks"][i], a["masks"][i][keep])
        dropped += n - m
    assert dropped > 0


def test_empty_images_are_kept_with_no_boxes_or_dropped(detection_dataset):
    document = coco_json(detection_dataset)
    empty = {i for i, v in objects_by_image(document).items() if not v}
    kept = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images)
    dropped = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, drop_empty=True)
    assert len(kept) - len(dropped) == len(empty) > 0
    assert {kept.image_id(i) for i in range(len(kept)) if len(kept.ref(i).fields["boxes"]) == 0} == empty
    assert not empty & {dropped.image_id(i) for i in range(len(dropped))}
    pipe = mp.Pipeline(kept, {"image": mp.decoders.image()}, [A.Resize((48, 48))], batch_size=16, device="cpu")
    batch = next(iter(pipe.loader(num_workers=0, shuffle=False)))
    sizes = {int(i): len(b) for i, b in zip(batch["image_id"], batch["boxes"])}
    assert all(sizes[i] == 0 for i in empty) and all(b.shape[1:] == (4,) for b in batch["boxes"])


def test_source_pickles_and_round_trips_through_the_config(detection_dataset):
    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, box_format="cxcywh",
                             drop_empty=True, collate="pad")
    again = pickle.loads(pickle.dumps(source))
    assert len(again) == len(source) and torch.equal(again.ref(3).fields["boxes"], source.ref(3).fields["boxes"])
    pipe = mp.Pipeline(source, {"image": mp.decoders.image()}, [A.Resize((40, 40)), A.HorizontalFlip()],
                       batch_size=2, device="cpu")
    rebuilt = mp.Pipeline.from_config(json.loads(json.dumps(pipe.to_config())))
    assert rebuilt.source.to_config() == source.to_config() and rebuilt.field_types == pipe.field_types
    a, b = next(iter(pipe.loader(shuffle=False))), next(iter(rebuilt.loader(shuffle=False)))
    assert torch.equal(a["boxes"], b["boxes"]) and torch.equal(a["image"], b["image"])


def test_the_same_seed_gives_the_same_boxes_with_or_without_workers_and_after_a_resume(detection_dataset):
    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images)
    pipe = mp.Pipeline(source, {"image": mp.decoders.image()},  # the IoU crop draws from the boxes
                       [A.RandomIoUCrop(), A.RandomResizedCrop(64), A.SanitizeBoundingBoxes(), A.HorizontalFlip()],
                       batch_size=4, seed=9, device="cpu")
    inline = [b["boxes"] for b in pipe.loader(num_workers=0)]
    workers = [b["boxes"] for b in pipe.loader(num_workers=2)]
    resumed = pipe.loader(num_workers=0)
    resumed.load_state_dict(state_after(pipe.loader(num_workers=0), 2))
    rest = [b["boxes"] for b in resumed]
    assert len(inline) == len(workers) == 4 and len(rest) == 2
    for x, y in zip(inline, workers):
        assert all(torch.equal(p, q) for p, q in zip(x, y))
    for x, y in zip(inline[2:], rest):
        assert all(torch.equal(p, q) for p, q in zip(x, y))


# -- bad annotation files ------------------------------------------------------------------------
@pytest.fixture
def editable(detection_dataset, tmp_path: Path):
    """A copy of the dataset whose annotation file a test rewrites."""
    root = tmp_path / "coco"
    shutil.copytree(detection_dataset.root, root)
    document = json.loads((root / "annotations.json").read_text())

    def write(change) -> Path:
        change(document)
        (root / "annotations.json").write_text(json.dumps(document))
        return root / "annotations.json"

    return root, document, write


def first_object(document: dict) -> dict:
    return document["annotations"][0]


BAD = {
    "no bbox": (lambda d: first_object(d).pop("bbox"), "bbox", "expected [x, y, width, height]"),
    "bbox of 3": (lambda d: first_object(d).update(bbox=[1, 2, 3]), "bbox", "4 finite numbers"),
    "bbox text": (lambda d: first_object(d).update(bbox=["1", 2, 3, 4]), "bbox", "4 finite numbers"),
    "box outside": (lambda d: first_object(d).update(bbox=[5, 5, 10_000, 10]), "bbox", "leaves the"),
    "negative size": (lambda d: first_object(d).update(bbox=[5, 5, -3, 10]), "bbox", "negative size"),
    "unknown category": (lambda d: first_object(d).update(category_id=5), "category_id", "is not a category"),
    "crowd flag": (lambda d: first_object(d).update(iscrowd=2), "iscrowd", "expected 0 or 1"),
    "unknown image": (lambda d: first_object(d).update(image_id=3), "image_id", "no image has id 3"),
    "missing file": (lambda d: d["images"][1].update(file_name="nope.jpg"), "file_name", "no such file"),
    "outside": (lambda d: d["images"][1].update(file_name="../annotations.json"), "file_name", "outside"),
    "absolute": (lambda d: d["images"][1].update(file_name="/etc/passwd"), "file_name", "outside"),
    "width": (lambda d: d["images"][1].update(width="640"), "width", "expected an int"),
    "twice": (lambda d: d["images"][1].update(id=d["images"][0]["id"]), "id", "listed twice"),
    "bbox past float": (lambda d: first_object(d).update(bbox=[1, 1, 10**400, 3]), "bbox", "4 finite numbers"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_annotations_name_the_file_the_image_and_the_field(editable, case):
    root, document, write = editable
    change, field, reason = BAD[case]
    image_id = first_object(document)["image_id"] if "image" not in case and case not in (
        "missing file", "outside", "absolute", "width", "twice") else document["images"][1]["id"]
    if case == "twice":
        image_id = document["images"][0]["id"]
    if case == "unknown image":
        image_id = 3
    path = write(change)
    with pytest.raises(SourceError) as err:
        mp.loaders.coco(path, root / "images")
    message = str(err.value)
    assert "annotations.json" in message and f"image {image_id}" in message, message
    assert field in message and reason in message, message


def test_links_out_of_the_images_folder_are_refused(editable, tmp_path: Path):
    root, document, write = editable
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(b"not yours")
    target = root / "images" / document["images"][2]["file_name"]
    target.unlink()
    os.symlink(secret, target)
    with pytest.raises(SourceError, match=rf"image {document['images'][2]['id']}'?: .*file_name.*a link to .*outside"):
        mp.loaders.coco(write(lambda d: None), root / "images")


def test_bad_segmentations_are_refused_when_masks_are_asked_for(editable):
    root, document, write = editable
    crowd = next(a for a in document["annotations"] if a["iscrowd"])
    path = write(lambda d: next(a for a in d["annotations"] if a["iscrowd"])["segmentation"].update(size=[3, 4]))
    assert len(mp.loaders.coco(path, root / "images")) == len(document["images"])  # boxes only: not read
    with pytest.raises(SourceError, match=rf"image {crowd['image_id']}'?: .*segmentation.size: \[3, 4\]"):
        mp.loaders.coco(path, root / "images", masks=True)
    path = write(lambda d: d["annotations"][0].update(segmentation=[[1, 2, 3]]))
    with pytest.raises(SourceError, match=r"segmentation: expected polygons"):
        mp.loaders.coco(path, root / "images", masks=True)


def test_files_that_are_not_coco_or_too_large(editable, tmp_path: Path):
    root, _, _ = editable
    (root / "bad.json").write_text('{"images": [')
    with pytest.raises(SourceError, match="bad.json.*invalid JSON"):
        mp.loaders.coco(root / "bad.json", root / "images")
    (root / "list.json").write_text("[]")
    (root / "deep.json").write_text('{"images": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(SourceError, match="deep.json.*invalid JSON: nested too deeply"):
        mp.loaders.coco(root / "deep.json", root / "images")
    with pytest.raises(SourceError, match="expected a JSON object"):
        mp.loaders.coco(root / "list.json", root / "images")
    with pytest.raises(SourceError, match="more than max_json_bytes=100"):
        mp.loaders.coco(root / "annotations.json", root / "images", max_json_bytes=100)
    with pytest.raises(SourceError, match="images_dir is not a folder"):
        mp.loaders.coco(root / "annotations.json", tmp_path / "none")


def test_a_sample_whose_masks_would_be_too_large_is_a_skippable_error(detection_dataset, monkeypatch):
    pytest.importorskip("pycocotools")
    from mediapipe.loaders.sources import targets

    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, masks=True)
    sizes = [len(source.ref(i).fields["boxes"]) for i in range(len(source))]
    monkeypatch.setattr(targets, "MAX_MASK_BYTES", 1)
    with pytest.raises(SourceError, match="masks of .* would take"):
        source.ref(sizes.index(max(sizes)))
    pipe = mp.Pipeline(source, {"image": mp.decoders.image()}, [A.CenterCrop(40)], batch_size=4, device="cpu",
                       on_error="replace")
    loader = pipe.loader(num_workers=0, shuffle=False)
    valid = torch.cat([batch["valid"] for batch in loader])
    assert valid.tolist() == [n == 0 for n in sizes]  # only the samples without objects load
    assert loader.stats.errors == {"source: bad annotation": sum(n > 0 for n in sizes)}


def test_ids_past_int64_and_huge_values_give_short_errors(editable):
    root, document, write = editable
    with pytest.raises(SourceError, match=r"images\[0\]\.id: expected an int"):
        mp.loaders.coco(write(lambda d: d["images"][0].update(id=10**30)), root / "images")
    document["images"][0]["id"] = 1000
    path = write(lambda d: first_object(d).update(bbox=list(range(100_000)), image_id=1000))
    with pytest.raises(SourceError, match=r"bbox: expected \[x, y, width, height\]") as err:
        mp.loaders.coco(path, root / "images")
    assert len(str(err.value)) < 500  # the value quoted cut short, not 100,000 numbers


def crowd_object(document: dict) -> dict:
    return next(a for a in document["annotations"] if a["iscrowd"])


# pycocotools traces a polygon in int pixels at 5x (a coordinate past 2**31 / 5 overflows and crashes
# the interpreter) and writes RLE runs without a bound (runs past H x W write past the mask, runs
# short of it leave pixels of uninitialised memory): each is refused before pycocotools sees it
HOSTILE_SEGMENTATIONS = {
    "polygon far right": (lambda d: first_object(d).update(segmentation=[[1e300, 2, 3, 1e300, 5, 6]]),
                          "segmentation: a polygon point lies further than the image's size outside"),
    "polygon far left": (lambda d: first_object(d).update(segmentation=[[-1e30, 2, 3, 4, 5, 6]]),
                         "segmentation: a polygon point lies further"),
    "runs short": (lambda d: crowd_object(d)["segmentation"].update(counts="0?"), "segmentation.counts"),
    "runs past": (lambda d: crowd_object(d)["segmentation"].update(counts="zzzzzzzz"), "segmentation.counts"),
    "no runs": (lambda d: crowd_object(d)["segmentation"].update(counts=""), "segmentation.counts"),
    "not ascii": (lambda d: crowd_object(d)["segmentation"].update(counts="\u00e9"), "segmentation.counts"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_SEGMENTATIONS))
def test_segmentations_pycocotools_would_crash_on_or_leave_unwritten_are_refused(editable, case):
    root, document, write = editable
    change, reason = HOSTILE_SEGMENTATIONS[case]
    image_id = (first_object(document) if "polygon" in case else crowd_object(document))["image_id"]
    path = write(change)
    assert len(mp.loaders.coco(path, root / "images")) == len(document["images"])  # boxes only: not read
    with pytest.raises(SourceError) as err:
        mp.loaders.coco(path, root / "images", masks=True)
    assert f"image {image_id}" in str(err.value) and reason in str(err.value), str(err.value)


def test_rle_runs_are_read_as_pycocotools_writes_them():
    """`rle_string_counts` against pycocotools' own encoding: the runs it reads from each string
    rebuild the mask that was encoded, pixel for pixel."""
    mask_api = pytest.importorskip("pycocotools.mask")
    from mediapipe.loaders.sources.targets import rle_string_counts

    rng = np.random.default_rng(4)
    for trial in range(60):
        h, w = (int(v) for v in rng.integers(1, 400, 2))
        mask = rng.random((h, w)) < rng.random() if trial % 3 else np.zeros((h, w), bool)
        if trial % 3 == 2:
            mask[int(rng.integers(0, h)):, int(rng.integers(0, w)):] = True  # long runs: several characters each
        runs = rle_string_counts(mask_api.encode(np.asfortranarray(mask.astype(np.uint8)))["counts"])
        assert runs is not None and runs.sum() == h * w and (runs >= 0).all()
        rebuilt = np.repeat(np.arange(len(runs)) % 2, runs).astype(bool).reshape(w, h).T  # column-major
        assert np.array_equal(rebuilt, mask), trial
    for text in ("\x7f", "0?x", "z" * 8, "\u00e9", "P"):  # outside the alphabet, unfinished, too long
        assert rle_string_counts(text) is None, text


def test_decoded_masks_never_hold_memory_pycocotools_left_unwritten():
    pytest.importorskip("pycocotools")
    from mediapipe.loaders.sources.targets import decode_masks

    for counts in ("0?", "", "1"):  # runs of 0 + 15, none, 1: short of 100 pixels
        with pytest.raises(SourceError, match="segmentation.counts: expected an RLE string"):
            decode_masks([{"size": [10, 10], "counts": counts}], 10, 10, "x.json")
    whole = decode_masks([{"size": [10, 10], "counts": "0T3"}], 10, 10, "x.json")  # 0 unset, 100 set
    assert whole.shape == (1, 10, 10) and whole.min() == 1 and whole.max() == 1


def test_polygons_whose_outline_would_take_too_much_to_trace_are_refused(monkeypatch):
    pytest.importorskip("pycocotools")
    from mediapipe.loaders.sources import targets

    zigzag = [float(v) for i in range(200) for v in (0.0 if i % 2 else 50.0, i / 4)]  # 200 points across 50 px
    assert targets.decode_masks([[zigzag]], 50, 50, "x.json").shape == (1, 50, 50)
    monkeypatch.setattr(targets, "MAX_MASK_BYTES", 100_000)  # room for the mask, not for tracing its outline
    with pytest.raises(SourceError, match="polygons whose outlines pycocotools would trace in .* bytes"):
        targets.decode_masks([[zigzag]], 50, 50, "x.json")


@pytest.mark.parametrize("collate", ["list", "pad"])
def test_a_replaced_sample_has_no_objects(editable, collate):
    """on_error="replace": the slot of an unreadable image holds no object in any per-object field
    (held: tested so that it stays so)."""
    pytest.importorskip("pycocotools")
    root, document, _ = editable
    broken = next(i for i, image in enumerate(document["images"])
                  if any(a["image_id"] == image["id"] for a in document["annotations"]))
    (root / "images" / document["images"][broken]["file_name"]).write_bytes(b"not a JPEG")
    source = mp.loaders.coco(root / "annotations.json", root / "images", masks=True, collate=collate)
    pipe = mp.Pipeline(source, {"image": mp.decoders.image()}, [A.Resize((32, 32)), A.SanitizeBoundingBoxes()],
                       batch_size=4, device="cpu", on_error="replace")
    slots = 0
    for batch in pipe.loader(num_workers=0, shuffle=False):
        for i in torch.nonzero(~batch["valid"]).flatten().tolist():
            slots += 1
            if collate == "list":
                assert [tuple(batch[k][i].shape) for k in ("boxes", "labels", "iscrowd", "masks")] == [
                    (0, 4), (0,), (0,), (0, 32, 32)]
            else:
                assert all(int(batch[f"{k}_lengths"][i]) == 0 and not batch[k][i].any()
                           for k in ("boxes", "labels", "iscrowd"))
                assert tuple(batch["masks"][i].shape) == (0, 32, 32)
    assert slots == 1
