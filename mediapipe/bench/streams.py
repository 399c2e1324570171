"""A backend under test, seen from the harness: an endless stream of materialised batches.

Each backend opens a `Stream` that yields ``(samples, units)`` per batch (``units``: audio
seconds or frames where the sample count alone does not say it, else None), after touching
the batch's tensors so that lazy work is finished, and runs across epoch boundaries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

BatchInfo = tuple[int, float | None]


def touch(value: Any) -> int:
    """Force a batch to exist: read a few elements of every tensor (synchronise on a GPU).
    Returns the leading dimension of the first tensor found, the batch's sample count."""
    samples = -1
    cuda = False
    tensors = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
    for v in tensors:
        if isinstance(v, (dict, list, tuple)):
            n = touch(v)
            samples = n if samples < 0 else samples
        elif isinstance(v, torch.Tensor):
            if samples < 0 and v.ndim > 0:
                samples = int(v.shape[0])
            if v.is_cuda:
                cuda = True
            elif v.numel():
                v[(0,) * (v.ndim - 1)][:8].sum().item() if v.ndim > 1 else v[:8].sum().item()  # no copy
    if cuda:
        torch.cuda.synchronize()
    return samples


def touch_image(batch: dict[str, Any]) -> int:
    """`touch` a batch's images; their count."""
    touch(batch["image"])
    return int(batch["image"].shape[0])


def loader_stages(loader: Any) -> dict[str, float]:
    """``loader.stats`` seconds of this library's loader: "batch_ops" are worker seconds (the batch
    stage run in the workers, for a CPU device), reported as worker_batch_ops; "device_ops" are
    the consumer's."""
    seconds = dict(loader.stats.seconds)
    if "batch_ops" in seconds:
        seconds["worker_batch_ops"] = seconds.pop("batch_ops")
    return seconds


class Stream:
    """Base of the backend streams: ``buffered`` batches may be ready before the consumer
    asks (the harness drains them after an idle spell); ``stages()`` gives cumulative stage
    seconds where the backend measures them, else None."""

    buffered: int = 0

    def __iter__(self) -> Iterator[BatchInfo]:
        raise NotImplementedError

    def stages(self) -> dict[str, float] | None:
        return None

    def close(self) -> None:
        pass


class EpochStream(Stream):
    """Any re-iterable of batches (one pass = one epoch), repeated forever; each batch touched."""

    def __init__(self, make_epoch: Callable[[], Iterable[Any]], buffered: int,
                 stats: Callable[[], dict[str, float]] | None = None, on_close: Callable[[], None] | None = None,
                 samples: Callable[[Any], int] | None = None) -> None:
        self._make_epoch, self.buffered, self._stats, self._on_close = make_epoch, buffered, stats, on_close
        self._samples = samples or touch

    def __iter__(self) -> Iterator[BatchInfo]:
        while True:
            empty = True
            for batch in self._make_epoch():
                empty = False
                yield self._samples(batch), None
            if empty:
                raise RuntimeError("an epoch gave no batches: the dataset is smaller than one batch")

    def stages(self) -> dict[str, float] | None:
        return dict(self._stats()) if self._stats is not None else None

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()


class RunnerStream(Stream):
    """A runner function of ``mediapipe.bench.video`` / ``audio``: a generator of a fixed
    number of batches that yields an int (samples) or a (samples, units) pair per batch. A runner
    marked ``reports_stages`` gets ``stages=``, a callback it hands its loader's stage seconds."""

    def __init__(self, runner: Callable[..., Iterator[Any]], buffered: int, **kwargs: Any) -> None:
        self._runner, self._kwargs, self.buffered = runner, kwargs, buffered
        self._gen: Iterator[Any] | None = None
        self._stats: Callable[[], dict[str, float]] | None = None
        if getattr(runner, "reports_stages", False):
            self._kwargs["stages"] = self._watch

    def _watch(self, stats: Callable[[], dict[str, float]]) -> None:
        self._stats = stats

    def stages(self) -> dict[str, float] | None:
        return dict(self._stats()) if self._stats is not None else None

    def __iter__(self) -> Iterator[BatchInfo]:
        self._gen = iter(self._runner(**self._kwargs))
        for item in self._gen:
            if isinstance(item, tuple):
                yield int(item[0]), float(item[1])
            else:
                yield int(item), None
        raise RuntimeError(f"the runner stopped after its batches={self._kwargs.get('batches')} batches")

    def close(self) -> None:
        close = getattr(self._gen, "close", None)
        if close is not None:
            close()
