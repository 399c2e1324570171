"""Detection datasets in COCO format (and YOLO txt labels) for tests, the example and the bench.

Photographic backgrounds (`mediapipe.synthetic.photo_like`) with objects pasted at known places:
rectangles and ellipses, each filled with a patch of another part of the picture tinted by its
class (or, with ``flat=True``, with one flat colour per class, so a test can find an object
again in the pixels). Every box is the exact pixel extent of what was drawn (pixel x covers
[x, x + 1)); rectangles are annotated as polygons on their pixel edges (pycocotools rasterises
them back to the same pixels), ellipses as polygons around them, crowd objects as uncompressed
RLE of the drawn pixels. Category ids are not contiguous, as COCO's are not; image ids are not
sequential; some images have no objects. Everything is a pure function of the seed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.synthetic import jpeg_bytes, photo_like

VERSION = 1
CATEGORIES = ((1, "apple"), (2, "brick"), (4, "cloud"), (7, "drum"), (9, "egg"), (13, "flag"))
FLAT_COLOURS = ((255, 40, 40), (40, 255, 40), (40, 40, 255), (255, 255, 40), (255, 40, 255), (40, 255, 255))
GAP = 3  # pixels kept free around each object, so objects never touch
PLACEMENT_TRIES = 30


@dataclass(frozen=True)
class DetectionDataset:
    """Where a generated dataset is: ``mp.loaders.coco(annotations, images)``, and with
    ``yolo=True`` ``mp.loaders.yolo(images, labels_dir=labels, classes=classes)``."""

    root: Path
    annotations: Path
    images: Path
    labels: Path | None
    classes: tuple[str, ...]


def dataset_at(root: str | Path) -> DetectionDataset:
    """The generated dataset in ``root`` (as `write_detection_dataset` left it)."""
    root = Path(root)
    document = json.loads((root / "annotations.json").read_text())
    classes = tuple(c["name"] for c in sorted(document["categories"], key=lambda c: c["id"]))
    labels = root / "labels"
    return DetectionDataset(root, root / "annotations.json", root / "images", labels if labels.is_dir() else None,
                            classes)


def rle_counts(mask: np.ndarray) -> list[int]:
    """COCO's uncompressed RLE of a boolean (H, W) mask: run lengths in column-major order,
    starting with a run of zeros (of length 0 when the first pixel is set)."""
    flat = np.asarray(mask, dtype=np.int8).T.reshape(-1)
    bounds = np.concatenate(([0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]))
    runs = np.diff(bounds).tolist()
    return ([0] + runs) if flat.size and flat[0] else runs


def _shape_mask(shape: str, h: int, w: int, box: tuple[int, int, int, int]) -> np.ndarray:
    """A boolean (h, w) mask of a rectangle or an ellipse inscribed in ``box`` (x, y, bw, bh)."""
    x, y, bw, bh = box
    mask = np.zeros((h, w), dtype=bool)
    if shape == "rectangle":
        mask[y : y + bh, x : x + bw] = True
        return mask
    yy, xx = np.mgrid[0:bh, 0:bw].astype(np.float32) + 0.5  # pixel centres
    inside = ((xx - bw / 2) / (bw / 2)) ** 2 + ((yy - bh / 2) / (bh / 2)) ** 2 <= 1.0
    mask[y : y + bh, x : x + bw] = inside
    return mask


def _polygon(shape: str, mask: np.ndarray, box: tuple[int, int, int, int]) -> list[list[float]]:
    """A COCO polygon of the object: a rectangle's pixel edges, or 24 points around an ellipse."""
    x, y, bw, bh = box
    if shape == "rectangle":
        return [[float(x), float(y), float(x + bw), float(y), float(x + bw), float(y + bh), float(x), float(y + bh)]]
    t = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    xs = x + bw / 2 + (bw / 2) * np.cos(t)
    ys = y + bh / 2 + (bh / 2) * np.sin(t)
    return [[round(float(v), 2) for pair in zip(xs, ys) for v in pair]]


def _place(rng: np.random.Generator, h: int, w: int, taken: np.ndarray) -> tuple[int, int, int, int] | None:
    """A free box (x, y, bw, bh) of a random size, GAP pixels away from every object, or None."""
    for _ in range(PLACEMENT_TRIES):
        bw = int(rng.integers(max(8, w // 10), max(9, w // 3)))
        bh = int(rng.integers(max(8, h // 10), max(9, h // 3)))
        x, y = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
        if not taken[max(0, y - GAP) : y + bh + GAP, max(0, x - GAP) : x + bw + GAP].any():
            return x, y, bw, bh
    return None


def draw_image(rng: np.random.Generator, background: np.ndarray, objects: int, *, flat: bool, crowd: float,
               ) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """``background`` with up to ``objects`` objects pasted on it; their annotations (category
    index, bbox xywh, segmentation, area, iscrowd)."""
    h, w = background.shape[:2]
    image = (background // 3) if flat else background.copy()
    taken = np.zeros((h, w), dtype=bool)
    annotations = []
    for _ in range(objects):
        box = _place(rng, h, w, taken)
        if box is None:
            continue
        shape = "rectangle" if rng.random() < 0.5 else "ellipse"
        category = int(rng.integers(len(CATEGORIES)))
        mask = _shape_mask(shape, h, w, box)
        ys, xs = np.nonzero(mask)
        x0, y0, x1, y1 = int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1
        if flat:
            image[mask] = FLAT_COLOURS[category]
        else:  # a patch of elsewhere in the picture, tinted by the class
            sy, sx = int(rng.integers(0, h - box[3] + 1)), int(rng.integers(0, w - box[2] + 1))
            patch = background[sy : sy + box[3], sx : sx + box[2]].astype(np.float32)
            tint = np.asarray(FLAT_COLOURS[category], dtype=np.float32)
            pasted = (0.55 * patch + 0.45 * tint).astype(np.uint8)
            region = image[box[1] : box[1] + box[3], box[0] : box[0] + box[2]]
            inside = mask[box[1] : box[1] + box[3], box[0] : box[0] + box[2]]
            region[inside] = pasted[inside]
        taken |= mask
        is_crowd = bool(rng.random() < crowd)
        segmentation: Any = ({"counts": rle_counts(mask), "size": [h, w]} if is_crowd
                             else _polygon(shape, mask, box))
        annotations.append({"category": category, "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
                            "segmentation": segmentation, "area": float(mask.sum()), "iscrowd": int(is_crowd)})
    return image, annotations


def write_detection_dataset(root: str | Path, count: int = 16, seed: int = 0, *,
                            heights: tuple[int, int] = (96, 160), widths: tuple[int, int] = (128, 224),
                            objects: tuple[int, int] = (1, 5), empty: float = 0.1, crowd: float = 0.1,
                            flat: bool = False, quality: int = 92, yolo: bool = False,
                            images_per_background: int = 8,
                            on_image: Callable[[int], None] | None = None) -> DetectionDataset:
    """``count`` JPEGs under ``root/images`` with ``root/annotations.json`` (COCO), and with
    ``yolo=True`` a ``root/labels/<stem>.txt`` per image (class cx cy w h, normalised; crowd
    objects included). A share ``empty`` of the images has no objects; the others have
    ``objects`` (low, high inclusive) where they fit. Backgrounds are cut from pictures drawn
    once per ``images_per_background`` images. ``on_image(bytes)`` is called after each image."""
    root = Path(root)
    images_dir = root / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    labels_dir = root / "labels" if yolo else None
    if labels_dir is not None:
        labels_dir.mkdir(exist_ok=True)
    rng = np.random.default_rng([seed, VERSION])
    sizes = [(int(rng.integers(heights[0], heights[1] + 1)), int(rng.integers(widths[0], widths[1] + 1)))
             for _ in range(count)]
    base_h, base_w = heights[1] + 8, widths[1] + 8
    images, annotations = [], []
    picture = None
    for i, (h, w) in enumerate(sizes):
        if i % images_per_background == 0:
            picture = photo_like(base_h, base_w, seed * 1_000_003 + i // images_per_background)
        r = np.random.default_rng([seed, VERSION, i])
        top, left = int(r.integers(0, base_h - h + 1)), int(r.integers(0, base_w - w + 1))
        background = picture[top : top + h, left : left + w]
        n = 0 if r.random() < empty else int(r.integers(objects[0], objects[1] + 1))
        image, objs = draw_image(r, background, n, flat=flat, crowd=crowd)
        image_id = 1000 + 7 * i
        name = f"{i:06d}.jpg"
        data = jpeg_bytes(image, quality=quality)
        (images_dir / name).write_bytes(data)
        if on_image is not None:
            on_image(len(data))
        images.append({"id": image_id, "file_name": name, "width": w, "height": h})
        lines = []
        for obj in objs:
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": CATEGORIES[obj["category"]][0], "bbox": obj["bbox"],
                                "segmentation": obj["segmentation"], "area": obj["area"], "iscrowd": obj["iscrowd"]})
            x, y, bw, bh = obj["bbox"]
            lines.append(f"{obj['category']} {(x + bw / 2) / w:.6f} {(y + bh / 2) / h:.6f} {bw / w:.6f} {bh / h:.6f}")
        if labels_dir is not None and lines:  # an image without objects has no label file, as in YOLO datasets
            (labels_dir / f"{i:06d}.txt").write_text("\n".join(lines) + "\n")
    coco = {"info": {"description": "mediapipe synthetic detection", "version": VERSION, "seed": seed},
            "licenses": [], "images": images, "annotations": annotations,
            "categories": [{"id": cid, "name": name, "supercategory": "thing"} for cid, name in CATEGORIES]}
    path = root / "annotations.json"
    path.write_text(json.dumps(coco))
    return DetectionDataset(root, path, images_dir, labels_dir, tuple(name for _, name in CATEGORIES))


def find_flat_objects(image: np.ndarray, tolerance: int = 60, min_pixels: int = 12) -> list[tuple[int, list[float]]]:
    """(category index, [x0, y0, x1, y1]) of each flat-coloured object found in an (H, W, 3)
    uint8 image drawn with ``flat=True``: the pixel extent of each class colour's pixels, per
    connected group of columns and rows. For tests that check boxes against the pixels."""
    found = []
    pixels = image.astype(np.int16)
    for category, colour in enumerate(FLAT_COLOURS):
        near = (np.abs(pixels - np.asarray(colour, dtype=np.int16)).max(axis=-1) <= tolerance)
        if near.sum() < min_pixels:
            continue
        for component in _components(near):
            if component.sum() < min_pixels:
                continue
            ys, xs = np.nonzero(component)
            found.append((category, [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]))
    return found


def _components(mask: np.ndarray) -> list[np.ndarray]:
    """The 8-connected groups of set pixels of a boolean mask (a flood fill; test-sized images)."""
    seen = np.zeros_like(mask)
    groups = []
    h, w = mask.shape
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        group = np.zeros_like(mask)
        stack = [(int(y0), int(x0))]
        seen[y0, x0] = True
        while stack:
            y, x = stack.pop()
            group[y, x] = True
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    ny, nx = y + dy, x + dx
                    if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not seen[ny, nx]:
                        seen[ny, nx] = True
                        stack.append((ny, nx))
        groups.append(group)
    return groups
