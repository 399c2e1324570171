"""The one rule every store's requests keep: `Retry` (how often, how patiently), the failures
worth another try or not, and the deadline and pace that bound each request in time."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass
from typing import Any

CHUNK = 1 << 20


class _Permanent(Exception):
    """A failure retrying cannot fix: reported at once."""


class _Changed(_Permanent):
    """An answer from another version of the file than the one expected."""


class _Unsatisfiable(_Permanent):
    """HTTP 416: the range asked for lies past the file's end."""


class _Transient(Exception):
    """A failure worth another try (a dropped connection, a 5xx)."""


@dataclass(frozen=True)
class Retry:
    """How often and how patiently a failed request is tried again (exponential backoff with
    jitter), and how long one request may take: the same rule for every store."""

    attempts: int = 5
    backoff: float = 0.2  # seconds before the second try; doubled each time
    max_backoff: float = 10.0
    timeout: float = 60.0  # seconds a connection may stay silent
    min_rate: float = 32 << 10  # bytes a second a transfer must average once `timeout` seconds have passed

    def delays(self) -> list[float]:
        return [min(self.max_backoff, self.backoff * 2**i) * (0.5 + random.random() / 2)
                for i in range(self.attempts - 1)]

    def deadline(self, nbytes: int) -> float:
        """Seconds one request moving ``nbytes`` may take in all: connecting and the first
        byte ``timeout`` each, then the rest at ``min_rate``."""
        return 2 * self.timeout + max(0, nbytes) / self.min_rate


async def _bounded(coro: Any, seconds: float) -> Any:
    """``coro``'s result, or a transient failure once it has run ``seconds`` (it is cancelled)."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise _Transient(f"no complete answer within {seconds:.1f} s (2 x timeout, then min_rate for its bytes)")
    return task.result()


class _Pace:
    """A transfer that must keep moving: after ``timeout`` seconds it must average at least
    ``min_rate`` bytes a second (a server that drips bytes never trips a silence timeout)."""

    def __init__(self, retry: Retry) -> None:
        self.start, self.grace, self.min_rate = time.monotonic(), retry.timeout, retry.min_rate

    def check(self, got: int) -> None:
        elapsed = time.monotonic() - self.start
        if elapsed > self.grace + got / self.min_rate:
            raise _Transient(f"too slow: {got} bytes in {elapsed:.1f} s (less than {self.min_rate:.0f} bytes/s "
                             f"after {self.grace:g} s)")
