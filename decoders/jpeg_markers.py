"""The walk over a JPEG's marker segments that its header readers share (frame, EXIF, scans).

Every reader here trusts nothing: a length is read as declared and each caller checks it
against the data before it reads a payload.
"""

from __future__ import annotations

from collections.abc import Iterator

START_OF_SCAN, END_OF_IMAGE = 0xDA, 0xD9
NOT_A_MARKER = -1
# what may follow 0xFF in a header: a segment's marker (0xC0-0xFE but SOI and RSTn) or the end of
# image. Pillow reads 0xFF00 as junk to skip and refuses TEM and the reserved 0x02-0xBF, nvImageCodec
# refuses RSTn and a second SOI: a walk that took them for markers would read another header than
# a decoder reads (an EXIF block hidden behind a 0xFF00 "length")
_HEADER_MARKERS = frozenset(range(0xC0, 0xFF)) - {*range(0xD0, 0xD9)}


def segments(data: bytes, start: int = 2) -> Iterator[tuple[int, int, int]]:
    """``(marker, offset, end)`` of each segment from ``start`` (just after the start-of-image
    marker by default), fill bytes skipped: ``end`` is where the segment's declared length
    ends it (two bytes on for the end of image), which may lie past the data. The walk
    ends after a start of scan or the end of image (the caller finds where a scan's data ends
    and walks on from there), or with ``(NOT_A_MARKER, offset, offset)`` where a segment's
    marker, or its length, should be and is not (junk, 0xFF00, or a marker without a length
    field other than the end of image: see `_HEADER_MARKERS`)."""
    i, n = start, len(data)
    while i + 2 <= n:
        if data[i] != 0xFF:
            break
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker not in _HEADER_MARKERS:
            break
        if marker == END_OF_IMAGE:
            yield marker, i, i + 2
            return
        if i + 4 > n:
            break
        end = i + 2 + int.from_bytes(data[i + 2 : i + 4], "big")
        yield marker, i, end
        if marker == START_OF_SCAN:
            return
        i = end
    yield NOT_A_MARKER, i, i
