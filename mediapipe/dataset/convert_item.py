"""Converting one input of `mediapipe convert`: read, check and transcode it, its targets as JSON.

A failure becomes the input's reason (an `ItemResult` with ``error``), never an exception."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Any

from mediapipe.dataset.convert_plan import InputItem
from mediapipe.dataset.layout import safe_key
from mediapipe.dataset.schema import is_finite_number
from mediapipe.dataset.transcode import TranscodeError, TranscodeOptions, transcode
from mediapipe.errors import MediapipeError
from mediapipe.reasons import readable, reason
from mediapipe.sample import Blob, kind_of_bytes, kind_of_extension


@dataclass
class ItemResult:
    item: InputItem
    ext: str = ""
    data: bytes = b""
    meta: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    extra: dict[str, bytes] = field(default_factory=dict)  # member extension ("mask.png") -> bytes
    targets: dict[str, Any] | None = None  # boxes, labels, masks... as JSON values, for the .json member


def convert_item(item: InputItem, options: TranscodeOptions) -> ItemResult:
    """Read and transcode one input; a failure becomes a reason, never an exception."""
    from mediapipe.loaders.sources.formats import read_input

    try:
        data, targets, canvas = read_input(item)
    except OSError as err:  # SourceError too: it names the record and the reason
        return ItemResult(item, error=str(err) if item.source else f"cannot read: {err.strerror or err}")
    except MediapipeError as err:
        return ItemResult(item, error=str(err))
    numbers = {k: v for k, v in item.fields if type(v) is not str} | ({} if item.label is None else {"label": item.label})
    for name, value in numbers.items():
        if not is_finite_number(value):  # the dataset's strict JSON could not hold it
            return ItemResult(item, error=f"field {name!r} is {value!r}, not a finite number")
    kind = kind_of_extension(item.ext) or kind_of_bytes(data[:16])
    if kind is None:
        return ItemResult(item, error=f"unknown media kind (extension {item.ext!r})")
    extra = {}
    for name, path in item.extra:  # masks and other per-field media: lossless, so copied as they are
        ext = path.rsplit(".", 1)[-1].lower() if "." in os.path.basename(path) else "bin"
        try:
            extra[f"{safe_key(name)}.{ext}"] = Blob(path, path=path).read()
        except OSError as err:
            return ItemResult(item, error=f"cannot read its {name!r} file {path}: {err.strerror or err}")
    try:
        ext, out, meta = transcode(data, kind, item.ext, options)
    except TranscodeError as err:
        return ItemResult(item, error=readable(str(err), err.__cause__))
    except Exception as err:  # noqa: BLE001  every failure is reported with its reason, none is dropped
        return ItemResult(item, error=f"{type(err).__name__}: {reason(err)}")
    result = ItemResult(item, ext, out, {"kind": kind, **meta}, extra=extra)
    if targets:
        try:
            result.targets = targets_json(item, data, targets, canvas, (meta["height"], meta["width"]))
        except (MediapipeError, ValueError, OSError) as err:
            return ItemResult(item, error=str(err))
    return result


def targets_json(item: InputItem, data: bytes, targets: dict[str, Any], canvas: tuple[int, int] | None,
                 written: tuple[int, int]) -> dict[str, Any]:
    """An input's targets as JSON values, in pixels of the image as written: scaled when the
    image was resized (``image_max_side``), and turned with it where the image is written turned
    by its EXIF orientation (the annotations are in the stored frame, as COCO tools write them).
    An image whose size is not the one its annotations give is refused: its targets would not match."""
    from PIL import Image

    from mediapipe.decoders.exif import file_orientation, oriented_size
    from mediapipe.loaders.sources.formats import target_types
    from mediapipe.loaders.sources.targets import orient_targets, scale_targets, targets_to_json

    with Image.open(io.BytesIO(data)) as im:
        stored = (im.size[1], im.size[0])
    if canvas is not None and canvas != stored:
        raise ValueError(f"the annotations are for a {canvas[1]}x{canvas[0]} image, the file is "
                         f"{stored[1]}x{stored[0]}")
    types = target_types(item)
    orientation = file_orientation(data)  # what transcode_image's exif_transpose turns the image by
    turned = orient_targets(targets, types, orientation, stored)
    return targets_to_json(scale_targets(turned, types, oriented_size(orientation, *stored), written), types)

