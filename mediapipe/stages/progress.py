"""`SampleProgress`: how far one sample has come through its sample stage.

A sample's stage can be split between a worker and the device (a device decode, then the ops
that read it); the record carries what the second half needs from the first: the parameters
an op drew ahead of running (an op fused into a decoder draws when the header is probed), the
decoded size it drew on, the (op, field) pairs already done, and the sample's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mediapipe.augment.base import Params


@dataclass
class SampleProgress:
    """One sample's progress: drawn-ahead parameters and canvases by op index, the (op index,
    field) pairs done, and the metadata its op draws see (the source's)."""

    meta: dict[str, Any] = field(default_factory=dict)
    drawn: dict[int, Params] = field(default_factory=dict)
    canvas: dict[int, tuple[int, int] | None] = field(default_factory=dict)
    done: set[tuple[int, str]] = field(default_factory=set)

    def drew(self, op_index: int, params: Params, canvas: tuple[int, int] | None) -> None:
        """Op ``op_index`` drew ``params`` ahead of running, on a decoded ``canvas`` (H, W)."""
        self.drawn[op_index] = params
        self.canvas[op_index] = canvas

    def merge(self, other: SampleProgress) -> None:
        """Take in what ``other`` (the same sample's record, through another field) knows."""
        if other is self:
            return
        self.drawn.update(other.drawn)
        self.canvas.update(other.canvas)
        self.done |= other.done


@dataclass
class PendingDecode:
    """A sample's field left for the device to decode: the bytes, the decode hint, the field's
    probed header (``meta``), and the sample's progress so far."""

    blob: Any
    hint: Any
    meta: dict[str, Any]
    progress: SampleProgress
