"""The errors this library raises on purpose, with their facts kept as fields.

Each error keeps its structured values in ``args`` so that it pickles back from a
worker process unchanged and prints the same message there as here.
"""

from __future__ import annotations


class MediapipeError(Exception):
    """Base class for every error this library raises on purpose."""


class DecodeError(MediapipeError, ValueError):
    """A sample's bytes could not be turned into a tensor."""

    def __init__(self, path: str, decoder: str, reason: str) -> None:
        super().__init__(path, decoder, reason)
        self.path, self.decoder, self.reason = path, decoder, reason

    def __str__(self) -> str:
        return f"{self.decoder} could not decode {self.path!r}: {self.reason}"


class LimitError(DecodeError):
    """A sample exceeds a configured limit (pixels, frames, duration) and was not decoded."""


class SourceError(MediapipeError, OSError):
    """A source could not list or read a sample."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, reason

    def __str__(self) -> str:
        return f"cannot read {self.path!r}: {self.reason}"


class PipelineError(MediapipeError, ValueError):
    """A pipeline spec is inconsistent (unknown field, op order, shapes that cannot batch)."""


class WorkerError(MediapipeError, RuntimeError):
    """A loader worker died or failed outside of decoding a sample."""
