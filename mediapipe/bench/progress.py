"""The benchmark's progress: the library's tqdm-based `mediapipe.cli.progress.Progress`, or nothing.

A bar made while another is open (a dataset generated, or a sample dataset converted, while
the run's bar is up) is drawn on the line below it and cleared when it closes.
"""

from __future__ import annotations

from typing import Any


class NoProgress:
    """Accepts the progress calls and shows nothing (``--no-progress``)."""

    def __init__(self, total: int | None = None, unit: str = "", desc: str = "") -> None:
        self.total, self.unit, self.desc, self.count = total, unit, desc, 0

    def update(self, n: int = 1, bytes: int = 0) -> None:  # noqa: A002  (the Progress signature)
        self.count += n

    def close(self) -> None:
        pass


def make_progress(total: int | None, unit: str, desc: str, enabled: bool = True, **options: Any) -> Any:
    """A `mediapipe.cli.progress.Progress` on stderr (``options``: its keyword arguments, such as
    ``position``), or `NoProgress` when disabled."""
    if not enabled:
        return NoProgress(total, unit, desc)
    from mediapipe.cli.progress import Progress

    return Progress(total, unit=unit, desc=desc, **options)
