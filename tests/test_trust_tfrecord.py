"""TFRecord trust: TF Object Detection API boxes are typed pixel boxes that move with the image and
batch like COCO's; class labels are whole numbers or a named refusal; a folder's own index files
are never read as records; a truncated record says how many bytes it needs and how many are there."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.errors import SourceError
from mediapipe.loaders.sources.tfrecord import BOXES, masked_crc
from mediapipe.synthetic import jpeg_bytes, photo_like

tfrecord_pkg = pytest.importorskip("tfrecord")

DETECTION = {"image": "image/encoded", "boxes": BOXES, "labels": "image/object/class/label"}
# (height, width) multiples of 8 and coordinates multiples of 1/8: pixel boxes are exact in float32
SIZES = [(48, 64), (40, 56), (64, 48), (56, 40), (48, 48)]
OBJECTS = [  # normalised (xmin, ymin, xmax, ymax) and a class id per object; counts 2, 0, 1, 3, 1
    ([(0.125, 0.25, 0.5, 0.75), (0.5, 0.0, 1.0, 0.375)], [1, 3]),
    ([], []),
    ([(0.0, 0.125, 0.875, 1.0)], [2]),
    ([(0.25, 0.25, 0.625, 0.5), (0.75, 0.625, 1.0, 1.0), (0.0, 0.0, 0.25, 0.125)], [0, 2, 1]),
    ([(0.375, 0.5, 0.625, 0.875)], [3]),
]


def write_record(writer, image: bytes, boxes, labels, **extra) -> None:
    datum = {"image/encoded": (image, "byte"), "image/object/class/label": (list(labels), "int")}
    for k, name in enumerate(BOXES):
        datum[name] = ([b[k] for b in boxes], "float")
    datum.update(extra)
    writer.write(datum)


@pytest.fixture()
def tfod(tmp_path: Path) -> tuple[Path, list[bytes]]:
    """TF Object Detection API records (normalised boxes, class ids, image/height and width)."""
    path = tmp_path / "objects.tfrecord"
    writer = tfrecord_pkg.TFRecordWriter(str(path))
    images = []
    for i, ((h, w), (boxes, labels)) in enumerate(zip(SIZES, OBJECTS)):
        images.append(jpeg_bytes(photo_like(h, w, seed=20 + i), quality=92))
        write_record(writer, images[-1], boxes, labels, **{"image/height": (h, "int"), "image/width": (w, "int")})
    writer.close()
    return path, images


def pixel_boxes(i: int, height: int, width: int) -> torch.Tensor:
    """The formula: TF's normalised corners times the image's size."""
    boxes = torch.tensor(OBJECTS[i][0], dtype=torch.float64).reshape(-1, 4)
    return (boxes * torch.tensor([width, height, width, height], dtype=torch.float64)).float()


# -- item 4: boxes typed, moved with the pixels, batched like COCO's -------------------------------
def test_tf_object_detection_boxes_are_typed_pixel_boxes_with_their_labels(tfod):
    path, images = tfod
    source = mp.loaders.tfrecord(path, DETECTION)
    types = source.field_types()
    assert str(types["boxes"]) == "boxes (xyxy)" and str(types["labels"]) == "label per object"
    for i, (h, w) in enumerate(SIZES):
        ref = source.ref(i)
        assert ref.meta == {"width": w, "height": h}
        assert ref.fields["boxes"].dtype == torch.float32
        assert torch.equal(ref.fields["boxes"], pixel_boxes(i, h, w))
        assert ref.fields["labels"].dtype == torch.int64 and ref.fields["labels"].tolist() == OBJECTS[i][1]
    xywh = mp.loaders.tfrecord(path, DETECTION, box_format="xywh").ref(0).fields["boxes"]
    x0, y0, x1, y1 = pixel_boxes(0, *SIZES[0]).unbind(1)
    assert torch.equal(xywh, torch.stack([x0, y0, x1 - x0, y1 - y0], 1))


def test_resize_and_horizontal_flip_move_the_boxes_by_the_formula(tfod):
    path, _ = tfod
    out_h, out_w = 24, 40
    pipe = mp.Pipeline(source=mp.loaders.tfrecord(path, DETECTION), decode={"image": mp.decoders.image()},
                       augment=[A.Resize((out_h, out_w)), A.HorizontalFlip(p=1.0)], batch_size=5, seed=0)
    batch = next(iter(pipe.loader(shuffle=False)))
    assert batch["image"].shape == (5, 3, out_h, out_w)
    assert [len(b) for b in batch["boxes"]] == [len(o[0]) for o in OBJECTS]  # a list: counts 2, 0, 1, 3, 1
    for i in range(len(SIZES)):
        resized = pixel_boxes(i, out_h, out_w)  # normalised corners times the new size
        flipped = torch.stack([out_w - resized[:, 2], resized[:, 1], out_w - resized[:, 0], resized[:, 3]], 1)
        torch.testing.assert_close(batch["boxes"][i], flipped, atol=1e-4, rtol=0)
        assert batch["labels"][i].tolist() == OBJECTS[i][1]


def test_boxes_and_labels_batch_as_lists_or_padded(tfod):
    path, _ = tfod
    augment = [A.Resize((32, 32))]
    decode = {"image": mp.decoders.image()}
    listed = mp.Pipeline(source=mp.loaders.tfrecord(path, DETECTION), decode=decode, augment=augment, batch_size=5,
                         seed=0, collate={"boxes": "list", "labels": "list"})
    batch = next(iter(listed.loader(shuffle=False)))
    assert [b.shape for b in batch["boxes"]] == [(len(o[0]), 4) for o in OBJECTS]
    for padded in (mp.Pipeline(source=mp.loaders.tfrecord(path, DETECTION), decode=decode, augment=augment,
                               batch_size=5, seed=0, collate={"boxes": "pad", "labels": "pad"}),
                   mp.Pipeline(source=mp.loaders.tfrecord(path, DETECTION, collate="pad"), decode=decode,
                               augment=augment, batch_size=5, seed=0)):
        out = next(iter(padded.loader(shuffle=False)))
        assert out["boxes"].shape == (5, 3, 4) and out["labels"].shape == (5, 3)
        assert out["boxes_lengths"].tolist() == out["labels_lengths"].tolist() == [2, 0, 1, 3, 1]
        for i in range(5):
            n = len(OBJECTS[i][0])
            torch.testing.assert_close(out["boxes"][i, :n], batch["boxes"][i])
            assert not out["boxes"][i, n:].any() and out["labels"][i, :n].tolist() == OBJECTS[i][1]


def write_coco(folder: Path, images: list[bytes]) -> Path:
    """The same images and objects as a COCO annotation file (pixel xywh, category ids 0..3)."""
    folder.mkdir()
    document = {"images": [], "annotations": [], "categories": [{"id": k, "name": f"c{k}"} for k in range(4)]}
    for i, ((h, w), (boxes, labels)) in enumerate(zip(SIZES, OBJECTS)):
        (folder / f"{i}.jpg").write_bytes(images[i])
        document["images"].append({"id": i, "file_name": f"{i}.jpg", "width": w, "height": h})
        for (x0, y0, x1, y1), label in zip(boxes, labels):
            document["annotations"].append({"id": len(document["annotations"]), "image_id": i, "category_id": label,
                                            "bbox": [x0 * w, y0 * h, (x1 - x0) * w, (y1 - y0) * h], "iscrowd": 0})
    annotations = folder / "annotations.json"
    annotations.write_text(json.dumps(document))
    return annotations


def test_random_resized_crop_and_flip_move_them_exactly_as_coco_boxes(tfod, tmp_path):
    path, images = tfod
    annotations = write_coco(tmp_path / "coco", images)
    augment = [A.RandomResizedCrop(32, scale=(0.3, 1.0)), A.HorizontalFlip(), A.SanitizeBoundingBoxes()]
    batches = []
    for source in (mp.loaders.tfrecord(path, DETECTION), mp.loaders.coco(annotations)):
        pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image()}, augment=augment, batch_size=5, seed=7)
        batches.append(list(pipe.loader(shuffle=True)))
    ours, coco = batches
    moved = 0
    for a, b in zip(ours, coco):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])
        for boxes_a, boxes_b, labels_a, labels_b in zip(a["boxes"], b["boxes"], a["labels"], b["labels"]):
            assert torch.equal(boxes_a, boxes_b) and torch.equal(labels_a, labels_b)
        moved += sum(len(x) for x in a["boxes"])
    assert moved > 0


def test_sanitize_drops_a_degenerate_box_with_its_label(tmp_path):
    path = tmp_path / "degenerate.tfrecord"
    writer = tfrecord_pkg.TFRecordWriter(str(path))
    write_record(writer, jpeg_bytes(photo_like(40, 40, seed=3)), [(0.1, 0.1, 0.6, 0.6), (0.5, 0.2, 0.5, 0.9),
                                                                  (0.2, 0.5, 0.9, 0.95)], [4, 5, 6],
                 **{"image/object/difficult": ([0, 1, 1], "int")})
    writer.close()
    source = mp.loaders.tfrecord(path, {**DETECTION, "difficult": "image/object/difficult"})
    assert str(source.field_types()["difficult"]) == "other per object"
    pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image()},
                       augment=[A.SanitizeBoundingBoxes()], batch_size=1, seed=0)
    batch = next(iter(pipe.loader()))
    assert batch["labels"][0].tolist() == [4, 6] and batch["boxes"][0].shape == (2, 4)
    assert batch["difficult"][0].tolist() == [0, 1]  # every per-object field loses the same row


def one_record(tmp_path: Path, name: str, boxes, labels, *, label_kind: str = "int", size=(40, 48), **extra) -> Path:
    path = tmp_path / f"{name}.tfrecord"
    writer = tfrecord_pkg.TFRecordWriter(str(path))
    datum = {"image/encoded": (jpeg_bytes(photo_like(*size, seed=5)), "byte"),
             "image/object/class/label": (list(labels), label_kind)}
    for k, feature in enumerate(BOXES):
        datum[feature] = ([b[k] for b in boxes], "float")
    datum.update(extra)
    writer.write(datum)
    writer.close()
    return path


@pytest.mark.parametrize(("name", "boxes", "labels", "kind", "extra", "reason"), [
    ("fraction", [(0.1, 0.1, 0.5, 0.5)], [1.5], "float", {}, r"image/object/class/label.*1\.5.*not an integer"),
    ("negative", [(0.1, 0.1, 0.5, 0.5)], [-1], "int", {}, r"image/object/class/label.*-1.*from 0"),
    ("counts", [(0.1, 0.1, 0.5, 0.5), (0.2, 0.2, 0.3, 0.3)], [1], "int", {}, r"2 boxes.*1 "),
    ("outside", [(0.1, 0.1, 1.5, 0.5)], [1], "int", {}, r"box 0.*outside"),
    ("inverted", [(0.6, 0.1, 0.2, 0.5)], [1], "int", {}, r"box 0.*negative size"),
    ("nan", [(0.1, float("nan"), 0.2, 0.5)], [1], "int", {}, r"box 0.*not a finite"),
    ("size", [(0.1, 0.1, 0.2, 0.5)], [1], "int", {"image/width": (99, "int")}, r"image/width.*99.*48"),
])
def test_bad_objects_are_refused_naming_the_record(tmp_path, name, boxes, labels, kind, extra, reason):
    path = one_record(tmp_path, name, boxes, labels, label_kind=kind, **extra)
    source = mp.loaders.tfrecord(path, DETECTION)
    with pytest.raises(SourceError, match=rf"{name}\.tfrecord: record 0.*{reason}"):
        source.ref(0)


def test_per_object_texts_beside_boxes_are_refused_when_the_source_is_made(tfod):
    path, _ = tfod
    with pytest.raises(ValueError, match=r"image/object/class/text.*SanitizeBoundingBoxes"):
        mp.loaders.tfrecord(path, {**DETECTION, "names": "image/object/class/text"})
    with pytest.raises(ValueError, match=r"boxes.*image"):
        mp.loaders.tfrecord(path, {"boxes": BOXES, "labels": "image/object/class/label"})


def test_the_source_round_trips_its_config(tfod):
    path, _ = tfod
    source = mp.loaders.tfrecord(path, DETECTION, box_format="cxcywh", collate="pad")
    from mediapipe.loaders.sources.folder import source_from_config

    again = source_from_config(source.to_config())
    assert again.field_types() == source.field_types()
    assert torch.equal(again.ref(3).fields["boxes"], source.ref(3).fields["boxes"])


# -- item 8: class labels are whole numbers ---------------------------------------------------------
def labelled(tmp_path: Path, values: list[float]) -> Path:
    path = tmp_path / "labels.tfrecord"
    writer = tfrecord_pkg.TFRecordWriter(str(path))
    for i, value in enumerate(values):
        writer.write({"image/encoded": (jpeg_bytes(photo_like(32, 32, seed=i)), "byte"),
                      "image/class/label": (value, "float")})
    writer.close()
    return path


def test_a_float_label_is_never_truncated_into_a_class(tmp_path):
    path = labelled(tmp_path, [2.0, 2.9, float("nan"), 1e30])
    source = mp.loaders.tfrecord(path)
    assert source.ref(0).label == 2
    for record, shown in ((1, r"2\.9"), (2, "nan"), (3, r"1\.0*\d*e\+30")):  # (as float32 holds them)
        with pytest.raises(SourceError, match=rf"labels\.tfrecord: record {record}.*label {shown}"):
            source.ref(record)
    pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image()}, batch_size=4, seed=0, on_error="skip")
    loader = pipe.loader(shuffle=False)
    batch = next(iter(loader))
    assert batch["label"].tolist() == [2, 2, 2, 2]  # every bad record replaced by the good one
    assert sum("record" in str(p) for p in loader.stats.failed) == 3


# -- item 14: a folder's own index files are not records --------------------------------------------
def write_plain(path: Path, count: int) -> None:
    writer = tfrecord_pkg.TFRecordWriter(str(path))
    for i in range(count):
        writer.write({"image/encoded": (jpeg_bytes(photo_like(24, 24, seed=i)), "byte"),
                      "image/class/label": (i, "int")})
    writer.close()


def test_imagenet_style_names_open_again_once_their_indices_are_cached(tmp_path):
    folder = tmp_path / "train"
    folder.mkdir()
    for n in range(2):
        write_plain(folder / f"train-0000{n}-of-00002", 3 + n)
    first = mp.loaders.tfrecord(folder)
    assert len(first) == 7 and (folder / "train-00000-of-00002.idx").exists()
    assert mp.loaders.tfrecord(folder).paths == first.paths  # its cached indices are not listed as records
    (folder / ".train-00001-of-00002.idx.partial").write_bytes(b"12 34\n")  # a crashed write's leftover
    for again in (mp.loaders.tfrecord(folder), mp.loaders.tfrecord(str(folder / "train-*")),
                  mp.loaders.tfrecord(str(folder / "*-of-*"))):
        assert again.paths == first.paths and len(again) == 7
        assert [again.ref(i).label for i in range(7)] == [0, 1, 2, 0, 1, 2, 3]


def test_recordio_globs_skip_index_files_too(tmp_path):
    from tests.helpers import make_rec

    path, items = make_rec(tmp_path)
    assert (tmp_path / "train.idx").exists()
    source = mp.loaders.recordio(str(tmp_path / "train*"))
    assert source.paths == [str(path.resolve())] and len(source) == len(items)
    (tmp_path / "train.idx").unlink()  # the index is built and cached beside the file: train.rec.idx
    mp.loaders.recordio(path)
    assert (tmp_path / "train.rec.idx").exists()
    assert len(mp.loaders.recordio(str(tmp_path / "train.rec*"))) == len(items)


# -- the truncation message --------------------------------------------------------------------------
def test_a_truncated_record_says_how_many_bytes_it_needs_and_how_many_are_there(tmp_path):
    path = tmp_path / "cut.tfrecord"
    write_plain(path, 2)
    data = path.read_bytes()
    length, _ = struct.unpack_from("<QI", data)
    second = 12 + length + 4
    (length2,) = struct.unpack_from("<Q", data, second)
    for cut in (2, 4, 10):  # into the footer (the payload's CRC), and into the payload
        path.write_bytes(data[:-cut])
        need = 12 + length2 + 4
        with pytest.raises(SourceError) as err:
            mp.loaders.tfrecord(path, index_paths=None)
        message = str(err.value)
        assert "record 1" in message and f"offset {second}" in message
        assert f"needs {need} bytes" in message and f"has {need - cut}" in message
        assert masked_crc(data[second:second + 8]) == struct.unpack_from("<I", data, second + 8)[0]
        Path(str(path) + ".idx").unlink(missing_ok=True)


def test_image_size_features_that_agree_are_accepted(tfod):
    path, _ = tfod
    source = mp.loaders.tfrecord(path, {**DETECTION, "height": "image/height", "width": "image/width"})
    assert [source.ref(i).fields["height"] for i in range(5)] == [h for h, _ in SIZES]
    assert np.array_equal(source.ref(3).fields["boxes"].numpy(), pixel_boxes(3, *SIZES[3]).numpy())


def test_a_conversion_keeps_the_typed_boxes_and_labels(tfod, tmp_path):
    from mediapipe.dataset.convert import convert

    path, _ = tfod
    source = mp.loaders.tfrecord(path, DETECTION)
    convert(source, tmp_path / "out", shard_size=4, shuffle=False)
    shards = mp.loaders.shards(tmp_path / "out")
    assert shards.field_types() == source.field_types()
    for i in range(len(source)):
        assert torch.equal(shards.ref(i).fields["boxes"], source.ref(i).fields["boxes"])
        assert torch.equal(shards.ref(i).fields["labels"], source.ref(i).fields["labels"])
