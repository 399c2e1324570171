"""Detection targets shared by the detection sources (COCO, YOLO) and the converted format.

A detection sample carries, besides its image, one row per object: ``boxes`` (float32 (N, 4),
pixels, in the declared format), ``labels`` (int64 (N,), indices into ``source.classes``),
and for COCO ``iscrowd`` (int64 (N,)) and on request ``masks`` (uint8 (N, H, W), one binary
mask per object). `detection_types` declares them, the last three per object
(`mediapipe.fields.per_object`): every geometric op moves the boxes and masks with the pixels,
and `SanitizeBoundingBoxes` drops the same rows of each. `clamped_boxes` puts boxes in the
asked format, `decode_masks` turns COCO polygons and RLE into masks with pycocotools, and
`targets_to_json` / `targets_from_json` write them into a converted dataset's ``.json`` member
and read them back, masks as compressed RLE, so that the round trip is exact.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from mediapipe.dataset.safe_io import show
from mediapipe.errors import SourceError
from mediapipe.fields import (
    BOX_FORMATS,
    BOXES,
    KEYPOINTS,
    LABEL,
    MASK,
    OTHER,
    FieldType,
    boxes,
    field_type,
    per_object,
)

OBJECT_COLLATES = ("list", "pad")
MAX_MASK_BYTES = 1 << 30  # one sample's masks (N x H x W bytes): more is refused, not allocated
TRACE_BYTES = 24  # what pycocotools allocates per point it traces along a polygon's outline (upsampled five times)
RLE_DIGITS = 7  # characters of one run in a compressed RLE string: 35 bits, past any mask's pixel count
BAD_ANNOTATION = "bad annotation"  # the error category: on_error="skip" skips such samples


def detection_types(box_format: str, *, crowd: bool, masks: bool, collate: str = "list") -> dict[str, FieldType]:
    """The fields of a detection source: boxes, labels, iscrowd (COCO), masks (when asked for).
    ``collate`` ("list" or "pad") batches every per-object field alike; masks batch as lists."""
    if collate not in OBJECT_COLLATES:
        raise ValueError(f"collate={collate!r}: expected one of {OBJECT_COLLATES}")
    if box_format not in BOX_FORMATS:
        raise ValueError(f"box_format={box_format!r}: expected one of {BOX_FORMATS}")
    types = {"boxes": boxes(box_format, collate=collate), "labels": per_object(LABEL, collate=collate)}
    if crowd:
        types["iscrowd"] = per_object(OTHER, collate=collate)
    if masks:
        types["masks"] = per_object(MASK, collate="list")  # (N, H, W): one object axis only where sizes agree
    return types


def boxes_from_xywh(xywh: np.ndarray, box_format: str) -> np.ndarray:
    """(N, 4) boxes given as top-left corner and size, in ``box_format``."""
    x, y, w, h = (xywh[:, i] for i in range(4))
    if box_format == "xywh":
        return xywh.astype(np.float32, copy=True)
    if box_format == "xyxy":
        return np.stack([x, y, x + w, y + h], axis=1).astype(np.float32)
    return np.stack([x + w / 2, y + h / 2, w, h], axis=1).astype(np.float32)


def clamped_boxes(x0: np.ndarray, y0: np.ndarray, x1: np.ndarray, y1: np.ndarray, width: Any, height: Any,
                  box_format: str) -> np.ndarray:
    """(N, 4) float32 boxes in ``box_format`` from corners, clamped to their image (``width`` and
    ``height``: one per box, or one for all)."""
    x0, x1 = np.clip(x0, 0, width), np.clip(x1, 0, width)
    y0, y1 = np.clip(y0, 0, height), np.clip(y1, 0, height)
    return boxes_from_xywh(np.stack([x0, y0, x1 - x0, y1 - y0], axis=1), box_format)


def _pycocotools_mask() -> Any:
    try:
        from pycocotools import mask
    except ImportError as err:
        raise ImportError("masks need pycocotools: pip install 'mediapipe-loader[detection]' "
                          "(or pip install pycocotools)") from err
    return mask


def check_mask_bytes(count: int, height: int, width: int, where: str) -> None:
    """Refuse a sample whose masks would take more than MAX_MASK_BYTES, before allocating them."""
    if count * height * width > MAX_MASK_BYTES:
        raise SourceError(where, f"{count} masks of {width}x{height} would take {count * height * width} bytes, "
                          f"more than {MAX_MASK_BYTES}", category=BAD_ANNOTATION)


def rle_string_counts(counts: str | bytes) -> np.ndarray | None:
    """The run lengths of a compressed COCO RLE string, read as pycocotools' ``rleFrString`` reads
    them (6 bits a character from '0', a continuation bit, the last character's sign bit, runs
    from the third on stored as differences from the one two before), without decoding a pixel;
    None when the text is not such a string. Runs that do not add up to the mask's size would
    make pycocotools write past the mask or leave pixels unwritten."""
    try:
        data = counts.encode("ascii") if isinstance(counts, str) else bytes(counts)
    except UnicodeEncodeError:
        return None
    c = np.frombuffer(data, dtype=np.uint8).astype(np.int64) - 48
    if not c.size:
        return np.zeros(0, dtype=np.int64)
    if ((c < 0) | (c > 63)).any() or c[-1] & 0x20:  # a byte outside the alphabet, or the last run unfinished
        return None
    ends = np.flatnonzero((c & 0x20) == 0)
    starts = np.concatenate(([0], ends[:-1] + 1))
    digits = ends - starts + 1
    if digits.max() > RLE_DIGITS:
        return None
    run = np.repeat(np.arange(len(ends)), digits)
    values = np.zeros(len(ends), dtype=np.int64)
    np.add.at(values, run, (c & 0x1F) << (5 * (np.arange(c.size) - starts[run])))
    negative = (c[ends] & 0x10) != 0
    values[negative] -= np.int64(1) << (5 * digits[negative])
    runs = values.copy()
    runs[1::2] = np.cumsum(values[1::2])  # run m > 2 is stored as its difference from run m - 2
    runs[2::2] = np.cumsum(values[2::2])
    return runs


def segmentation_points(segmentation: Any, height: int, width: int) -> int:
    """Check a COCO segmentation before pycocotools is given it, for a ``height`` x ``width``
    image: polygons of x, y pairs (3 points at least) no further than one image size outside it
    (pycocotools traces a polygon's outline in int pixels upsampled five times: a huge coordinate
    overflows and crashes the interpreter), or RLE of the image's size whose runs add up to its
    pixels.
    Returns how many outline points pycocotools will trace (0 for RLE); a ValueError says why not
    (its message starts with the part at fault: ".size: ...", ": expected polygons ...")."""
    if isinstance(segmentation, list):
        if not segmentation:
            raise ValueError(": expected polygons (lists of x, y pairs, 3 points at least)")
        points = 0
        for polygon in segmentation:
            try:
                xy = np.asarray(polygon, dtype=np.float64)
            except (TypeError, ValueError):
                xy = np.zeros(0)
            if type(polygon) is not list or xy.ndim != 1 or xy.size < 6 or xy.size % 2:
                raise ValueError(": expected polygons (lists of x, y pairs, 3 points at least)")
            x, y = xy[0::2], xy[1::2]
            if not (np.isfinite(xy).all() and -width <= x.min() and x.max() <= 2 * width
                    and -height <= y.min() and y.max() <= 2 * height):
                raise ValueError(f": a polygon point lies further than the image's size outside the {width}x{height} "
                                 "image")
            steps = np.maximum(np.abs(np.diff(x, append=x[:1])), np.abs(np.diff(y, append=y[:1])))
            points += int(np.ceil(steps * 5).sum()) + len(x) * 2
        return points
    if not isinstance(segmentation, dict):
        raise ValueError(": expected polygons or RLE, got "
                         f"{'nothing' if segmentation is None else type(segmentation).__name__}")
    size, counts = segmentation.get("size"), segmentation.get("counts")
    if size != [height, width]:
        raise ValueError(f".size: {show(size)}, but the image is {height}x{width} ([height, width])")
    if isinstance(counts, list):
        ok = all(type(v) is int and v >= 0 for v in counts) and sum(counts) == height * width
    else:
        runs = rle_string_counts(counts) if isinstance(counts, (str, bytes)) else None
        ok = runs is not None and bool((runs >= 0).all()) and int(runs.sum()) == height * width
    if not ok:
        raise ValueError(f".counts: expected an RLE string, or run lengths adding up to {height * width} "
                         f"({height}x{width} pixels)")
    return 0


def check_trace_points(points: int, where: str, what: str) -> None:
    """Refuse polygons whose outlines pycocotools would trace in more than MAX_MASK_BYTES."""
    if points * TRACE_BYTES > MAX_MASK_BYTES:
        raise SourceError(where, f"{what}: polygons whose outlines pycocotools would trace in "
                          f"{points * TRACE_BYTES} bytes, more than {MAX_MASK_BYTES}", category=BAD_ANNOTATION)


def decode_masks(segmentations: list[Any], height: int, width: int, where: str) -> torch.Tensor:
    """uint8 (N, H, W) binary masks of COCO segmentations: polygons (a list of [x0, y0, x1, y1, ...])
    or RLE (``{"counts": [...] or "...", "size": [H, W]}``), decoded by pycocotools once each is
    checked (`segmentation_points`) and what tracing the polygons takes is within MAX_MASK_BYTES."""
    check_mask_bytes(len(segmentations), height, width, where)
    points = 0
    for i, segmentation in enumerate(segmentations):
        try:
            points += segmentation_points(segmentation, height, width)
        except ValueError as err:
            raise SourceError(where, f"object {i}: segmentation{err}", category=BAD_ANNOTATION) from None
    check_trace_points(points, where, f"{len(segmentations)} segmentations")
    out = np.zeros((len(segmentations), height, width), dtype=np.uint8)
    if not segmentations:
        return torch.from_numpy(out)
    mask_api = _pycocotools_mask()
    for i, segmentation in enumerate(segmentations):
        try:
            if isinstance(segmentation, list):
                rle = mask_api.merge(mask_api.frPyObjects(segmentation, height, width))
            elif isinstance(segmentation["counts"], list):  # uncompressed RLE
                rle = mask_api.frPyObjects(segmentation, height, width)
            else:
                counts = segmentation["counts"]
                rle = {"size": segmentation["size"], "counts": counts.encode("ascii") if isinstance(counts, str)
                       else counts}
            out[i] = mask_api.decode(rle)
        except (ValueError, TypeError, KeyError, UnicodeEncodeError) as err:
            raise SourceError(where, f"object {i}: segmentation cannot be decoded ({err})",
                              category=BAD_ANNOTATION) from None
    return torch.from_numpy(out)


def masks_to_rle(masks: torch.Tensor) -> dict[str, Any]:
    """(N, H, W) binary masks as ``{"size": [H, W], "counts": [str, ...]}``: compressed COCO RLE
    per mask (the size kept for a sample without objects too)."""
    height, width = int(masks.shape[-2]), int(masks.shape[-1])
    if masks.shape[0] == 0:
        return {"size": [height, width], "counts": []}
    array = np.asfortranarray(masks.to(torch.uint8).permute(1, 2, 0).numpy())
    return {"size": [height, width], "counts": [r["counts"].decode("ascii") for r in _pycocotools_mask().encode(array)]}


# -- targets in a converted dataset's .json member ----------------------------------------------
def types_to_config(types: Mapping[str, FieldType]) -> dict[str, dict[str, str]]:
    return {name: t.to_config() for name, t in types.items()}


def types_from_config(config: Any, where: str) -> dict[str, FieldType]:
    """Field types as a manifest stores them, each checked (a `SourceError` naming ``where``)."""
    if type(config) is not dict:
        raise SourceError(where, f"field_types: expected an object, got {type(config).__name__}")
    types = {}
    for name, value in config.items():
        try:
            types[name] = field_type(value)
            if not types[name].rows_are_objects:
                raise ValueError(f"a {types[name]} field is not a target (one row per object)")
        except (TypeError, ValueError) as err:
            raise SourceError(where, f"field_types[{show(name)}]: {err}") from None
    return types


def targets_to_json(fields: Mapping[str, Any], types: Mapping[str, FieldType]) -> dict[str, Any]:
    """The per-object fields of one sample as JSON values: numbers as nested lists (float32
    values print exactly), masks as compressed RLE."""
    out: dict[str, Any] = {}
    for name, t in types.items():
        value = fields.get(name)
        if value is None:
            continue
        value = torch.as_tensor(value)
        out[name] = masks_to_rle(value) if t.kind == MASK else value.tolist()
    return out


def scale_targets(fields: dict[str, Any], types: Mapping[str, FieldType], before: tuple[int, int],
                  after: tuple[int, int]) -> dict[str, Any]:
    """Targets of an image resized from ``before`` to ``after`` (H, W): boxes and keypoints
    scaled, masks resized with nearest, as the image was (a conversion's --image-max-side)."""
    if before == after:
        return fields
    from mediapipe.augment.functional import objects

    out = dict(fields)
    for name, t in types.items():
        value = fields.get(name)
        if value is None:
            continue
        value = torch.as_tensor(value)
        if t.kind == BOXES:  # (an edge on the image's stays on the resized image's: `resize_boxes`)
            out[name] = objects.resize_boxes(value, after, canvas_size=before, format=t.format)
        elif t.kind == KEYPOINTS:
            out[name] = objects.resize_keypoints(value, after, canvas_size=before)
        elif t.kind == MASK and value.numel():
            out[name] = torch.nn.functional.interpolate(value[None].float(), size=after, mode="nearest")[0].to(
                value.dtype)
        elif t.kind == MASK:
            out[name] = value.new_zeros((value.shape[0], *after))
    return out


def orient_targets(fields: Mapping[str, Any], types: Mapping[str, FieldType], orientation: int,
                   stored: tuple[int, int]) -> dict[str, Any]:
    """The targets of a ``stored`` (H, W) frame turned as EXIF ``orientation`` turns its image
    (`decoders.image(exif_transpose=True)`): boxes, keypoints and masks per object; the fields of
    ``types`` that ``fields`` holds, the others as they are."""
    if orientation == 1:
        return dict(fields)
    from mediapipe.augment.functional import geometry, objects

    out = dict(fields)
    for name, t in types.items():
        value = fields.get(name)
        if value is None:
            continue
        if t.kind == BOXES:
            out[name] = objects.orient_boxes(value, orientation, canvas_size=stored, format=t.format)
        elif t.kind == KEYPOINTS:
            out[name] = objects.orient_keypoints(value, orientation, canvas_size=stored)
        elif t.kind == MASK:
            out[name] = geometry.orient_image(torch.as_tensor(value), orientation)
    return out


def frame_problem(declared: tuple[int, int], decoded: tuple[int, int], orientation: int,
                  file_orientation: int) -> str | None:
    """Why an image that decodes to ``decoded`` (H, W), after its decoder turned it by ``orientation``
    (1: not turned), is not the ``declared`` (H, W) frame its targets are in pixels of, or None.
    The declared size is the stored frame's, as in the files COCO tools write: a size that is the
    stored frame turned by the file's EXIF orientation (``file_orientation``) says its targets were
    drawn on the turned image, which is refused rather than read in the wrong frame."""
    from mediapipe.decoders.exif import SWAPS_SIDES, oriented_size

    expected = oriented_size(orientation, *declared)
    if tuple(decoded) == expected:
        return None
    stored = oriented_size(orientation, *decoded)  # the file's frame as stored
    shown = f"the source declares the image {declared[1]}x{declared[0]}, the file decodes to {decoded[1]}x{decoded[0]}"
    if orientation != 1:
        shown += f" (turned by its EXIF orientation {orientation}: {stored[1]}x{stored[0]} as stored)"
    if file_orientation in SWAPS_SIDES and tuple(declared) == stored[::-1]:
        return (f"{shown}: the declared size is the image's as its EXIF orientation {file_orientation} turns it, so "
                "its annotations were drawn on the turned image, but targets are read in the stored frame (the "
                "image as torchvision's CocoDetection opens it); write the images upright with their annotations "
                "(PIL.ImageOps.exif_transpose), or annotate the stored frame and declare its size")
    return f"{shown}: its targets are in pixels of another image"


def targets_from_json(obj: Any, types: Mapping[str, FieldType], where: str, *, num_classes: int | None = None,
                      canvas: tuple[int, int] | None = None) -> dict[str, torch.Tensor]:
    """`targets_to_json`'s values back as tensors: boxes and keypoints float32, other per-object
    values int64 (float64 if any is not an integer that int64 holds), masks uint8 (N, H, W).
    Every field holds one row per object, so all of them hold as many rows (a declared field
    may be left out only by a sample without objects); class ids are integers, from 0 to
    ``num_classes`` - 1 when it is known; masks are of the sample's ``canvas`` (H, W) when it is
    known. Anything else is a `SourceError` naming ``where`` and the field."""
    if type(obj) is not dict:
        raise SourceError(where, f"targets: expected an object, got {type(obj).__name__}", category=BAD_ANNOTATION)
    out: dict[str, torch.Tensor] = {}
    for name, t in types.items():
        if name not in obj:
            continue
        value = obj[name]
        if t.kind == MASK:
            out[name] = _masks_from_rle(value, name, where, canvas)
            continue
        if type(value) is not list:
            raise SourceError(where, f"targets[{show(name)}]: expected a list, got {type(value).__name__}",
                              category=BAD_ANNOTATION)
        out[name] = _numbers_from_json(value, name, t, where, num_classes)
    rows = {name: int(v.shape[0]) for name, v in out.items()}
    if len(set(rows.values())) > 1:
        raise SourceError(where, f"targets: {rows} rows, but every per-object field holds one row per object",
                          category=BAD_ANNOTATION)
    missing = [name for name in types if name not in out]
    if missing and any(rows.values()):
        raise SourceError(where, f"targets: no {missing}, but {max(rows.values())} objects in {sorted(rows)}",
                          category=BAD_ANNOTATION)
    return out


def _numbers_from_json(value: list[Any], name: str, t: FieldType, where: str,
                       num_classes: int | None) -> torch.Tensor:
    """One per-object field of `targets_from_json` that is not masks, as a checked tensor."""
    field = f"targets[{show(name)}]"
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):  # ragged
        array = np.asarray(None)
    if array.size and array.dtype.kind not in "iuf":
        raise SourceError(where, f"{field}: expected numbers", category=BAD_ANNOTATION)
    array = array.astype(np.float64)
    if not np.isfinite(array).all():
        raise SourceError(where, f"{field}: holds a value that is not a finite number", category=BAD_ANNOTATION)
    if t.kind in (BOXES, KEYPOINTS):
        if not array.size:
            return torch.zeros((0, 4) if t.kind == BOXES else (0, 2))
        if array.shape[-1:] != ((4,) if t.kind == BOXES else (2,)) or (t.kind == BOXES and array.ndim != 2):
            raise SourceError(where, f"{field}: shape {array.shape}, expected "
                              f"{'(N, 4)' if t.kind == BOXES else '(N, ..., 2)'}", category=BAD_ANNOTATION)
        return torch.from_numpy(array.astype(np.float32))
    if not array.size:
        return torch.zeros(0, dtype=torch.int64)
    integral = bool((array == np.round(array)).all() and (np.abs(array) < 2.0**63).all())
    if t.kind == LABEL and not (integral and array.min() >= 0 and (num_classes is None or array.max() < num_classes)):
        known = f" from 0 to {num_classes - 1}" if num_classes is not None else " from 0"
        raise SourceError(where, f"{field}: holds {show(array.ravel()[:7].tolist())}, but class ids are "
                          f"integers{known}", category=BAD_ANNOTATION)
    return torch.from_numpy(array.astype(np.int64) if integral else array)


def _masks_from_rle(value: Any, name: str, where: str, canvas: tuple[int, int] | None = None) -> torch.Tensor:
    """(N, H, W) uint8 masks from `masks_to_rle`'s form, checked before anything is decoded."""
    ok = (type(value) is dict and type(value.get("size")) is list and len(value["size"]) == 2
          and all(type(s) is int and 0 < s <= 1 << 20 for s in value["size"])
          and type(value.get("counts")) is list and all(type(c) is str for c in value["counts"]))
    field = f"targets[{show(name)}]"
    if not ok:
        raise SourceError(where, f"{field}: expected {{'size': [H, W], 'counts': [str, ...]}} "
                          "(compressed RLE)", category=BAD_ANNOTATION)
    height, width = value["size"]
    if canvas is not None and (height, width) != tuple(canvas):
        raise SourceError(where, f"{field}: masks of {width}x{height}, but the image is {canvas[1]}x{canvas[0]}",
                          category=BAD_ANNOTATION)
    rles = [{"size": [height, width], "counts": c} for c in value["counts"]]
    return decode_masks(rles, height, width, f"{where}: {field}")


def confined_files(root: str) -> tuple[set[str], dict[str, str]]:
    """The files under ``root`` as relative paths (one listing, links to folders not followed),
    and the links among them that resolve outside ``root`` (relative path -> target): what a
    dataset's file names may name, checked without a system call per name."""
    real_root = os.path.realpath(root)
    files: set[str] = set()
    outside: dict[str, str] = {}
    pending = [("", real_root)]
    while pending:
        prefix, folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as err:
            raise SourceError(folder, f"cannot list the folder: {err.strerror or err}") from err
        for entry in entries:
            rel = prefix + entry.name
            if entry.is_dir(follow_symlinks=False):
                pending.append((rel + "/", entry.path))
            elif entry.is_symlink():
                target = os.path.realpath(entry.path)
                if os.path.commonpath([real_root, target]) == real_root and os.path.isfile(target):
                    files.add(rel)
                else:
                    outside[rel] = target
            elif entry.is_file(follow_symlinks=False):
                files.add(rel)
    return files, outside


def file_problem(name: Any, files: set[str], outside: dict[str, str], root: str) -> tuple[str | None, str]:
    """(why the file a dataset names cannot be read, or None; its path relative to ``root``)."""
    if type(name) is not str or not name or "\0" in name:
        return f"expected a file name, got {show(name)}", ""
    rel = os.path.normpath(name).replace(os.sep, "/")
    shown = repr(name) if len(name) <= 1024 else show(name)  # a real path whole; a hostile one cut short
    if os.path.isabs(name) or rel == ".." or rel.startswith("../"):
        return f"{shown} is outside the images folder {root}", rel
    if rel in outside:
        return f"{shown} is a link to {outside[rel]}, outside the images folder {root}", rel
    if rel not in files:
        return f"{shown}: no such file in {root}", rel
    return None, rel
