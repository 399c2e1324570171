"""The benchmark's progress bar: the library's `mediapipe.progress.Progress`, or nothing."""

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


def make_progress(total: int | None, unit: str, desc: str, enabled: bool = True) -> Any:
    """A `mediapipe.progress.Progress` on stderr, or `NoProgress` when disabled."""
    if not enabled:
        return NoProgress(total, unit, desc)
    try:
        from mediapipe.progress import Progress
    except ImportError:  # the library's bar is missing from this install: say where we are at the end
        return _Final(total, unit, desc)
    return Progress(total, unit=unit, desc=desc)


class _Final(NoProgress):
    def close(self) -> None:
        import sys

        sys.stderr.write(f"{self.desc}: {self.count}/{self.total} {self.unit}\n")
