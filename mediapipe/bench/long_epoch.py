"""One long epoch over a small benchmark dataset: the dataset seen several times over as one,
so a run does not restart loaders (workers, DALI pipelines) far more often than an epoch of a
real dataset would. Shared by the backends of every scenario."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from mediapipe.loaders.sources.folder import Source, WrappedSource


def passes(options: dict[str, Any], batch_size: int, samples: int) -> int:
    """How many passes over the dataset make one epoch long enough for the whole run; 1 with
    ``repeat=False`` (``--real-epochs``)."""
    if not options.get("repeat", True) or not options.get("max_batches") or samples <= 0:
        return 1
    return max(1, -(-options["max_batches"] * batch_size // samples) + 1)


class RepeatedSource(WrappedSource):
    """A source seen ``times`` over, as one source: sample i is sample i mod len(inner)
    (with its own index, so its random draws differ from pass to pass). With ``same_samples``
    an epoch cache sees each pass as the same samples (``copies``, as for a repeated-augmentation
    view): the passes after the first read what the first stored. Without it every pass is new
    to the cache, as a first epoch is."""

    kind = ""  # a benchmark view: not registered for configs
    copies: int | None = None

    def __init__(self, inner: Source, times: int, same_samples: bool = False) -> None:
        self.inner, self.times = inner, times
        if same_samples:
            self.copies = times

    @property
    def fingerprint(self) -> str | None:  # type: ignore[override]
        """What an epoch cache keys a first-epoch row's entries by: the pass count and what it keys
        the inner source by (its type, fingerprint and config), one JSON text; None when the inner
        source has neither a fingerprint nor a config."""
        try:
            config = self.inner.to_config()
        except NotImplementedError:
            config = None
        if config is None and self.inner.fingerprint is None:
            return None
        return json.dumps([self.times, type(self.inner).__name__, self.inner.fingerprint, config], sort_keys=True,
                          default=repr)

    def __len__(self) -> int:
        return len(self.inner) * self.times

    def ref(self, index: int) -> Any:
        return replace(self.inner.ref(index % len(self.inner)), index=index)

    def meta(self, index: int) -> dict[str, Any]:
        return self.inner.meta(index % len(self.inner))

    def prefetch(self, indices: Any) -> None:
        n = len(self.inner)
        self.inner.prefetch([i % n for i in indices])



class Repeat:
    """A map-style dataset seen ``times`` over (the baselines' long epoch in a DataLoader)."""

    def __init__(self, dataset: Any, times: int) -> None:
        self.dataset, self.times = dataset, times

    def __len__(self) -> int:
        return len(self.dataset) * self.times

    def __getitem__(self, i: int) -> Any:
        return self.dataset[i % len(self.dataset)]
