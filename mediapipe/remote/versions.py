"""Which object of a store an answer came from (`ObjectVersion`), and the refusal of an answer
from another one than the dataset was opened with, or of a range other than the one asked for."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any

from mediapipe.remote.retry import _Changed, _Permanent, _Unsatisfiable


@dataclass(frozen=True)
class ObjectVersion:
    """Which object of a store an answer came from: its total size (None where the answer
    does not state it) and the validators the store gave (ETag, Last-Modified, generation)."""

    size: int | None
    validators: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        sizes = f"{self.size} bytes" if self.size is not None else "no stated size"
        return ", ".join([sizes, *(f"{k} {v}" for k, v in self.validators)])

    def differs(self, seen: ObjectVersion) -> bool:
        """Whether ``seen`` is another object than this one, by what both state."""
        if self.size is not None and seen.size is not None and self.size != seen.size:
            return True
        mine = dict(self.validators)
        return any(k in mine and mine[k] != v for k, v in seen.validators)

    def tag(self) -> str:
        """The validators as one string (empty when the store gave none)."""
        return "\0".join(f"{k}={v}" for k, v in self.validators)


REWRITTEN_HINT = ("re-convert the dataset (mediapipe convert), or re-upload the shard the manifest describes, "
                  "then open the dataset again")


def _check_version(expect: ObjectVersion | None, seen: ObjectVersion) -> None:
    """Refuse an answer from another object than ``expect`` (the one the dataset was opened with)."""
    if expect is not None and expect.differs(seen):
        raise _Changed(f"the file changed on the server since the dataset was opened: expected "
                       f"{expect.describe()}, the server now has {seen.describe()}; a dataset must not be "
                       f"rewritten while it is read: {REWRITTEN_HINT}")


IGNORED_RANGE = ("the server ignored the Range request ({}, not 206 Partial Content): ranged reads need a "
                 "server that honours Range, or pass cache_dir= to download whole shards")


_CONTENT_RANGE = re.compile(r"bytes (\d{1,19})-(\d{1,19})/(\d{1,19}|\*)$")


def _ranged_answer(content_range: str | None, start: int, end: int, validators: tuple[tuple[str, str], ...],
                   expect: ObjectVersion | None, *, to_end: bool = False) -> tuple[ObjectVersion, int]:
    """The object a ranged answer came from (its Content-Range's total size, its validators),
    refused when it is not ``expect``; and the bytes it carries: refused unless they are the
    range ``start``-``end`` asked for (or, ``to_end``, that range cut at the file's end)."""
    m = _CONTENT_RANGE.match(content_range or "")
    wrong = _Permanent(f"the server answered the range {start}-{end} with Content-Range {(content_range or '')[:60]!r}")
    if m is None:
        raise wrong
    version = ObjectVersion(None if m.group(3) == "*" else int(m.group(3)), validators)
    _check_version(expect, version)
    first, last = int(m.group(1)), int(m.group(2))
    cut = to_end and version.size is not None and last == version.size - 1 < end
    if first != start or (last != end and not cut):
        raise wrong
    return version, last + 1 - start


@contextlib.asynccontextmanager
async def _past_the_end(expect: ObjectVersion | None, start: int, end: int) -> Any:
    """A 416 to a range inside the file ``expect`` is: that file is shorter now (rewritten)."""
    try:
        yield
    except _Unsatisfiable as err:
        if expect is None:
            raise
        raise _Changed(f"the file changed on the server since the dataset was opened: expected "
                       f"{expect.describe()}, the server has fewer than {end + 1} bytes ({err} to the range "
                       f"{start}-{end}); a dataset must not be rewritten while it is read: {REWRITTEN_HINT}") from None
