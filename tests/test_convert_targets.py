"""`mediapipe convert` of detection datasets: each sample's boxes, labels, crowd flags and masks go
into its .json member and come back from `mp.loaders.shards` as the same typed fields, identical
to the source's; resized images get scaled targets; inputs whose targets would not match are
refused; a manifest or member that lies about its targets is refused with its name."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.dataset.convert import convert
from mediapipe.dataset.transcode import TranscodeOptions
from mediapipe.errors import SourceError
from mediapipe.fields import FieldType
from mediapipe.loaders.sources.targets import masks_to_rle, targets_from_json
from mediapipe.synthetic.detection import find_flat_objects
from tests.helpers import miss


def by_image_id(source) -> dict[int, dict]:
    return {ref.fields["image_id"]: ref.fields for ref in (source.ref(i) for i in range(len(source)))}


@pytest.fixture(scope="module")
def coco_shards(detection_dataset, tmp_path_factory) -> Path:
    pytest.importorskip("pycocotools")
    out = tmp_path_factory.mktemp("coco-shards") / "out"
    cli = [sys.executable, "-m", "mediapipe.cli", "convert", str(detection_dataset.annotations), str(out),
           "--images-dir", str(detection_dataset.images), "--masks", "--shard-size", "5", "--no-progress"]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "16/16 inputs converted into 4 shards" in done.stdout
    return out


def test_coco_to_shards_gives_back_identical_targets(detection_dataset, coco_shards):
    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, masks=True)
    shards = mp.loaders.shards(coco_shards)
    assert shards.field_types() == source.field_types() and shards.classes == source.classes
    manifest = json.loads((coco_shards / "manifest.json").read_text())
    assert manifest["field_types"]["boxes"] == {"kind": "boxes", "format": "xyxy", "collate": "list"}
    theirs, ours = by_image_id(source), by_image_id(shards)
    assert theirs.keys() == ours.keys()
    for image_id, fields in theirs.items():
        for name in ("boxes", "labels", "iscrowd", "masks"):
            got = ours[image_id][name]
            assert got.dtype == fields[name].dtype and torch.equal(got, fields[name]), (image_id, name)
    assert sum(len(f["boxes"]) == 0 for f in ours.values()) > 0  # images without objects too


def test_a_pipeline_over_the_shards_delivers_what_it_does_over_the_coco_file(detection_dataset, coco_shards):
    def batches(source) -> dict[int, tuple]:
        pipe = mp.Pipeline(source, {"image": mp.decoders.image()}, [A.RandomCrop(72), A.HorizontalFlip(p=1.0),
                                                                     A.CenterCrop(64)],
                           batch_size=4, seed=3, device="cpu")
        out = {}
        for batch in pipe.loader(num_workers=0, shuffle=False):
            for i, image_id in enumerate(batch["image_id"].tolist()):
                out[image_id] = (batch["image"][i], batch["boxes"][i], batch["labels"][i], batch["masks"][i])
        return out

    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, masks=True)
    a, b = batches(source), batches(mp.loaders.shards(coco_shards))
    assert a.keys() == b.keys()
    for image_id in a:  # JPEGs are copied byte for byte: pixels equal where the crop lands the same
        image_a, boxes_a, labels_a, masks_a = a[image_id]
        image_b, boxes_b, labels_b, masks_b = b[image_id]
        assert torch.equal(labels_a, labels_b) and masks_a.shape == masks_b.shape
        assert boxes_a.shape == boxes_b.shape and image_a.shape == image_b.shape


def test_yolo_to_shards_with_the_python_api(detection_dataset, tmp_path: Path):
    source = mp.loaders.yolo(detection_dataset.images, classes=list(detection_dataset.classes), box_format="cxcywh")
    result = convert(source, tmp_path / "out", shard_size=6)
    assert result.num_samples == len(source) and not result.failures
    shards = mp.loaders.shards(tmp_path / "out")
    assert shards.field_types() == source.field_types() and shards.classes == list(detection_dataset.classes)
    keys = {source.ref(i).key.rsplit(".", 1)[0]: source.ref(i).fields for i in range(len(source))}
    for i in range(len(shards)):
        ref = shards.ref(i)
        fields = keys[ref.key]
        assert torch.equal(ref.fields["boxes"], fields["boxes"]) and torch.equal(ref.fields["labels"], fields["labels"])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["source"].startswith("yolo: ")
    with pytest.raises(FileExistsError):
        convert(source, tmp_path / "out")
    assert convert(source, tmp_path / "out", shard_size=6, resume=True).num_samples == len(source)


def test_resized_images_get_scaled_boxes_and_masks(detection_dataset, tmp_path: Path):
    pytest.importorskip("pycocotools")
    source = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, masks=True)
    convert(source, tmp_path / "out", options=TranscodeOptions(image_max_side=112))
    shards = mp.loaders.shards(tmp_path / "out")
    original, resized = by_image_id(source), by_image_id(shards)
    image_of = {shards.ref(i).fields["image_id"]: i for i in range(len(shards))}
    checked = 0
    for image_id, fields in resized.items():
        ref = shards.ref(image_of[image_id])
        height, width = ref.meta["height"], ref.meta["width"]
        assert max(height, width) == 112 and fields["masks"].shape[1:] == (height, width)
        before = original[image_id]["masks"].shape[1:]
        scale = torch.tensor([width / before[1], height / before[0]] * 2)
        torch.testing.assert_close(fields["boxes"], original[image_id]["boxes"] * scale)
        image = np.asarray(Image.open(io.BytesIO(ref.blob("image").read())).convert("RGB"))
        for category, seen in find_flat_objects(image, tolerance=100):
            misses = [miss(box.tolist(), seen, height, width) if int(label) == category else np.inf
                      for box, label in zip(fields["boxes"], fields["labels"])]
            assert min(misses) <= 2.0, (image_id, seen, fields["boxes"])
            checked += 1
        for mask, box in zip(fields["masks"], fields["boxes"]):
            ys, xs = torch.nonzero(mask, as_tuple=True)
            if len(xs) > 10:
                assert miss(box.tolist(), [xs.min().item(), ys.min().item(), xs.max().item() + 1, ys.max().item() + 1],
                            height, width) <= 2.0
    assert checked >= 20


def test_inputs_whose_targets_would_not_match_their_image_are_reported(detection_dataset, tmp_path: Path):
    root = tmp_path / "coco"
    shutil.copytree(detection_dataset.root, root)
    document = json.loads((root / "annotations.json").read_text())
    document["images"][0]["width"] += 10  # the file says another size than the image has
    turned = document["images"][1]["file_name"]
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.open(root / "images" / turned).save(root / "images" / turned, exif=exif.tobytes(), quality=95)
    (root / "annotations.json").write_text(json.dumps(document))
    result = convert(mp.loaders.coco(root / "annotations.json", root / "images"), tmp_path / "out")
    reasons = {f["input"]: f["reason"] for f in result.failures}
    assert result.num_samples == len(document["images"]) - 1
    assert "the annotations are for a" in reasons[document["images"][0]["file_name"]]
    assert turned not in reasons  # written upright, its targets turned with it (test_hostile_audio_targets)


def test_a_changed_annotation_file_is_not_resumed_into(detection_dataset, tmp_path: Path):
    root = tmp_path / "coco"
    shutil.copytree(detection_dataset.images, root)
    shutil.copy(detection_dataset.annotations, root / "instances.json")
    convert(root / "instances.json", tmp_path / "out")  # a .json path is opened as COCO, images beside it
    assert mp.loaders.shards(tmp_path / "out").field_types()["boxes"].format == "xyxy"
    document = json.loads((root / "instances.json").read_text())
    document["annotations"][0]["bbox"][0] += 1
    (root / "instances.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="cannot resume"):
        convert(root / "instances.json", tmp_path / "out", resume=True)


def test_a_manifest_or_member_that_lies_about_targets_is_refused(coco_shards, tmp_path: Path):
    out = tmp_path / "out"
    shutil.copytree(coco_shards, out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["field_types"]["boxes"] = {"kind": "boxes", "format": "ltrb"}
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SourceError, match=r"manifest.json.*field_types\['boxes'\].*ltrb"):
        mp.loaders.shards(out)
    manifest["field_types"]["boxes"] = {"kind": "image"}
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SourceError, match="a image field is not a target"):
        mp.loaders.shards(out)
    types = {"boxes": FieldType("boxes"), "labels": FieldType("other"), "masks": FieldType("mask")}
    for targets, reason in [([], "targets: expected an object"), ({"boxes": "1 2 3 4"}, "expected a list"),
                            ({"boxes": [[1, 2, 3]]}, r"shape \(1, 3\), expected \(N, 4\)"),
                            ({"labels": [1, None]}, "expected numbers"),
                            ({"boxes": [[0, 0, 1e400, 1]]}, "not a finite number"),
                            ({"masks": [{"size": [4, 4], "counts": "x"}]}, "compressed RLE"),
                            ({"masks": {"size": [4, 4], "counts": [5]}}, "compressed RLE")]:
        with pytest.raises(SourceError, match=reason):
            targets_from_json(targets, types, "shard-000000.tar:k.json")
    pytest.importorskip("pycocotools")
    masks = torch.zeros(2, 5, 7, dtype=torch.uint8)
    masks[0, 1:3, 2:6] = 1
    masks[1, 4, 0] = 1
    only_masks = {"masks": types["masks"]}
    back = targets_from_json({"masks": masks_to_rle(masks)}, only_masks, "x")["masks"]
    assert torch.equal(back, masks)
    assert targets_from_json({"masks": masks_to_rle(masks[:0])}, types, "x")["masks"].shape == (0, 5, 7)


def test_targets_over_http_are_those_on_disk(coco_shards, tmp_path: Path):
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from mediapipe.bench.http_server import RangeServer
    from mediapipe.remote.retry import Retry

    shutil.copytree(coco_shards, tmp_path / "ds")
    server = RangeServer(tmp_path)
    try:
        remote = mp.loaders.shards(f"{server.url}/ds", retry=Retry(attempts=2, backoff=0.01, timeout=10))
        local = mp.loaders.shards(coco_shards)
        assert remote.field_types() == local.field_types()
        for i in range(len(local)):
            a, b = local.ref(i).fields, remote.ref(i).fields
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor)
                                                else a[k] == b[k] for k in a)
    finally:
        server.close()


def test_targets_whose_rows_or_values_do_not_hold_together_are_refused():
    types = {"boxes": FieldType("boxes"), "labels": FieldType("label", per_object=True),
             "iscrowd": FieldType("other", per_object=True)}
    boxes = [[1.0, 2.0, 5.0, 6.0], [3.0, 3.0, 9.0, 9.0]]
    good = {"boxes": boxes, "labels": [0, 2], "iscrowd": [0, 1]}
    out = targets_from_json(good, types, "s.json", num_classes=3)
    assert out["labels"].tolist() == [0, 2] and out["boxes"].shape == (2, 4)
    for targets, reason in [
        ({**good, "labels": [0]}, r"'labels': 1.* rows, but every per-object field holds one row per object"),
        ({**good, "iscrowd": []}, r"'iscrowd': 0.* rows"),
        ({**good, "boxes": [[[[]]]]}, r"'boxes': 0.* rows"),
        ({"boxes": boxes, "labels": [0, 1]}, r"no \['iscrowd'\], but 2 objects"),
        ({**good, "labels": [0, 3]}, r"class ids are integers from 0 to 2"),
        ({**good, "labels": [-7, 0]}, r"class ids are integers from 0 to 2"),
        ({**good, "labels": [1e300, 0]}, r"class ids are integers"),
        ({**good, "labels": [0.5, 1]}, r"class ids are integers"),
    ]:
        with pytest.raises(SourceError, match=reason):
            targets_from_json(targets, types, "s.json", num_classes=3)
    assert targets_from_json({}, types, "s.json") == {}  # a sample without objects may leave them all out
    huge = targets_from_json({**good, "iscrowd": [1e300, 0]}, types, "s.json")["iscrowd"]
    assert huge.dtype == torch.float64 and huge.tolist() == [1e300, 0.0]  # not int64's wrap-around


def rewrite_member(tar: Path, name: str, change) -> None:
    """Rewrite one member of a shard in place, its new text padded with spaces to the same size
    (the index and the tar's headers still describe it): a member that lies."""
    with tarfile.open(tar) as t:
        member = t.getmember(name)
        document = json.loads(t.extractfile(member).read())
    text = json.dumps(change(document), separators=(",", ":")).encode()
    assert len(text) <= member.size
    with open(tar, "r+b") as f:
        f.seek(member.offset_data)
        f.write(text.ljust(member.size))


@pytest.mark.parametrize("case", ["labels", "masks", "mask size", "mask runs"])
def test_a_member_that_lies_about_its_objects_is_a_named_skippable_error(coco_shards, tmp_path: Path, case):
    out = tmp_path / "out"
    shutil.copytree(coco_shards, out)
    tar = sorted(out.glob("shard-*.tar"))[0]
    with tarfile.open(tar) as t:  # a sample with two objects at least
        name = next(m.name for m in t.getmembers() if m.name.endswith(".json")
                    and len(json.loads(t.extractfile(m).read())["targets"]["boxes"]) >= 2)

    def lie(document: dict) -> dict:
        targets = document["targets"]
        if case == "labels":
            targets["labels"] = targets["labels"][:1]
        elif case == "masks":
            targets["masks"]["counts"] = targets["masks"]["counts"][:1]
        elif case == "mask size":  # well-formed masks of another size
            height, width = targets["masks"]["size"]
            targets["masks"] = masks_to_rle(torch.zeros(len(targets["boxes"]), height - 1, width, dtype=torch.uint8))
        else:  # runs that no longer cover the image: pycocotools would leave pixels unwritten
            targets["masks"]["counts"] = ["0?"] * len(targets["masks"]["counts"])
        return document

    rewrite_member(tar, name, lie)
    pipe = mp.Pipeline(mp.loaders.shards(out), {"image": mp.decoders.image()}, [A.Resize((32, 32))], batch_size=4,
                       device="cpu", on_error="skip")
    loader = pipe.loader(num_workers=0, shuffle=False)
    for batch in loader:
        for i in range(len(batch["boxes"])):
            assert len(batch["boxes"][i]) == len(batch["labels"][i]) == len(batch["masks"][i])
            assert batch["masks"][i].max() <= 1 if batch["masks"][i].numel() else True
    assert loader.stats.errors == {"source: bad annotation": 1}
    assert list(loader.stats.failed)[0].startswith(f"{tar.name}:{name}")
