"""The types that the fields of a manifest, of its shard entries and of the sample records must have,
split by how they are checked so that checking a million records stays cheap."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mediapipe.dataset.layout import MAX_SIZE
from mediapipe.dataset.safe_io import _show
from mediapipe.errors import SourceError


def _count(v: Any) -> bool:
    return type(v) is int and 0 <= v <= MAX_SIZE


def is_finite_number(v: Any) -> bool:
    """An int in off_t's range or a finite float: what a field may hold (bools are not numbers)."""
    return (type(v) is int and -MAX_SIZE <= v <= MAX_SIZE) or (type(v) is float and math.isfinite(v))


def _nonnegative(v: Any) -> bool:
    return is_finite_number(v) and v >= 0


def _texts(v: Any) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


def _counts(v: Any) -> bool:
    return type(v) is list and all(type(x) is int and 0 <= x <= MAX_SIZE for x in v)


def _or_null(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_SAMPLE_KEY = re.compile(r"[^/\\.\0]{1,255}")


def _label(v: Any) -> bool:
    return v is None or (type(v) is int and -MAX_SIZE <= v <= MAX_SIZE)


@dataclass(frozen=True)
class _Field:
    check: Callable[[Any], bool] | type  # a type: exactly that type (a bool is no int); else a predicate
    expected: str
    required: bool = False


class _Schema:
    """Fields by name, split by how they are checked (exact types, counts in 0..MAX_SIZE,
    predicates), so that checking each of a million records stays cheap."""

    def __init__(self, fields: dict[str, _Field]) -> None:
        self.fields = fields
        self.exact = {n: f.check for n, f in fields.items() if isinstance(f.check, type)}
        self.counts = frozenset(n for n, f in fields.items() if f.check is _count)
        self.predicates = {n: f.check for n, f in fields.items() if n not in self.exact and n not in self.counts}
        self.required = frozenset(n for n, f in fields.items() if f.required)

    def problem(self, obj: Any, what: str, field: Callable[[str], str]) -> str | None:
        """What is wrong with ``obj`` (the first thing found), or None."""
        if type(obj) is not dict:
            return f"{what} must be a JSON object, got {_show.repr(obj)}"
        exact, counts, predicates = self.exact, self.counts, self.predicates
        for name, value in obj.items():
            want = exact.get(name)
            if want is not None:
                if type(value) is want:
                    continue
            elif name in counts:
                if type(value) is int and 0 <= value <= MAX_SIZE:
                    continue
            elif name not in predicates or predicates[name](value):
                continue
            return f"{field(name)}: expected {self.fields[name].expected}, got {_show.repr(value)}"
        if not self.required <= obj.keys():
            return f"{field(next(n for n in self.fields if n in self.required and n not in obj))}: missing"
        return None


_COUNT = _Field(_count, "an int >= 0")
_TEXT = _Field(str, "a string")
_FILE = _Field(_or_null(lambda v: type(v) is str and v != "" and "\0" not in v), "a file name or null", True)
MANIFEST_SCHEMA = _Schema({
    "format": _Field(str, "a string", True), "version": _Field(_count, "an int >= 0", True),
    "complete": _Field(bool, "true or false", True),
    "shards": _Field(list, "a list", True),
    "num_samples": _COUNT, "num_failures": _COUNT, "bytes": _COUNT,  # num_samples: required once complete
    "classes": _Field(_or_null(_texts), "a list of strings or null"), "fields": _Field(_texts, "a list of strings"),
    "plan": _Field(dict, "an object"), "source": _TEXT,
    "field_types": _Field(dict, "an object"),  # the targets in each sample's .json member (boxes, labels...)
})
SHARD_SCHEMA = _Schema({
    "shard": _Field(_count, "an int >= 0", True), "name": _FILE, "idx": _FILE,
    "digests": _Field(_FILE.check, _FILE.expected),  # member digests; datasets converted before them have none
    "samples": _Field(_count, "an int >= 0", True), "bytes": _Field(_count, "an int >= 0", True),
    "sha256": _Field(_or_null(lambda v: type(v) is str and _HEX_DIGEST.fullmatch(v) is not None),
                     "a sha256 hex digest or null", True),
})
RECORD_SCHEMA = _Schema({
    "key": _Field(lambda v: type(v) is str and _SAMPLE_KEY.fullmatch(v) is not None,
                  "a sample key (1-255 characters, no '/', '.' or NUL)", True),
    "shard": _Field(_count, "an int >= 0", True),
    "label": _Field(_label, "an int or null"),
    **dict.fromkeys(("width", "height", "frames", "sample_rate", "num_samples", "channels", "bytes"), _COUNT),
    **dict.fromkeys(("duration", "fps"), _Field(_nonnegative, "a finite number >= 0")),
    "keyframes": _Field(_counts, "a list of ints >= 0"),
    **dict.fromkeys(("codec", "audio_codec", "kind", "ext", "source"), _TEXT),
    "copied": _Field(bool, "true or false"),
    "fields": _Field(lambda v: type(v) is dict and all(is_finite_number(x) or type(x) is str for x in v.values()),
                     "numbers or text by name"),
})


def check_fields(obj: Any, schema: _Schema, *, where: str, what: str, field: Callable[[str], str],
                 line: int | None = None) -> None:
    """Refuse ``obj`` unless it is a JSON object whose fields have the schema's types and
    which holds the required ones; ``field`` names a field in messages, ``where`` (and
    ``line``) the file. Unknown fields are left alone (a later writer may add some)."""
    problem = schema.problem(obj, what, field)
    if problem is not None:
        raise SourceError(where if line is None else f"{where}:{line}", problem)
