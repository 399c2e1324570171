"""A dependency-free progress report: a redrawn bar on a terminal, plain log lines elsewhere.

    bar = Progress(total=len(files), unit="files", desc="convert")
    for f in files:
        ...
        bar.update(1, bytes=size)
    bar.close()

On a TTY the bar shows the count, items/s, MB/s and the ETA, redrawn at most ten times
a second; otherwise (CI logs, pipes) one line is written every ``log_every`` seconds.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def format_duration(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):  # NaN or unknown
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class Progress:
    """Counts items (and optionally bytes) done out of ``total`` and reports the rate."""

    def __init__(self, total: int | None, unit: str = "items", desc: str = "", *, stream: TextIO | None = None,
                 tty: bool | None = None, log_every: float = 10.0, width: int = 30) -> None:
        self.total, self.unit, self.desc = total, unit, desc
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.log_every, self.width = log_every, width
        self.count, self.bytes = 0, 0
        self.start = self._last_draw = time.monotonic()
        self._closed = False

    @property
    def elapsed(self) -> float:
        return max(time.monotonic() - self.start, 1e-9)

    def rates(self) -> dict[str, float]:
        """Items per second, megabytes (10^6 bytes) per second and the estimated seconds left."""
        per_s = self.count / self.elapsed
        left = (self.total - self.count) / per_s if self.total is not None and per_s > 0 else float("nan")
        return {"per_s": per_s, "mb_per_s": self.bytes / 1e6 / self.elapsed, "eta_s": left}

    def line(self) -> str:
        r = self.rates()
        done = f"{self.count}/{self.total}" if self.total is not None else f"{self.count}"
        text = f"{self.desc + ': ' if self.desc else ''}{done} {self.unit}, {r['per_s']:.1f} {self.unit}/s"
        if self.bytes:
            text += f", {r['mb_per_s']:.1f} MB/s"
        return text + f", elapsed {format_duration(self.elapsed)}, ETA {format_duration(r['eta_s'])}"

    def update(self, n: int = 1, bytes: int = 0) -> None:  # noqa: A002  (the unit's name)
        self.count += n
        self.bytes += bytes
        now = time.monotonic()
        if self.tty and now - self._last_draw >= 0.1:
            self._draw()
            self._last_draw = now
        elif not self.tty and now - self._last_draw >= self.log_every:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self._last_draw = now

    def _draw(self) -> None:
        bar = ""
        if self.total:
            filled = int(self.width * min(self.count / self.total, 1.0))
            bar = "[" + "#" * filled + "." * (self.width - filled) + "] "
        self.stream.write("\r" + bar + self.line() + "\033[K")
        self.stream.flush()

    def close(self) -> None:
        """Write the final state once (a last redraw and a newline on a terminal)."""
        if self._closed:
            return
        self._closed = True
        if self.tty:
            self._draw()
            self.stream.write("\n")
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
