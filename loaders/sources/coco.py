"""`coco(annotations_json, images_dir)`: a COCO-format detection dataset as a source.

The annotation file is read once, when the source is made (refused past ``max_json_bytes``
before anything is read), checked throughout, and kept as a few flat arrays (boxes, labels,
iscrowd per object; each image's first object and count), so the source pickles to workers
cheaply and a sample's targets are slices. Errors name the file, the image id and the field:
``instances.json: image 42: annotations[17] (id 901).bbox [600, 10, 80, 20] leaves the 640x480
image``. Every image must be a file inside ``images_dir`` (links resolving elsewhere are
refused), listed once when the source is made.

Each sample gives ``image`` (its file, for ``mp.decoders.image()``), ``boxes`` (float32 (N, 4)
pixels in ``box_format``), ``labels`` (int64 (N,): category ids sorted and numbered from 0,
``source.classes`` their names), ``iscrowd`` (int64 (N,)), ``image_id`` and, with
``masks=True``, ``masks`` (uint8 (N, H, W), polygons and RLE decoded by pycocotools).
Images without annotations have no objects ((0, 4) boxes); ``drop_empty=True`` leaves them out.
A box may pass the image's edge by up to ``BOX_TOLERANCE`` pixels (rounding in the file): it is
clamped to the image; further out, it is an error.

Targets are in pixels of the image as stored in its file, of the declared ``width`` x ``height``
(the frame torchvision's ``CocoDetection`` reads: ``PIL.Image.open``, no EXIF turn). With
``mp.decoders.image(exif_transpose=True)`` the sample stage turns boxes and masks with the image.
An image that decodes to another size than its declared one is a `DecodeError` naming the file
and both sizes (a bad annotation, which ``on_error="skip"`` skips); a declared size that is the
image's EXIF-turned one says its annotations were drawn on the turned image, which is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mediapipe.dataset.safe_io import parse_json, read_bounded, show, stat_regular
from mediapipe.errors import SourceError
from mediapipe.fields import FieldType
from mediapipe.loaders.sources.folder import Source
from mediapipe.loaders.sources.targets import (
    check_mask_bytes,
    check_trace_points,
    clamped_boxes,
    confined_files,
    decode_masks,
    detection_types,
    file_problem,
    segmentation_points,
)
from mediapipe.sample import Blob, SampleMeta, SampleRef

DEFAULT_MAX_JSON_BYTES = 2 << 30
BOX_TOLERANCE = 1.0  # pixels a box may pass the image's edge (then clamped)


def _int(value: Any) -> bool:
    """An id: an int that fits int64 (JSON ints have no bound)."""
    return type(value) is int and -(1 << 63) <= value < 1 << 63


def _number(value: Any) -> bool:
    """A coordinate: a finite float, or an int a float holds exactly."""
    return (type(value) is float and math.isfinite(value)) or (type(value) is int and abs(value) <= 1 << 53)


class CocoSource(Source):
    """The images of a COCO annotation file with their boxes, labels, crowd flags and masks."""

    kind = "coco"

    def __init__(self, annotations: str | os.PathLike, images_dir: str | os.PathLike | None = None,
                 box_format: str = "xyxy", masks: bool = False, drop_empty: bool = False, collate: str = "list",
                 max_json_bytes: int = DEFAULT_MAX_JSON_BYTES) -> None:
        self.path = Path(annotations)
        self.images_dir = Path(images_dir) if images_dir is not None else self.path.parent
        self.box_format, self.masks, self.drop_empty = box_format, bool(masks), bool(drop_empty)
        self.collate_objects = collate  # not `collate`: a source's `collate` maps fields to policies
        self.max_json_bytes = int(max_json_bytes)
        self._types = detection_types(box_format, crowd=True, masks=self.masks, collate=collate)
        if not self.images_dir.is_dir():
            raise SourceError(str(self.images_dir), "images_dir is not a folder")
        real = os.path.realpath(self.path)
        size = stat_regular(real, "the annotation file").st_size
        if size > self.max_json_bytes:
            raise SourceError(str(self.path), f"{size} bytes, more than max_json_bytes={self.max_json_bytes}: "
                              "pass a larger max_json_bytes= to read a file this large")
        raw = read_bounded(real, self.max_json_bytes, "the annotation file")
        self.fingerprint = hashlib.sha256(raw).hexdigest()  # what a conversion's resume checks
        document = parse_json(raw, str(self.path))
        del raw
        if type(document) is not dict:
            raise SourceError(str(self.path), "expected a JSON object with 'images', 'annotations' and 'categories'")
        self._read_categories(document)
        self._read_images(document)
        self._read_annotations(document)

    # -- reading the file (once) ------------------------------------------------------------
    def _list(self, document: dict[str, Any], name: str, required: bool = True) -> list[Any]:
        value = document.get(name)
        if value is None and not required:
            return []
        if type(value) is not list:
            raise SourceError(str(self.path), f"'{name}': expected a list, got "
                              f"{'nothing' if value is None else type(value).__name__}")
        return value

    def _read_categories(self, document: dict[str, Any]) -> None:
        categories = self._list(document, "categories", required=bool(document.get("annotations")))
        names: dict[int, str] = {}
        for i, c in enumerate(categories):
            where = f"categories[{i}]"
            if type(c) is not dict or not _int(c.get("id")):
                raise SourceError(str(self.path), f"{where}.id: expected an int, got {show(c.get('id') if type(c) is dict else c)}")
            if type(c.get("name")) is not str:
                raise SourceError(str(self.path), f"{where}.name: expected a string, got {show(c.get('name'))}")
            if c["id"] in names:
                raise SourceError(str(self.path), f"{where}.id: category {c['id']} is listed twice")
            names[c["id"]] = c["name"]
        self._category_ids = sorted(names)
        self._classes = [names[i] for i in self._category_ids]

    def _read_images(self, document: dict[str, Any]) -> None:
        images = self._list(document, "images")
        if not images:
            raise SourceError(str(self.path), "'images' is empty: the file lists no image")
        files, outside = confined_files(str(self.images_dir))
        self._ids = np.empty(len(images), dtype=np.int64)
        self._sizes = np.empty((len(images), 2), dtype=np.int64)  # (height, width)
        self._files: list[str] = []
        position: dict[int, int] = {}
        for i, image in enumerate(images):
            if type(image) is not dict or not _int(image.get("id")):
                raise SourceError(str(self.path), f"images[{i}].id: expected an int, got "
                                  f"{show(image.get('id') if type(image) is dict else image)}")
            image_id = image["id"]
            where = self._where(image_id)
            if image_id in position:
                raise SourceError(where, f"images[{i}].id: listed twice (also images[{position[image_id]}])")
            for side in ("width", "height"):
                if not _int(image.get(side)) or not 0 < image[side] <= 1 << 20:
                    raise SourceError(where, f"images[{i}].{side}: expected an int in 1..{1 << 20}, got "
                                      f"{show(image.get(side))}")
            problem, rel = file_problem(image.get("file_name"), files, outside, str(self.images_dir))
            if problem is not None:
                raise SourceError(where, f"images[{i}].file_name: {problem}")
            position[image_id] = i
            self._ids[i] = image_id
            self._sizes[i] = (image["height"], image["width"])
            self._files.append(rel)
        self._position = position

    def _read_annotations(self, document: dict[str, Any]) -> None:
        annotations = self._list(document, "annotations", required=False)
        label_of = {cid: k for k, cid in enumerate(self._category_ids)}
        n = len(annotations)
        owner = np.empty(n, dtype=np.int64)
        xywh = np.empty((n, 4), dtype=np.float64)
        labels = np.empty(n, dtype=np.int64)
        crowd = np.zeros(n, dtype=np.int64)
        segments: list[bytes] = []
        for i, a in enumerate(annotations):
            if type(a) is not dict or not _int(a.get("image_id")):
                raise SourceError(str(self.path), f"annotations[{i}].image_id: expected an int, got "
                                  f"{show(a.get('image_id') if type(a) is dict else a)}")
            field = f"annotations[{i}]" + (f" (id {a['id']})" if _int(a.get("id")) else "")
            index = self._position.get(a["image_id"])
            where = self._where(a["image_id"])
            if index is None:
                raise SourceError(where, f"{field}.image_id: no image has id {a['image_id']}")
            category = a.get("category_id")
            if not _int(category) or category not in label_of:
                raise SourceError(where, f"{field}.category_id: {show(category)} is not a category of 'categories' "
                                  f"(ids {self._category_ids[:20]})")
            bbox = a.get("bbox")
            if type(bbox) is not list or len(bbox) != 4 or not all(_number(v) for v in bbox):
                raise SourceError(where, f"{field}.bbox: expected [x, y, width, height] (4 finite numbers), got "
                                  f"{show(bbox)}")
            if a.get("iscrowd", 0) not in (0, 1) or type(a.get("iscrowd", 0)) is not int:
                raise SourceError(where, f"{field}.iscrowd: expected 0 or 1, got {show(a.get('iscrowd'))}")
            owner[i], labels[i], crowd[i] = index, label_of[category], a.get("iscrowd", 0)
            xywh[i] = bbox
            if self.masks:
                segments.append(self._segmentation(a.get("segmentation"), index, f"{field}.segmentation"))
        self._check_boxes(xywh, owner, annotations)
        order = np.argsort(owner, kind="stable")  # objects grouped by image, in the file's order
        counts = np.bincount(owner, minlength=len(self._ids))
        self._first = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        self._count = counts.astype(np.int64)
        height, width = self._sizes[owner[order], 0], self._sizes[owner[order], 1]
        x, y, w, h = (xywh[order, k] for k in range(4))
        self._boxes = clamped_boxes(x, y, x + w, y + h, width, height, self.box_format)
        self._labels = labels[order]
        self._crowd = crowd[order]
        if self.masks:
            blob = [segments[i] for i in order]
            self._segment_ends = np.cumsum([len(s) for s in blob], dtype=np.int64)
            self._segments = b"".join(blob)
        self._samples = np.flatnonzero(self._count > 0) if self.drop_empty else np.arange(len(self._ids))
        if not len(self._samples):
            raise SourceError(str(self.path), "no image has an annotation (drop_empty=True left nothing)")

    def _check_boxes(self, xywh: np.ndarray, owner: np.ndarray, annotations: list[Any]) -> None:
        """Refuse a box of negative size, or one that leaves its image by more than BOX_TOLERANCE."""
        height, width = self._sizes[owner, 0], self._sizes[owner, 1]
        t = BOX_TOLERANCE
        bad = ((xywh[:, 2] < 0) | (xywh[:, 3] < 0) | (xywh[:, 0] < -t) | (xywh[:, 1] < -t)
               | (xywh[:, 0] + xywh[:, 2] > width + t) | (xywh[:, 1] + xywh[:, 3] > height + t))
        if not bad.any():
            return
        i = int(np.flatnonzero(bad)[0])
        a = annotations[i]
        field = f"annotations[{i}]" + (f" (id {a['id']})" if _int(a.get("id")) else "")
        why = "has a negative size" if xywh[i, 2] < 0 or xywh[i, 3] < 0 else \
            f"leaves the {width[i]}x{height[i]} image"
        raise SourceError(self._where(a["image_id"]), f"{field}.bbox {a['bbox']} {why}")

    def _segmentation(self, value: Any, index: int, field: str) -> bytes:
        """A segmentation checked as pycocotools will be given it (`segmentation_points`: polygons
        near the image, RLE of its size whose runs cover it), as JSON bytes."""
        height, width = (int(v) for v in self._sizes[index])
        try:
            points = segmentation_points(value, height, width)
        except ValueError as err:
            raise SourceError(self._where(int(self._ids[index])), f"{field}{err}") from None
        check_trace_points(points, self._where(int(self._ids[index])), field)
        return json.dumps(value, separators=(",", ":")).encode()

    def _where(self, image_id: int) -> str:
        return f"{self.path}: image {image_id}"

    # -- the source ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._samples)

    @property
    def classes(self) -> list[str]:
        return list(self._classes)

    @property
    def category_ids(self) -> list[int]:
        """The COCO category id of each label (``labels`` index this list and `classes`)."""
        return list(self._category_ids)

    def field_types(self) -> dict[str, FieldType]:
        return dict(self._types)

    def image_id(self, index: int) -> int:
        return int(self._ids[self._samples[index]])

    def ref(self, index: int) -> SampleRef:
        return self._ref(index, self.masks)

    def listing_ref(self, index: int) -> SampleRef:
        return self._ref(index, masks=False)

    def _ref(self, index: int, masks: bool) -> SampleRef:
        i = int(self._samples[index])
        first, count = int(self._first[i]), int(self._count[i])
        rows = slice(first, first + count)
        path = os.path.join(self.images_dir, self._files[i])
        fields: dict[str, Any] = {
            "image_id": int(self._ids[i]),
            "boxes": torch.from_numpy(self._boxes[rows].copy()),
            "labels": torch.from_numpy(self._labels[rows].copy()),
            "iscrowd": torch.from_numpy(self._crowd[rows].copy()),
        }
        height, width = (int(v) for v in self._sizes[i])
        if masks:
            where = self._where(int(self._ids[i]))
            check_mask_bytes(count, height, width, where)
            ends = self._segment_ends
            start = int(ends[first - 1]) if first else 0
            segmentations = []
            for k in range(first, first + count):
                segmentations.append(json.loads(self._segments[start : int(ends[k])]))
                start = int(ends[k])
            fields["masks"] = decode_masks(segmentations, height, width, where)
        return SampleRef(index, self._files[i], {"image": Blob(path, path=path)}, None,
                         {"width": width, "height": height}, fields)

    def meta(self, index: int) -> SampleMeta:
        height, width = (int(v) for v in self._sizes[self._samples[index]])
        return {"width": width, "height": height}

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind, "annotations": str(self.path), "images_dir": str(self.images_dir),
                                  "box_format": self.box_format}
        for name, value, default in (("masks", self.masks, False), ("drop_empty", self.drop_empty, False),
                                     ("collate", self.collate_objects, "list"),
                                     ("max_json_bytes", self.max_json_bytes, DEFAULT_MAX_JSON_BYTES)):
            if value != default:
                config[name] = value
        return config


def coco(annotations: str | os.PathLike, images_dir: str | os.PathLike | None = None, *, box_format: str = "xyxy",
         masks: bool = False, drop_empty: bool = False, collate: str = "list",
         max_json_bytes: int = DEFAULT_MAX_JSON_BYTES) -> CocoSource:
    """A COCO annotation file and its images (``images_dir``, default: the file's folder): boxes
    in ``box_format`` ("xyxy", "xywh" as COCO writes them, or "cxcywh"), labels numbered from 0 in
    category-id order, iscrowd, image ids, and with ``masks=True`` one mask per object. Per-object
    fields batch as lists (``collate="pad"``: padded, with ``<field>_lengths``)."""
    return CocoSource(annotations, images_dir, box_format, masks, drop_empty, collate, max_json_bytes)


__all__ = ["BOX_TOLERANCE", "CocoSource", "coco"]
