"""Class labels read from a dataset: an integer class or a `SourceError` naming the file and row.

A float label is never truncated into a class (2.9 is not class 2), and a value outside
int64 (a uint64 above 2**63, NaN, infinity) is refused where it is read, so that
``on_error="skip"`` sees a `SourceError` rather than a bare ``ValueError``."""

from __future__ import annotations

import math
import numbers
from typing import Any

from mediapipe.errors import SourceError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def class_label(value: Any, where: str) -> int:
    """``value`` as an integer class; ``where`` names the file and row for the error."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        if not INT64_MIN <= int(value) <= INT64_MAX:
            raise SourceError(where, f"label {value} is outside int64; class labels are integers that fit int64")
        return int(value)
    if isinstance(value, numbers.Real):
        v = float(value)
        if not math.isfinite(v) or v != math.floor(v) or not INT64_MIN <= v <= INT64_MAX:
            raise SourceError(where, f"label {value!r} is not an integer class (a float label is not truncated; "
                                     "read it as a float target under another field name)")
        return int(v)
    if value is None:
        raise SourceError(where, "label is null; every sample of a labelled source needs a class")
    raise SourceError(where, f"label {value!r} ({type(value).__name__}) is not an integer class")
