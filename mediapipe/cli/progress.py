"""Progress through tqdm: a bar on a terminal, a plain line every few seconds in a log.

    bar = Progress(total=len(files), unit="files", desc="convert")
    for f in files:
        ...
        bar.update(1, bytes=size)
    bar.close()

On a TTY this is a tqdm bar (count, items/s, MB/s when bytes are counted, elapsed and
ETA); bars open at the same time stack on their own lines (``position``). Elsewhere (CI
logs, pipes, a file) it writes one complete line every ``log_every`` seconds and a last one
at ``close()``: no carriage returns, no cursor moves.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm import tqdm

_TTY_FORMAT = "[{bar:24}] {label}{n_fmt}/{total_fmt} {unit} {percentage:3.0f}%, {rate_text}{mb_text} [{elapsed}<{remaining}]"
_TTY_FORMAT_NO_TOTAL = "{label}{n_fmt} {unit}, {rate_text}{mb_text} [{elapsed}]"
_LOG_FORMAT = "{label}{n_fmt}/{total_fmt} {unit}, {rate_text}{mb_text}, elapsed {elapsed}, ETA {remaining}"
_LOG_FORMAT_NO_TOTAL = "{label}{n_fmt} {unit}, {rate_text}{mb_text}, elapsed {elapsed}"


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an open terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Progress(tqdm):
    """Counts items (and optionally bytes) done out of ``total`` and reports the rates.

    Args:
        total: items expected (None: unknown, no bar or ETA).
        unit: what an item is, e.g. "files".
        desc: a label in front of the count (may be changed later: ``bar.desc = ...``).
        stream: where to write (default: ``sys.stderr`` at construction).
        tty: draw a redrawn bar (True) or write log lines (False); default: ``stream.isatty()``.
        log_every: seconds between two log lines when not on a terminal.
        position: the terminal line of the bar (0 the first); default: below the bars open now.
        leave: keep the finished bar on screen; default: only the bar at position 0.
    """

    monitor_interval = 0  # no tqdm monitor thread: loader and convert workers are forked while a bar is open

    def __init__(self, total: int | None, unit: str = "items", desc: str = "", *, stream: TextIO | None = None,
                 tty: bool | None = None, log_every: float = 10.0, position: int | None = None,
                 leave: bool | None = None) -> None:
        stream = stream if stream is not None else sys.stderr
        self.tty = is_terminal(stream) if tty is None else bool(tty)
        self.bytes = 0
        self._drawing = False  # log mode: no line for the initial display tqdm makes in __init__
        if self.tty:
            fmt = _TTY_FORMAT if total is not None else _TTY_FORMAT_NO_TOTAL
            options: dict[str, Any] = {"mininterval": 0.1, "position": position, "leave": leave}
        else:
            fmt = _LOG_FORMAT if total is not None else _LOG_FORMAT_NO_TOTAL
            # smoothing=0: rates averaged over the whole run; miniters=1: the interval alone decides
            options = {"mininterval": log_every, "miniters": 1, "smoothing": 0, "leave": False}
        super().__init__(total=total, unit=unit, desc=desc, file=stream, bar_format=fmt, dynamic_ncols=False,
                         **options)
        if not self.tty or not (self.ncols or 0) > 0:
            self.ncols = None  # a log line is never cut; nor is a bar on a terminal of unknown width
        if not (self.nrows or 0) > 0:
            self.nrows = None
        self._drawing = True

    # -- the line ---------------------------------------------------------------------
    @property
    def format_dict(self) -> dict[str, Any]:
        d = super().format_dict
        elapsed = max(d["elapsed"], 1e-9)
        rate = d["rate"] if d["rate"] else (self.n - self.initial) / elapsed
        d["label"] = f"{self.desc}: " if self.desc else ""
        d["rate_text"] = f"{rate:.1f} {self.unit}/s"
        d["mb_text"] = f", {self.bytes / 1e6 / elapsed:.1f} MB/s" if self.bytes else ""
        return d

    @property
    def count(self) -> int:
        """Items done so far."""
        return self.n

    @property
    def _last_draw(self) -> float:
        """When the bar or the last log line was written (tqdm's clock)."""
        return self.last_print_t

    @_last_draw.setter
    def _last_draw(self, value: float) -> None:
        self.last_print_t = value

    # -- updates ----------------------------------------------------------------------
    def update(self, n: int = 1, bytes: int = 0) -> bool | None:  # noqa: A002  (the unit's name)
        """Add ``n`` items and ``bytes`` bytes; redraws (or logs) when the interval has passed."""
        self.bytes += bytes
        return super().update(n)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if self.tty:
            return super().display(msg, pos)
        if not self._drawing or msg == "":  # the initial draw, or tqdm clearing a bar: nothing to log
            return False
        self.fp.write((str(self) if msg is None else msg) + "\n")
        self.fp.flush()
        return True

    def close(self) -> None:
        """Write the final state once: the bar left on screen, or a last log line."""
        if self.disable:
            return
        if not self.tty:
            self._drawing = True
            self.display()
        super().close()
