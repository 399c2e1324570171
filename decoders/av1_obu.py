"""AV1's OBUs, sequence and frame headers, read as far as the reference graph needs: which
temporal units each unit depends on, and which frames libdav1d with skip_frame="NONREF" still outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def sequence_or_none(data: bytes) -> dict[str, Any] | None:
    """`av1_sequence`, or None when ``data`` holds no readable sequence header."""
    try:
        return av1_sequence(data)
    except (ValueError, IndexError):
        return None


class _Bits:
    """A big-endian bit reader over bytes (AV1's f(n))."""

    def __init__(self, data: bytes) -> None:
        self.value, self.left = int.from_bytes(data, "big"), 8 * len(data)

    def f(self, n: int) -> int:
        if n > self.left:
            raise ValueError("AV1 header ends early")
        self.left -= n
        return (self.value >> self.left) & ((1 << n) - 1)

    def uvlc(self) -> int:
        zeros = 0
        while not self.f(1):
            zeros += 1
            if zeros >= 32:
                raise ValueError("AV1 uvlc too long")
        return self.f(zeros) + (1 << zeros) - 1 if zeros else 0


_SELECT = 2  # SELECT_SCREEN_CONTENT_TOOLS / SELECT_INTEGER_MV
_KEY, _INTRA_ONLY, _SWITCH = 0, 2, 3


def _obus(data: bytes):
    """(obu_type, temporal_id, spatial_id, payload) of each OBU of a low-overhead AV1 stream."""
    pos = 0
    while pos < len(data):
        header = data[pos]
        kind, extension, has_size = (header >> 3) & 15, (header >> 2) & 1, (header >> 1) & 1
        pos += 1
        temporal = spatial = 0
        if extension:
            temporal, spatial = data[pos] >> 5, (data[pos] >> 3) & 3
            pos += 1
        if has_size:
            size = shift = 0
            while True:
                byte = data[pos]
                pos += 1
                size |= (byte & 127) << shift
                shift += 7
                if not byte & 128:
                    break
        else:
            size = len(data) - pos
        yield kind, temporal, spatial, data[pos : pos + size]
        pos += size


def av1_sequence(data: bytes) -> dict[str, Any] | None:
    """The sequence header fields that the frame header parse needs, from the first
    OBU_SEQUENCE_HEADER in ``data`` (a packet, or the av1C configOBUs), or None."""
    for kind, _, _, payload in _obus(data):
        if kind != 1:
            continue
        b = _Bits(payload)
        b.f(3)  # seq_profile
        b.f(1)  # still_picture
        reduced = b.f(1)
        seq = {"reduced": reduced, "decoder_model": 0, "equal_interval": 0, "presentation_bits": 0,
               "removal_bits": 0, "ops": [], "frame_ids": 0, "id_bits": 0, "screen": _SELECT,
               "integer_mv": _SELECT, "order_bits": 0}
        if reduced:
            b.f(5)
        else:
            if b.f(1):  # timing_info_present_flag
                b.f(32), b.f(32)
                seq["equal_interval"] = b.f(1)
                if seq["equal_interval"]:
                    b.uvlc()
                seq["decoder_model"] = b.f(1)
                if seq["decoder_model"]:
                    delay_bits = b.f(5) + 1
                    b.f(32)
                    seq["removal_bits"] = b.f(5) + 1
                    seq["presentation_bits"] = b.f(5) + 1
            display_delay = b.f(1)
            for _ in range(b.f(5) + 1):
                idc = b.f(12)
                if b.f(5) > 7:
                    b.f(1)
                present = 0
                if seq["decoder_model"]:
                    present = b.f(1)
                    if present:
                        b.f(delay_bits), b.f(delay_bits), b.f(1)
                if display_delay and b.f(1):
                    b.f(4)
                seq["ops"].append((idc, present))
        width_bits, height_bits = b.f(4) + 1, b.f(4) + 1
        b.f(width_bits), b.f(height_bits)
        if not reduced:
            seq["frame_ids"] = b.f(1)
        if seq["frame_ids"]:
            delta = b.f(4) + 2
            seq["id_bits"] = delta + b.f(3) + 1
        b.f(3)  # use_128x128_superblock, enable_filter_intra, enable_intra_edge_filter
        if not reduced:
            b.f(4)  # interintra, masked compound, warped motion, dual filter
            order_hint = b.f(1)
            if order_hint:
                b.f(2)  # jnt_comp, ref_frame_mvs
            seq["screen"] = _SELECT if b.f(1) else b.f(1)
            if seq["screen"] > 0:
                seq["integer_mv"] = _SELECT if b.f(1) else b.f(1)
            if order_hint:
                seq["order_bits"] = b.f(3) + 1
        return seq
    return None


@dataclass(frozen=True)
class Av1Frame:
    """One frame header of a temporal unit, as far as the reference graph needs it: the slots
    it reads (``ref_frame_idx``, or the slot a shown existing frame comes from), the slots it
    refreshes (a bit mask), its type, and ``unsafe`` when its decoding may depend on more than
    the slots it names (error-resilient order hints, short ref signalling, frame ids)."""

    reads: tuple[int, ...]
    writes: int
    frame_type: int
    shown: bool
    unsafe: bool = False
    existing: bool = False


def av1_frames(data: bytes, seq: dict[str, Any], slot_types: list[int]) -> list[Av1Frame]:
    """The frame headers of the temporal unit ``data`` (AV1 spec 5.9.2, read up to
    ``ref_frame_idx``). ``slot_types``: each reference slot's frame type so far (for a shown
    existing key frame, which refreshes every slot). Raises ValueError on what it cannot parse."""
    out: list[Av1Frame] = []
    all_slots = 0xFF
    for kind, temporal, spatial, payload in _obus(data):
        if kind not in (3, 6):  # OBU_FRAME_HEADER, OBU_FRAME (a redundant header repeats one: skipped below)
            continue
        if seq["reduced"]:
            out.append(Av1Frame((), all_slots, _KEY, True))
            continue
        b = _Bits(payload[:96])
        if b.f(1):  # show_existing_frame
            slot = b.f(3)
            key = slot_types[slot] == _KEY
            out.append(Av1Frame((slot,), all_slots if key else 0, slot_types[slot], True, existing=True))
            continue
        frame_type, show_frame = b.f(2), b.f(1)
        if show_frame and seq["decoder_model"] and not seq["equal_interval"]:
            b.f(seq["presentation_bits"])  # temporal_point_info
        if not show_frame:
            b.f(1)  # showable_frame
        intra = frame_type in (_KEY, _INTRA_ONLY)
        error_resilient = 1 if frame_type == _SWITCH or (frame_type == _KEY and show_frame) else b.f(1)
        b.f(1)  # disable_cdf_update
        screen = b.f(1) if seq["screen"] == _SELECT else seq["screen"]
        if screen and seq["integer_mv"] == _SELECT:
            b.f(1)  # force_integer_mv
        if seq["frame_ids"]:
            b.f(seq["id_bits"])  # current_frame_id
        if frame_type != _SWITCH:
            b.f(1)  # frame_size_override_flag
        b.f(seq["order_bits"])  # order_hint
        if not intra and not error_resilient:
            b.f(3)  # primary_ref_frame
        if seq["decoder_model"] and b.f(1):  # buffer_removal_time_present_flag
            for idc, present in seq["ops"]:
                if present and (idc == 0 or ((idc >> temporal) & 1 and (idc >> (spatial + 8)) & 1)):
                    b.f(seq["removal_bits"])
        if frame_type == _SWITCH or (frame_type == _KEY and show_frame):
            writes = all_slots
        else:
            writes = b.f(8)
        if intra:
            out.append(Av1Frame((), writes, frame_type, bool(show_frame)))
            continue
        unsafe = bool(seq["frame_ids"]) or bool(error_resilient and seq["order_bits"])
        if error_resilient and seq["order_bits"]:
            for _ in range(8):
                b.f(seq["order_bits"])  # ref_order_hint[i]
        short = b.f(1) if seq["order_bits"] else 0  # frame_refs_short_signaling
        if short:
            out.append(Av1Frame(tuple(range(8)), writes, frame_type, bool(show_frame), unsafe=True))
            continue
        reads = tuple(sorted({b.f(3) for _ in range(7)}))  # ref_frame_idx[0..6]
        out.append(Av1Frame(reads, writes, frame_type, bool(show_frame), unsafe=unsafe))
    if not any(f.shown for f in out):
        raise ValueError("no shown frame in the temporal unit")
    return out


class ReferenceGraph:
    """Which earlier temporal units each unit of an AV1 stream needs decoded first, built from
    the frame headers as the index demuxes them (one unit per packet, in decoding order,
    which for AV1 is presentation order): a unit reading a slot needs the unit that last
    refreshed it. Decoding only the closure of a clip's frames gives the same frames bit for bit
    (the other units change no slot those frames read): the lead-in shrinks to the frames the
    clip depends on, and frames between strided picks that nothing references are never decoded."""

    def __init__(self, seq: dict[str, Any] | None) -> None:
        self.seq = seq
        self.writer = [-1] * 8  # slot -> unit that last refreshed it
        self.slot_types = [_KEY] * 8
        self.deps: list[tuple[int, ...]] = []
        self.survives: list[bool] = []  # per unit: whether libdav1d with skip_frame="NONREF" still shows it
        self.ok = True  # every header parsed
        self.exact = True  # and the closure of a frame is all its decoding depends on

    def add(self, data: bytes) -> None:
        """The next packet's temporal unit; a header it cannot read turns the graph off."""
        if not self.ok:
            return
        try:
            self.seq = self.seq or av1_sequence(data)
            if self.seq is None:
                raise ValueError("no sequence header")
            frames = av1_frames(data, self.seq, self.slot_types)
        except (ValueError, IndexError):
            self.ok = False
            return
        unit = len(self.deps)
        needs: set[int] = set()
        for frame in frames:
            if frame.unsafe:
                self.exact = False
            for slot in frame.reads:
                if self.writer[slot] < 0:
                    self.exact = False  # a slot nothing refreshed: not a stream we can reason about
                elif self.writer[slot] != unit:
                    needs.add(self.writer[slot])
            for slot in range(8):
                if frame.writes >> slot & 1:
                    self.writer[slot] = unit
                    if not frame.existing:
                        self.slot_types[slot] = frame.frame_type
        self.deps.append(tuple(sorted(needs)))
        shown = next(f for f in frames if f.shown)
        self.survives.append(shown.existing or shown.writes != 0)

    def result(self, order: np.ndarray) -> tuple[tuple[int, ...], ...] | None:
        """Per frame (presentation order, ``order[i]`` = its unit) the frames it needs; None
        when the graph is off or units and frames do not match one to one."""
        if not (self.ok and self.exact) or len(self.deps) != len(order):
            return None
        frame_of = {int(u): i for i, u in enumerate(order)}
        try:
            return tuple(tuple(frame_of[d] for d in self.deps[int(u)]) for u in order)
        except KeyError:
            return None
