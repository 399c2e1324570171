"""A progressive JPEG without the scans that refine its AC coefficients' last bit.

A progressive JPEG codes each coefficient in successive-approximation scans; the final ones
(``Ss > 0, Ah > 0, Al = 0``) add the last bit of the AC coefficients and hold a large share of
the entropy-coded bytes, which every decoder reads whole whatever the crop. Without them each
AC coefficient is off by less than one quantisation step: invisible once a crop is shrunk by
an antialiased resize (the decoders do this only then, see `plan_decode`; the PSNR tests
bound it). The result is itself a valid JPEG, decoded by every backend alike.
"""

from __future__ import annotations

import re

_STANDALONE = {0x01, *range(0xD0, 0xD9)}  # markers without a length field
# the end of a scan's entropy-coded data: a marker other than a stuffed 0xFF00 or a restart
_SCAN_END = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def without_final_refinement(data: bytes) -> bytes | None:
    """``data`` without its final AC refinement scans, or None where it has none or its
    segments are not laid out as this parser vouches for (the caller decodes ``data``)."""
    kept: list[bytes] = [data[:2]]
    dropped = False
    i, end = 2, len(data)
    while i + 2 <= end:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0xD9:  # end of image
            kept.append(data[i : i + 2])
            return b"".join(kept) if dropped else None
        if marker in _STANDALONE:
            kept.append(data[i : i + 2])
            i += 2
            continue
        if i + 4 > end:
            return None
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        header_end = i + 2 + length
        if length < 2 or header_end > end:
            return None
        if marker != 0xDA:
            kept.append(data[i:header_end])
            i = header_end
            continue
        components = data[i + 4] if length >= 3 else 0
        fields = i + 5 + 2 * components
        if length != 6 + 2 * components or fields + 3 > header_end:
            return None
        start, approximation = data[fields], data[fields + 2]
        scan_end = _SCAN_END.search(data, header_end)
        if scan_end is None:
            return None  # no marker after the scan: a file cut short, for the decoder to report
        if start > 0 and approximation >> 4 > 0 and approximation & 15 == 0:
            dropped = True
        else:
            kept.append(data[i : scan_end.start()])
        i = scan_end.start()
    return None
