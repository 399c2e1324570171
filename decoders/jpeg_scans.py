"""A progressive JPEG without the scans that refine its AC coefficients' last bit.

A progressive JPEG codes each coefficient in successive-approximation scans; the final ones
(``Ss > 0, Ah > 0, Al = 0``) add the last bit of the AC coefficients and hold a large share of
the entropy-coded bytes, which every decoder reads whole whatever the crop. Without them each
AC coefficient is off by less than one quantisation step: invisible once a crop is shrunk by
an antialiased resize (the decoders do this only then, see `plan_decode`; the PSNR tests
bound it). The error grows with the quantisation step and the resize divides it by the shrink,
so a file quantised coarsely (low JPEG quality) needs a shrink larger in proportion
(`shrink_needed`). The result is itself a valid JPEG, decoded by every backend alike.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from mediapipe.decoders.jpeg_markers import END_OF_IMAGE, NOT_A_MARKER, START_OF_SCAN, segments

_FRAME_SOF = {*range(0xC0, 0xD0)} - {0xC4, 0xC8, 0xCC}  # start-of-frame markers (not DHT, JPG, DAC)
# the end of a scan's entropy-coded data: a marker other than a stuffed 0xFF00 or a restart
_SCAN_END = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
# the final refinement scans are dropped only for a region the resize shrinks at least this many
# times in both dimensions, for quantisation steps up to those of libjpeg's standard tables at
# quality 80: a mean AC step of REFERENCE_MEAN_AC_STEP, and REFERENCE_LOW_AC_STEP over the
# LOW_BAND lowest AC frequencies (zig-zag order, u + v <= 4), which the resize passes; coarser
# steps need a shrink larger in proportion. The mean alone lets a table with coarse low and fine
# high frequencies (or a flat one) through, whose error the resize does not average away
COARSE_MARGIN = 1.5
REFERENCE_MEAN_AC_STEP = 36.0
REFERENCE_LOW_AC_STEP = 18.15
LOW_BAND = 14


def shrink_needed(mean_ac_step: float, low_ac_step: float = 0.0) -> float:
    """The least shrink at which a file whose coarsest tables have this mean AC step and this
    mean step over the `LOW_BAND` lowest AC frequencies may lose the last bit of its AC
    coefficients."""
    return COARSE_MARGIN * max(1.0, mean_ac_step / REFERENCE_MEAN_AC_STEP, low_ac_step / REFERENCE_LOW_AC_STEP)


@dataclass(frozen=True)
class Scan:
    """A scan's header fields and where it lies: from its SOS marker to the end of its data."""

    start: int
    end: int
    components: bytes  # the component selectors
    ss: int
    se: int
    ah: int
    al: int

    @property
    def final_refinement(self) -> bool:
        """Whether it adds the last bit of AC coefficients (``Ss > 0, Ah > 0, Al = 0``)."""
        return self.ss > 0 and self.ah > 0 and self.al == 0

    @property
    def well_formed_refinement(self) -> bool:
        """A final AC refinement as the standard allows it: one component, Ah = Al + 1, Ss <= Se <= 63."""
        return len(self.components) == 1 and self.ah == 1 and self.ss <= self.se <= 63


@dataclass(frozen=True)
class ScanLayout:
    """A whole JPEG's frame components, its scans, and where its end-of-image marker ends."""

    components: bytes  # the frame's component ids
    scans: list[Scan]
    end: int
    mean_ac_step: float  # the largest mean AC quantisation step of its tables
    low_ac_step: float = 0.0  # the largest mean step of its tables over the `LOW_BAND` lowest AC frequencies


def scan_layout(data: bytes) -> ScanLayout | None:
    """The scans of a JPEG that ends with an end-of-image marker, or None where its segments
    are not laid out as this parser vouches for (a file cut short, a bad length, junk)."""
    components, scans, steps, low_steps = b"", [], [0.0], [0.0]
    at = 2
    while True:
        for marker, i, header_end in segments(data, at):
            if marker == NOT_A_MARKER:
                return None
            if marker == END_OF_IMAGE:
                return ScanLayout(components, scans, i + 2, max(steps), max(low_steps)) if components and scans else None
            length = header_end - i - 2
            if length < 2 or header_end > len(data):
                return None
            if marker in _FRAME_SOF:
                if components or length < 8 or length != 8 + 3 * data[i + 9]:
                    return None  # a second frame, or a frame header that does not add up
                components = data[i + 10 : header_end : 3]
            if marker == 0xDB:
                tables = _mean_ac_steps(data[i + 4 : header_end])
                if tables is None:
                    return None
                steps += [mean for mean, _ in tables]
                low_steps += [low for _, low in tables]
            if marker == START_OF_SCAN:
                break
        else:
            return None
        count = data[i + 4] if length >= 3 else 0
        fields = i + 5 + 2 * count
        if not components or not 1 <= count <= 4 or length != 6 + 2 * count:
            return None
        scan_end = _SCAN_END.search(data, header_end)
        if scan_end is None:
            return None  # no marker after the scan: a file cut short, for the decoder to report
        approximation = data[fields + 2]
        scans.append(Scan(i, scan_end.start(), data[i + 5 : fields : 2], data[fields], data[fields + 1],
                          approximation >> 4, approximation & 15))
        at = scan_end.start()  # the walk goes on from the marker after the scan's data


def _mean_ac_steps(payload: bytes) -> list[tuple[float, float]] | None:
    """The mean AC step of each quantisation table of a DQT segment (8- or 16-bit entries, in
    zig-zag order), over all AC frequencies and over the `LOW_BAND` lowest, or None where the
    segment does not hold whole tables."""
    means, j = [], 0
    while j < len(payload):
        wide = payload[j] >> 4
        table = payload[j + 1 : j + 1 + 64 * (wide + 1)]
        if wide > 1 or len(table) < 64 * (wide + 1):
            return None
        values = [int.from_bytes(table[k : k + 2], "big") for k in range(0, 128, 2)] if wide else list(table)
        means.append((sum(values[1:]) / 63, sum(values[1 : 1 + LOW_BAND]) / LOW_BAND))
        j += 1 + len(table)
    return means


def without_final_refinement(data: bytes, shrink: float = math.inf) -> bytes | None:
    """``data`` without its final AC refinement scans, or None where it has none, where they
    would be all its scans, where ``shrink`` (how many times the resize shrinks the region) is
    below what its quantisation needs (`shrink_needed`), or where its segments are not laid out
    as this parser vouches for (malformed refinement headers included: the caller decodes
    ``data``, and reports them)."""
    layout = scan_layout(data)
    if layout is None or shrink < shrink_needed(layout.mean_ac_step, layout.low_ac_step):
        return None
    dropped = [scan for scan in layout.scans if scan.final_refinement]
    if not dropped or len(dropped) == len(layout.scans) or not all(s.well_formed_refinement for s in dropped):
        return None
    kept, i = [], 0
    for scan in dropped:
        kept.append(data[i : scan.start])
        i = scan.end
    kept.append(data[i : layout.end])
    return b"".join(kept)


def every_coefficient_refined(data: bytes) -> bool:
    """Whether a JPEG's scans bring every coefficient of every frame component to its last bit
    (``Al = 0``), as a baseline JPEG's do. A progressive one that stops short (its final scans
    left out, by us or by its encoder) is decoded with libjpeg's block smoothing, which a region
    decode does not reproduce; False too where `scan_layout` cannot tell."""
    layout = scan_layout(data)
    if layout is None:
        return False
    refined = {c: bytearray(64) for c in layout.components}  # 1 where Al = 0 has been reached
    for scan in layout.scans:
        if scan.al != 0 or scan.se > 63 or scan.ss > scan.se:
            continue
        for c in scan.components:
            if c in refined:
                refined[c][scan.ss : scan.se + 1] = b"\x01" * (scan.se + 1 - scan.ss)
    return all(all(bits) for bits in refined.values())
