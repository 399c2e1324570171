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


def class_label(value: Any, where: str, num_classes: int | None = None) -> int:
    """``value`` as an integer class; ``where`` names the file and row for the error. With
    ``num_classes`` (the source names its classes) the class is one of them, from 0: a Hugging
    Face ``ClassLabel``'s -1 (no label, as in the test split of many datasets) is refused, not
    delivered as a class (``classes[-1]`` would name the last one)."""
    label = _integer_label(value, where)
    if num_classes is not None and not 0 <= label < num_classes:
        missing = " (-1 is ClassLabel's missing label: read an unlabelled split without its label column, "\
                  "columns=)" if label == -1 else ""
        raise SourceError(where, f"label {label} is not one of the {num_classes} classes (0 to {num_classes - 1})"
                                 f"{missing}")
    return label


def _integer_label(value: Any, where: str) -> int:
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
