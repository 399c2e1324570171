"""The YOLO source: normalised label lines become the pixel boxes the COCO file has for the same
objects; the boxes follow the pixels through a fused crop and flips; bad lines are named by file
and line and skippable; class names from a list, a text file or a data.yaml."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.errors import SourceError
from mediapipe.loaders.sources.yolo import default_labels_dir, read_classes
from tests.helpers import assert_boxes_are_where_the_pixels_are


@pytest.mark.parametrize("box_format", ["xyxy", "cxcywh"])
def test_label_lines_become_the_pixel_boxes_of_the_coco_file(detection_dataset, box_format):
    coco = mp.loaders.coco(detection_dataset.annotations, detection_dataset.images, box_format=box_format)
    yolo = mp.loaders.yolo(detection_dataset.images, classes=list(detection_dataset.classes), box_format=box_format)
    assert yolo.labels_dir == detection_dataset.labels and yolo.classes == coco.classes
    assert set(yolo.field_types()) == {"boxes", "labels"} and len(yolo) == len(coco)
    empty = 0
    for i in range(len(coco)):
        a, b = coco.ref(i), yolo.ref(i)
        assert a.key == b.key and b.meta == a.meta  # the size, from the header
        # six decimals of a normalised coordinate: within 1e-3 px of the exact box
        torch.testing.assert_close(b.fields["boxes"], a.fields["boxes"], atol=1e-3, rtol=0)
        assert torch.equal(b.fields["labels"], a.fields["labels"])
        empty += len(b.fields["boxes"]) == 0
    assert empty > 0


def test_boxes_follow_the_pixels_through_a_fused_crop_and_flips(detection_dataset):
    source = mp.loaders.yolo(detection_dataset.images, labels_dir=detection_dataset.labels)
    assert source.classes is None  # not given: the files' class indices, unnamed
    pipe = mp.Pipeline(source, {"image": mp.decoders.image()},
                       [A.RandomResizedCrop((80, 96), scale=(0.4, 1.0)), A.HorizontalFlip(), A.VerticalFlip()],
                       batch_size=4, seed=11, device="cpu")
    assert "(fused into decode) on image, boxes" in repr(pipe)
    matched = sum(assert_boxes_are_where_the_pixels_are(batch) for batch in pipe.loader(num_workers=0))
    assert matched >= 20


def test_class_names_from_a_list_a_text_file_or_a_data_yaml(tmp_path: Path):
    (tmp_path / "names.txt").write_text("cat\ndog\n\n")
    (tmp_path / "data.yaml").write_text("path: .\nnames:\n  0: cat\n  1: dog\n")
    (tmp_path / "list.yaml").write_text("names: [cat, dog]\n")
    for given in (["cat", "dog"], tmp_path / "names.txt", str(tmp_path / "data.yaml"), tmp_path / "list.yaml"):
        assert read_classes(given) == ["cat", "dog"]
    (tmp_path / "holes.yaml").write_text("names: {0: cat, 2: dog}\n")
    with pytest.raises(SourceError, match="'names': expected a list"):
        read_classes(tmp_path / "holes.yaml")
    assert default_labels_dir(Path("/data/coco8/images/train")) == Path("/data/coco8/labels/train")
    with pytest.raises(SourceError, match="pass labels_dir="):
        default_labels_dir(Path("/data/pictures"))


def test_empty_label_files_and_missing_ones_mean_no_objects_or_are_dropped(detection_dataset):
    kept = mp.loaders.yolo(detection_dataset.images)
    dropped = mp.loaders.yolo(detection_dataset.images, drop_empty=True)
    without = sum(len(kept.ref(i).fields["boxes"]) == 0 for i in range(len(kept)))
    assert without > 0 and len(dropped) == len(kept) - without
    assert all(len(dropped.ref(i).fields["boxes"]) for i in range(len(dropped)))


@pytest.fixture
def copied(detection_dataset, tmp_path: Path) -> Path:
    root = tmp_path / "yolo"
    shutil.copytree(detection_dataset.root, root)
    return root


BAD_LINES = {
    "4 values": ("0 0.5 0.5 0.1", "expected 5 values (class cx cy w h), got 4"),
    "segment": ("0 0.1 0.1 0.2 0.1 0.2 0.2", "a segmentation line?"),
    "text": ("0 0.5 half 0.1 0.1", "not numbers"),
    "class": ("6 0.5 0.5 0.1 0.1", "class '6' is not a class index (0..5)"),
    "negative class": ("-1 0.5 0.5 0.1 0.1", "is not a class index"),
    "fraction class": ("1.5 0.5 0.5 0.1 0.1", "is not a class index"),
    "outside": ("0 0.95 0.5 0.2 0.1", "is not inside the image"),
    "pixels": ("0 320 240 50 40", "is not inside the image"),
    "nan": ("0 nan 0.5 0.1 0.1", "is not inside the image"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_bad_line_is_named_by_its_file_and_line(copied, case):
    line, reason = BAD_LINES[case]
    label = sorted((copied / "labels").glob("*.txt"))[2]
    lines = label.read_text().splitlines()
    lines.insert(1, line)
    label.write_text("\n".join(lines) + "\n")
    source = mp.loaders.yolo(copied / "images", classes=[f"c{k}" for k in range(6)])
    index = sorted(p.stem for p in (copied / "images").glob("*.jpg")).index(label.stem)  # images in name order
    with pytest.raises(SourceError) as err:
        source.ref(index)
    assert f"{label}:2" in str(err.value) and reason in str(err.value), str(err.value)


def test_bad_samples_are_skipped_and_counted(copied):
    labels = sorted((copied / "labels").glob("*.txt"))
    labels[0].write_text("0 0.5 0.5\n")
    labels[3].write_bytes(b"\xff\xfe0 0.5 0.5 0.1 0.1\n")
    source = mp.loaders.yolo(copied / "images")
    pipe = mp.Pipeline(source, {"image": mp.decoders.image()}, [A.Resize((48, 48))], batch_size=4, device="cpu",
                       on_error="skip")
    loader = pipe.loader(num_workers=0)
    batches = list(loader)
    assert sum(len(b["image"]) for b in batches) == len(source)
    assert loader.stats.errors == {"source: bad annotation": 2}
    assert sorted(Path(f.split(":")[0]).name for f in loader.stats.failed) == [labels[0].name, labels[3].name]


def test_a_link_out_of_the_labels_folder_and_a_bad_image_header(copied, tmp_path: Path):
    label = sorted((copied / "labels").glob("*.txt"))[1]
    label.unlink()
    (tmp_path / "elsewhere.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    label.symlink_to(tmp_path / "elsewhere.txt")
    with pytest.raises(SourceError, match=r"a link to .*elsewhere.txt, outside the labels folder"):
        mp.loaders.yolo(copied / "images")
    label.unlink()
    image = sorted((copied / "images").glob("*.jpg"))[4]
    image.write_bytes(b"not an image")
    source = mp.loaders.yolo(copied / "images")
    index = sorted(p.name for p in (copied / "images").glob("*.jpg")).index(image.name)
    with pytest.raises(SourceError, match="cannot read the image header"):
        source.ref(index)


def test_config_round_trip(detection_dataset):
    source = mp.loaders.yolo(detection_dataset.images, classes=list(detection_dataset.classes), collate="pad")
    pipe = mp.Pipeline(source, {"image": mp.decoders.image()}, [A.Resize((32, 32))], batch_size=4, device="cpu")
    again = mp.Pipeline.from_config(pipe.to_config())
    a, b = next(iter(pipe.loader(shuffle=False))), next(iter(again.loader(shuffle=False)))
    assert torch.equal(a["boxes"], b["boxes"]) and torch.equal(a["labels_lengths"], b["labels_lengths"])
    assert a["boxes"].ndim == 3 and np.isfinite(a["boxes"].numpy()).all()


def test_a_byte_order_mark_is_not_a_value(copied):
    """Windows editors start UTF-8 files with a byte-order mark: the labels are the same without it."""
    label = sorted((copied / "labels").glob("*.txt"))[1]
    before = mp.loaders.yolo(copied / "images").ref(1).fields
    assert len(before["boxes"]) > 0
    label.write_bytes(b"\xef\xbb\xbf" + label.read_bytes().replace(b"\n", b"\r\n"))
    after = mp.loaders.yolo(copied / "images").ref(1).fields
    assert torch.equal(after["boxes"], before["boxes"]) and torch.equal(after["labels"], before["labels"])


def test_a_header_past_pillows_pixel_limit_is_a_named_error(copied, monkeypatch):
    """Pillow raises its own DecompressionBombError (not an OSError) on a header claiming more pixels
    than its limit (when no Pillow decoder lifted it): a SourceError naming the file, skippable."""
    import struct

    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 89_478_485)  # Pillow's default
    image = sorted((copied / "images").glob("*.jpg"))[1]
    data = bytearray(image.read_bytes())
    sof = data.find(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", 60_000, 60_000)  # height, width of the frame header
    image.write_bytes(bytes(data))
    source = mp.loaders.yolo(copied / "images")
    with pytest.raises(SourceError, match=rf"{image.name}.*cannot read the image header.*pixels"):
        source.ref(1)


def test_a_fifo_put_in_a_listed_files_place_is_refused_not_waited_on(copied):
    """The label and image files are listed when the source is made and read later, in a worker: a
    FIFO put in one's place meanwhile would block that read forever."""
    import os
    import threading

    source = mp.loaders.yolo(copied / "images")
    label = sorted((copied / "labels").glob("*.txt"))[1]
    image = sorted((copied / "images").glob("*.jpg"))[2]
    for path, index in ((label, 1), (image, 2)):
        path.unlink()
        os.mkfifo(path)
        outcome: list = []

        def read(index=index, outcome=outcome):
            try:
                source.ref(index)
            except SourceError as err:
                outcome.append(err)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout=20)
        if reader.is_alive():  # release the blocked read before failing
            with open(path, "wb"):
                pass
        assert not reader.is_alive() and outcome, "the read waited on the FIFO"
        assert f"{path.name}" in str(outcome[0]) and "not a regular file" in str(outcome[0])
        path.unlink()
