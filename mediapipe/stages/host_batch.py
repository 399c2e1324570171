"""What crosses the process boundary: a `BatchTask` to a worker, a `HostBatch` back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mediapipe.augment.base import Params
from mediapipe.options import Where
from mediapipe.stages import memory
from mediapipe.stages.stats import StageStats


@dataclass(frozen=True)
class BatchTask:
    """One batch to build: its number in this rank's epoch, the sample indices (``valid``: how
    many of them are real; the rest repeat a sample as padding), and the rank, which keys the
    draws made once per batch (MixUp's lambda) so that ranks differ."""

    number: int
    epoch: int
    indices: np.ndarray
    valid: int
    with_valid: bool = False  # give the batch a "valid" mask even when every sample is real
    rank: int = 0
    world_size: int = 1

    @property
    def draw_number(self) -> int:
        """The batch's number among every rank's batches of the step: keys its per-batch draws
        (a single rank keeps ``number``)."""
        return self.number * self.world_size + self.rank


@dataclass
class HostBatch:
    """What a worker sends: collated tensors, the batch-stage parameters, and its stats."""

    number: int
    epoch: int
    data: dict[str, Any]
    params: dict[int, Params]  # op index -> stacked params
    stats: StageStats
    draw_number: int = 0  # `BatchTask.draw_number`: keys the device's per-batch draws
    batch_ops_where: Where = "device"  # "worker": the worker ran the batch-stage ops (a CPU device)
    worker: int | None = None  # the worker process that built it
    buffers: dict[str, int] = field(default_factory=dict)  # field -> the worker's shared buffer
    # slot -> (the sample that failed in the worker, its error), for each slot holding the stand-in a
    # worker chose for it (on_error="skip"): where that stand-in fails on the device, its search goes on
    stand_ins: dict[int, tuple[int, BaseException]] = field(default_factory=dict)


def lend(host: HostBatch) -> HostBatch:
    """Mark the batch's shared buffers as lent to the consumer (see `mediapipe.stages.memory`)."""
    memory.into_shared(host.data)
    host.worker, host.buffers = memory.worker_id(), memory.lend(host.data)
    host.stats.reused_buffers += memory.take_reused()
    return host
