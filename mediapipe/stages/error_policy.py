"""``on_error``: what a sample that fails to load becomes ("raise", "skip" or "replace").

"skip" puts a deterministic replacement in the slot (drawn by a key of the failed sample's
index, so every worker count and resume point picks the same one); "replace" leaves the slot
empty (zeros, ``valid`` False). Both search at most `MAX_REPLACEMENT_TRIES` samples and then
raise `SampleUnavailableError` naming the failed file and every replacement tried.

Counting: a failed sample is counted once, in the slot that holds it (``stats.errors`` by
reason class, ``stats.failed`` with its path). A replacement that fails during the search is
not counted there: it is a sample of the epoch too, counted when its own slot comes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mediapipe.errors import MediapipeError, SampleUnavailableError
from mediapipe.rng import SampleRNG, replacement_rng, template_rng
from mediapipe.stages.stats import StageStats

MAX_REPLACEMENT_TRIES = 16

Sample = dict[str, Any]
LoadSample = Callable[[int], Sample]


def failed_path(err: BaseException, index: int) -> str:
    """The file an error is about, else the sample's index."""
    path = getattr(err, "path", None)
    return str(path) if path is not None else f"sample {index}"


class ErrorPolicy:
    """Applies ``on_error`` to loading one sample of a batch."""

    def __init__(self, on_error: str, num_samples: int, seed: int) -> None:
        self.on_error, self.num_samples, self.seed = on_error, num_samples, seed

    def load(self, load: LoadSample, index: int, epoch: int, stats: StageStats, *, counted: bool = True,
             failures: list[tuple[int, BaseException]] | None = None) -> Sample | None:
        """Sample ``index``, or under "skip" its replacement, or under "replace" None. A failure
        is counted in ``stats`` when ``counted`` (a real slot, not padding) and noted in ``failures``."""
        try:
            return load(index)
        except MediapipeError as err:
            if self.on_error == "raise":
                raise
            if counted:
                stats.count_error(err)
            if failures is not None:
                failures.append((index, err))
            if self.on_error == "replace":
                return None
            return self._stand_in(load, replacement_rng(self.seed, epoch, index), [(index, err)])

    def stand_in_again(self, load: LoadSample, index: int, epoch: int, failure: BaseException, stand_in: int,
                       err: BaseException) -> Sample:
        """Sample ``index``'s stand-in when the one a worker chose for it (``stand_in``) failed later, on
        the device, with ``err``: the search goes on as if ``stand_in`` had failed where it was chosen,
        so it ends where a whole load in the worker ends. Counts nothing (``failure``, ``index``'s own
        error, was counted in its slot)."""
        def load_or_fail(j: int) -> Sample:
            if j == stand_in:
                raise err
            return load(j)

        return self._stand_in(load_or_fail, replacement_rng(self.seed, epoch, index), [(index, failure)])

    def template(self, load: LoadSample, epoch: int, failures: list[tuple[int, BaseException]]) -> Sample:
        """A good sample whose fields give the shapes and dtypes of a batch in which every sample
        failed (under "replace": all zeros, all invalid). Keyed by the batch's first sample."""
        return self._stand_in(load, template_rng(self.seed, epoch, failures[0][0]), failures)

    def _stand_in(self, load: LoadSample, rng: SampleRNG, failures: list[tuple[int, BaseException]]) -> Sample:
        seen = {index for index, _ in failures}
        tried: list[str] = []
        for _ in range(MAX_REPLACEMENT_TRIES):
            other = rng.integers(0, self.num_samples)
            if other in seen:
                continue
            seen.add(other)
            try:
                return load(other)
            except MediapipeError as err:
                tried.append(failed_path(err, other))
        first = failures[0][1]
        raise SampleUnavailableError(self.on_error, [failed_path(e, i) for i, e in failures], tried,
                                     getattr(first, "reason", None) or str(first))
