"""A JPEG's EXIF orientation read from its header bytes, without decoding the image.

`exif_transpose=True` needs Pillow only for files that are turned or mirrored; an upright file
(the common case) can stay on the fast backends. The reading is conservative: where Pillow
could see an orientation this parser does not follow (two EXIF blocks, an XMP packet, an
unusual tag type, malformed offsets), it answers None and the caller asks Pillow.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from mediapipe.decoders.jpeg_markers import END_OF_IMAGE, NOT_A_MARKER, START_OF_SCAN, segments

ORIENTATION_TAG = 0x0112
SWAPS_SIDES = frozenset({5, 6, 7, 8})  # orientations that turn a W x H frame into H x W
_EXIF_ID = b"Exif\x00\x00"
_XMP_ID = b"http://ns.adobe.com/xap/1.0/\x00"
_SHORT = 3  # TIFF field type of the orientation value
PILLOW_EXIF_WARNING = r"(possibly )?corrupt exif"  # Pillow's UserWarnings on reading a damaged EXIF block


@contextlib.contextmanager
def quiet_exif() -> Iterator[None]:
    """Within this block Pillow's "corrupt EXIF data" warnings are not shown: a damaged EXIF block is
    read as Pillow reads it (the image is what exif_transpose gives), and one warning per sample
    and epoch would bury the output. The program's other warning filters stay as they are."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", PILLOW_EXIF_WARNING, UserWarning)
        yield


def jpeg_orientation(data: bytes) -> int | None:
    """The EXIF orientation (1 = upright) of a JPEG: 1 when it carries neither EXIF nor XMP,
    the tag's value when one EXIF block holds it, None when only Pillow can tell."""
    exif: list[bytes] = []
    for marker, i, end in segments(data):
        if marker == START_OF_SCAN:  # every header segment has been seen
            break
        if marker == NOT_A_MARKER or marker == END_OF_IMAGE:
            return None  # no start of scan: not a JPEG this parser vouches for
        if end < i + 4 or end > len(data):
            return None
        if marker == 0xE1:
            payload = data[i + 4 : end]
            if payload.startswith(_XMP_ID):
                return None  # Pillow reads tiff:Orientation from XMP where EXIF has none
            if payload.startswith(_EXIF_ID):
                exif.append(payload[len(_EXIF_ID) :])
    if not exif:
        return 1
    if len(exif) > 1:
        return None  # Pillow concatenates the blocks
    return _tiff_orientation(exif[0])


def _tiff_orientation(tiff: bytes) -> int | None:
    """The orientation in a TIFF structure's first directory: 1 if absent, None if unreadable."""
    if len(tiff) < 8 or tiff[:4] not in (b"II*\x00", b"MM\x00*"):
        return None
    order = "little" if tiff[:2] == b"II" else "big"
    offset = int.from_bytes(tiff[4:8], order)
    if offset < 8 or offset + 2 > len(tiff):
        return None
    count = int.from_bytes(tiff[offset : offset + 2], order)
    if offset + 2 + 12 * count > len(tiff):
        return None
    values = []
    for k in range(count):
        entry = tiff[offset + 2 + 12 * k : offset + 14 + 12 * k]
        if int.from_bytes(entry[0:2], order) != ORIENTATION_TAG:
            continue
        if int.from_bytes(entry[2:4], order) != _SHORT or int.from_bytes(entry[4:8], order) != 1:
            return None
        values.append(int.from_bytes(entry[8:10], order))
    if len(values) > 1:
        return None  # which one Pillow keeps is its own business
    return values[0] if values else 1


def file_orientation(data: bytes) -> int:
    """The EXIF orientation Pillow's ``exif_transpose`` applies to an image file (any format): 2 to
    8, or 1 for none (no tag, a value outside 2..8, or a file Pillow cannot open: its decoder says
    why). Read from a JPEG's header where `jpeg_orientation` vouches for it, else by Pillow."""
    orientation = jpeg_orientation(data)
    if orientation is None:
        import io

        from PIL import Image

        try:
            with quiet_exif(), Image.open(io.BytesIO(data)) as im:
                orientation = im.getexif().get(ORIENTATION_TAG, 1)
        except Exception:  # noqa: BLE001 - unreadable here is unreadable to the decoder, which raises
            return 1
    return orientation if orientation in range(2, 9) else 1


def oriented_size(orientation: int, height: int, width: int) -> tuple[int, int]:
    """(height, width) of a ``height`` x ``width`` stored frame once ``orientation`` turns it."""
    return (width, height) if orientation in SWAPS_SIDES else (height, width)
