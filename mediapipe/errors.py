"""The errors this library raises on purpose, with their facts kept as fields.

Each error keeps its structured values in ``args`` so that it pickles back from a
worker process unchanged and prints the same message there as here.
"""

from __future__ import annotations


class MediapipeError(Exception):
    """Base class for every error this library raises on purpose."""


class DecodeError(MediapipeError, ValueError):
    """A sample's bytes could not be turned into a tensor.

    ``category`` is the reason's class, the same for every file that fails the same way
    (``loader.stats.errors`` counts by it); without one, `reason_class` derives it."""

    def __init__(self, path: str, decoder: str, reason: str, category: str | None = None) -> None:
        super().__init__(path, decoder, reason, *(() if category is None else (category,)))
        self.path, self.decoder, self.reason, self.category = path, decoder, reason, category

    def __str__(self) -> str:
        return f"{self.decoder} could not decode {self.path!r}: {self.reason}"


class LimitError(DecodeError):
    """A sample exceeds a configured limit (pixels, frames, duration) and was not decoded."""


class SourceError(MediapipeError, OSError):
    """A source could not list or read a sample (``category``: as for `DecodeError`)."""

    def __init__(self, path: str, reason: str, category: str | None = None) -> None:
        super().__init__(path, reason, *(() if category is None else (category,)))
        self.path, self.reason, self.category = path, reason, category

    def __str__(self) -> str:
        return f"cannot read {self.path!r}: {self.reason}"


class PipelineError(MediapipeError, ValueError):
    """A pipeline spec is inconsistent (unknown field, op order, shapes that cannot batch)."""


class SampleUnavailableError(MediapipeError, RuntimeError):
    """``on_error`` found no sample to stand in for failed ones: ``paths`` failed, then the
    ``tried`` replacements failed too (at most ``MAX_REPLACEMENT_TRIES``)."""

    def __init__(self, policy: str, paths: list[str], tried: list[str], reason: str) -> None:
        super().__init__(policy, list(paths), list(tried), reason)
        self.policy, self.paths, self.tried, self.reason = policy, list(paths), list(tried), reason

    def __str__(self) -> str:
        tried = f"; the {len(self.tried)} replacements tried failed too: {self.tried}" if self.tried else ""
        return f"on_error={self.policy!r}: {self.paths} failed ({self.reason}){tried}"


class WorkerError(MediapipeError, RuntimeError):
    """A loader worker died or failed outside of decoding a sample."""
