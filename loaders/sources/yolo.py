"""`yolo(images_dir, labels_dir=..., classes=...)`: a YOLO-format detection dataset as a source.

Each image ``images/<path>.jpg`` has a label file ``labels/<path>.txt`` (none, or an empty one:
no objects) with one object per line: ``class cx cy w h``, the centre and size normalised to
the image. Boxes become pixels once the image's size is known: `ref` reads the image's header
(a few kilobytes, in the worker that then decodes the file), so the boxes are plain pixel boxes
from there on and every op, a decoder-fused crop included, moves them as it moves any other.
Keeping them normalised and applying a canvas at decode would go wrong wherever the decoded
image is not the file's full frame (a fused crop). The size, and so the boxes, are the stored
frame's (the header's); ``mp.decoders.image(exif_transpose=True)`` turns the boxes with the
image. (Ultralytics reads labels on the EXIF-turned image: for such a dataset, write its turned
files upright first.)

Label files are read when their sample is read, so opening a dataset reads no label; a bad line
is a `SourceError` naming the file and the line (``labels/0007.txt:3``), which ``on_error``
handles as any unreadable sample. ``drop_empty=True`` leaves out images whose label file is
missing or empty (known from one listing of the labels folder).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mediapipe.dataset.safe_io import open_regular, show
from mediapipe.errors import SourceError
from mediapipe.fields import FieldType
from mediapipe.loaders.sources.folder import Source
from mediapipe.loaders.sources.targets import BAD_ANNOTATION, clamped_boxes, confined_files, detection_types
from mediapipe.sample import IMAGE_EXTENSIONS, Blob, SampleMeta, SampleRef

MAX_LABEL_BYTES = 16 << 20  # one label file: more is refused before it is read
COORD_TOLERANCE = 1e-3  # a normalised box may pass the image's edge by this much (then clamped)


def default_labels_dir(images_dir: Path) -> Path:
    """YOLO's layout: the last ``images`` folder of the path replaced by ``labels``."""
    parts = list(images_dir.parts)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            return Path(*parts)
    raise SourceError(str(images_dir), "no 'images' folder in the path to replace by 'labels': pass labels_dir=")


def read_classes(classes: Sequence[str] | str | os.PathLike) -> list[str]:
    """Class names: a list, a text file of one name per line, or a YOLO data.yaml (``names``)."""
    if not isinstance(classes, (str, os.PathLike)):
        names = list(classes)
        if not all(isinstance(n, str) for n in names):
            raise ValueError(f"classes: expected names (strings), got {names[:5]!r}")
        return names
    path = Path(classes)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SourceError(str(path), f"cannot read the class names: {err}") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml

        names = (yaml.safe_load(text) or {}).get("names") if text.strip() else None
        if isinstance(names, dict) and all(isinstance(k, int) for k in names):
            names = [names[k] for k in sorted(names)] if sorted(names) == list(range(len(names))) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise SourceError(str(path), "'names': expected a list of class names (or {0: name, 1: name, ...})")
        return names
    return [line.strip() for line in text.splitlines() if line.strip()]


def parse_labels(text: str, where: str, num_classes: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(classes int64 (N,), normalised cxcywh float64 (N, 4)) of a label file's text; a bad
    line is a `SourceError` naming ``where`` and the line number."""
    classes, boxes = [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        at = f"{where}:{lineno}"
        if len(parts) != 5:
            extra = " (a segmentation line? only boxes are read)" if len(parts) > 5 and len(parts) % 2 == 1 else ""
            raise SourceError(at, f"expected 5 values (class cx cy w h), got {len(parts)}{extra}",
                              category=BAD_ANNOTATION)
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise SourceError(at, f"not numbers: {line.strip()[:80]!r}", category=BAD_ANNOTATION) from None
        c = values[0]
        if not c.is_integer() or c < 0 or (num_classes is not None and c >= num_classes):
            known = f" (0..{num_classes - 1})" if num_classes is not None else ""
            raise SourceError(at, f"class {show(parts[0])} is not a class index{known}", category=BAD_ANNOTATION)
        cx, cy, w, h = values[1:]
        t = COORD_TOLERANCE
        if not all(math.isfinite(v) for v in values[1:]) or w < 0 or h < 0 or cx - w / 2 < -t or cy - h / 2 < -t \
                or cx + w / 2 > 1 + t or cy + h / 2 > 1 + t:
            raise SourceError(at, f"box {show(parts[1:])} is not inside the image (normalised centre and size, 0..1)",
                              category=BAD_ANNOTATION)
        classes.append(int(c))
        boxes.append((cx, cy, w, h))
    return np.asarray(classes, dtype=np.int64), np.asarray(boxes, dtype=np.float64).reshape(-1, 4)


def image_size(path: str) -> tuple[int, int]:
    """(height, width) from an image file's header (Pillow reads the first kilobytes only)."""
    from PIL import Image, UnidentifiedImageError

    fd, _ = open_regular(os.path.realpath(path), "the image")  # (a FIFO put in its place: no hang)
    try:
        with os.fdopen(fd, "rb") as f, Image.open(f) as im:
            width, height = im.size
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as err:
        raise SourceError(path, f"cannot read the image header: {err}") from None
    return height, width


class YoloSource(Source):
    """The images of a folder with YOLO txt labels: pixel boxes in ``box_format`` and labels."""

    kind = "yolo"

    def __init__(self, images_dir: str | os.PathLike, labels_dir: str | os.PathLike | None = None,
                 classes: Sequence[str] | str | os.PathLike | None = None, box_format: str = "xyxy",
                 drop_empty: bool = False, collate: str = "list") -> None:
        self.images_dir = Path(images_dir)
        if not self.images_dir.is_dir():
            raise SourceError(str(images_dir), "images_dir is not a folder")
        self.labels_dir = Path(labels_dir) if labels_dir is not None else default_labels_dir(self.images_dir)
        if not self.labels_dir.is_dir():
            raise SourceError(str(self.labels_dir), "labels_dir is not a folder")
        self.classes_arg = (None if classes is None else str(classes) if isinstance(classes, (str, os.PathLike))
                            else list(classes))
        self._classes = read_classes(classes) if classes is not None else None
        self.box_format, self.drop_empty = box_format, bool(drop_empty)
        self.collate_objects = collate  # not `collate`: a source's `collate` maps fields to policies
        self._types = detection_types(box_format, crowd=False, masks=False, collate=collate)
        images, _ = confined_files(str(self.images_dir))
        labels, outside = confined_files(str(self.labels_dir))
        self._files = sorted(f for f in images if "." in f.rsplit("/", 1)[-1]
                             and f.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS
                             and not any(part.startswith(".") for part in f.split("/")))
        self._labels: list[str | None] = []
        for f in self._files:
            label = f.rsplit(".", 1)[0] + ".txt"
            if label in outside:
                raise SourceError(os.path.join(self.labels_dir, label), f"a link to {outside[label]}, outside "
                                  f"the labels folder {self.labels_dir}")
            self._labels.append(label if label in labels else None)
        if self.drop_empty:
            kept = [(f, lab) for f, lab in zip(self._files, self._labels)
                    if lab is not None and os.path.getsize(os.path.join(self.labels_dir, lab)) > 0]
            self._files, self._labels = [f for f, _ in kept], [lab for _, lab in kept]
        if not self._files:
            raise SourceError(str(self.images_dir), "no images" + (" with labels" if self.drop_empty else ""))

    def __len__(self) -> int:
        return len(self._files)

    @property
    def classes(self) -> list[str] | None:
        return None if self._classes is None else list(self._classes)

    def field_types(self) -> dict[str, FieldType]:
        return dict(self._types)

    def read_labels(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(classes, normalised cxcywh boxes) of sample ``index``'s label file (none: no objects)."""
        label = self._labels[index]
        if label is None:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 4), dtype=np.float64)
        path = os.path.join(self.labels_dir, label)
        fd, _ = open_regular(os.path.realpath(path), "the label file")  # (a FIFO put in its place: no hang)
        try:
            with os.fdopen(fd, "rb") as f:
                data = f.read(MAX_LABEL_BYTES + 1)
        except OSError as err:
            raise SourceError(path, err.strerror or str(err)) from err
        if len(data) > MAX_LABEL_BYTES:
            raise SourceError(path, f"label file larger than {MAX_LABEL_BYTES} bytes", category=BAD_ANNOTATION)
        try:
            text = data.decode("utf-8-sig")  # a byte-order mark, as Windows editors write, is not a value
        except UnicodeDecodeError as err:
            raise SourceError(path, f"not UTF-8 text (byte {err.start})", category=BAD_ANNOTATION) from None
        return parse_labels(text, path, None if self._classes is None else len(self._classes))

    def ref(self, index: int) -> SampleRef:
        classes, normalised = self.read_labels(index)
        path = os.path.join(self.images_dir, self._files[index])
        height, width = image_size(path)
        cx, cy, w, h = (normalised[:, k] * scale for k, scale in enumerate((width, height, width, height)))
        # a box within COORD_TOLERANCE of the edge is clamped onto it
        boxes = clamped_boxes(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, width, height, self.box_format)
        fields = {"boxes": torch.from_numpy(boxes), "labels": torch.from_numpy(classes)}
        return SampleRef(index, self._files[index], {"image": Blob(path, path=path)}, None,
                         {"width": width, "height": height}, fields)

    def meta(self, index: int) -> SampleMeta:
        return {}  # the size needs the header: not read to plan batches

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind, "images_dir": str(self.images_dir),
                                  "labels_dir": str(self.labels_dir), "box_format": self.box_format}
        if self.classes_arg is not None:
            config["classes"] = self.classes_arg
        for name, value, default in (("drop_empty", self.drop_empty, False), ("collate", self.collate_objects, "list")):
            if value != default:
                config[name] = value
        return config


def yolo(images_dir: str | os.PathLike, *, labels_dir: str | os.PathLike | None = None,
         classes: Sequence[str] | str | os.PathLike | None = None, box_format: str = "xyxy",
         drop_empty: bool = False, collate: str = "list") -> YoloSource:
    """Images with YOLO txt labels (``labels_dir`` default: ``images`` replaced by ``labels`` in
    the path); ``classes``: names, a text file of names or a data.yaml. Boxes in pixels, in
    ``box_format``; labels are the files' class indices."""
    return YoloSource(images_dir, labels_dir, classes, box_format, drop_empty, collate)


__all__ = ["YoloSource", "default_labels_dir", "parse_labels", "read_classes", "yolo"]
