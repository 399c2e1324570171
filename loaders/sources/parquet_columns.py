"""What each column of a Parquet file (or an Arrow table) is and the values of a row: media,
text or numbers, the Hugging Face features recorded in its schema, a row's label and metadata.
Shared by `mediapipe.loaders.sources.parquet` and `mediapipe.loaders.sources.huggingface`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mediapipe.errors import SourceError
from mediapipe.loaders.sources.labels import class_label
from mediapipe.sample import SampleMeta

META_KEYS = ("width", "height", "duration", "frames", "fps", "sample_rate", "num_samples", "channels")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as err:
        raise ImportError("reading Parquet and Hugging Face datasets needs pyarrow: "
                          "pip install mediapipe-loader[hf]") from err
    return pyarrow


# -- what each column is -------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """A column as a source reads it: ``kind`` "media" (bytes, or a struct with bytes and
    path), "text" or "number"; ``field`` is its name in the batch."""

    field: str
    name: str
    kind: str


def column_kind(arrow_type: Any) -> str | None:
    """"media", "text", "number" or None (not read) for an Arrow type."""
    pa = _pyarrow()
    t = pa.types
    if t.is_struct(arrow_type):
        names = {arrow_type.field(i).name for i in range(arrow_type.num_fields)}
        if "bytes" in names and t.is_binary(arrow_type.field("bytes").type) or (
                "bytes" in names and t.is_large_binary(arrow_type.field("bytes").type)):
            return "media"
        return None
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type):
        return "media"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "text"
    if t.is_integer(arrow_type) or t.is_floating(arrow_type) or t.is_boolean(arrow_type):
        return "number"
    return None


def hf_features(metadata: Mapping[bytes, bytes] | None) -> dict[str, Any]:
    """The Hugging Face features recorded in an Arrow schema's metadata (empty when none)."""
    raw = (metadata or {}).get(b"huggingface")
    if not raw:
        return {}
    try:
        info = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    features = info.get("info", {}).get("features", {}) if isinstance(info, dict) else {}
    return features if isinstance(features, dict) else {}


def class_names(features: Mapping[str, Any], column: str) -> list[str] | None:
    """A ``ClassLabel`` column's names."""
    spec = features.get(column)
    if isinstance(spec, dict) and spec.get("_type") == "ClassLabel" and isinstance(spec.get("names"), list):
        return [str(n) for n in spec["names"]]
    return None


def plan_columns(schema: Any, columns: Mapping[str, str] | None, where: str) -> list[Column]:
    """Each wanted column (``columns``: batch field -> column; None: every readable column
    under its own name) with its kind; an unknown or unreadable column asked for is an error."""
    names = {schema.field(i).name: schema.field(i).type for i in range(len(schema.names))}
    wanted = dict(columns) if columns is not None else {n: n for n in names if column_kind(names[n])}
    out = []
    for field, name in wanted.items():
        if name not in names:
            raise SourceError(where, f"no column {name!r}; it has {sorted(names)}")
        kind = column_kind(names[name])
        if kind is None:
            raise SourceError(where, f"column {name!r} has type {names[name]}, which is not media bytes, text "
                              "or a number")
        if field == "label" and kind != "number":
            raise SourceError(where, f"label column {name!r} has type {names[name]}, expected integers")
        out.append(Column(field, name, kind))
    if not out:
        raise SourceError(where, "no column to read")
    return out


def external_path(value: str, root: str | None, where: str) -> str:
    """The file a media value names by path only (no bytes stored): it must resolve inside
    ``media_root`` (relative paths are taken from there)."""
    if root is None:
        raise SourceError(where, f"the value has no bytes, only the path {value!r}; pass media_root= (the folder "
                          "that holds such files) to read them")
    base = os.path.realpath(root)
    path = os.path.realpath(os.path.join(base, value))
    if os.path.commonpath([base, path]) != base:
        raise SourceError(where, f"path {value!r} leaves media_root {root}")
    return path


def text_value(raw: Any, where: str, field: str) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as err:
        raise SourceError(where, f"{field!r} is not UTF-8 text (at byte {err.start})") from None


def null_number(where: str, column: str) -> SourceError:
    """The error of a null in a number column: a batch needs the number of every sample."""
    return SourceError(where, f"number column {column!r} is null here; a batch needs it in every sample: fill the "
                              "nulls, or leave the column out with columns=")


def _python_number(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def row_numbers(numbers: Mapping[str, np.ndarray], columns: Iterable[Column], index: int, where: str,
                classes: list[str] | None = None) -> tuple[int | None, dict[str, Any]]:
    """(label, other numbers) of row ``index``: the label an integer class (one of ``classes``
    when they are named), every number present (a null, or a label that is not a class, is a
    `SourceError` naming ``where``)."""
    names = {c.field: c.name for c in columns}
    label, out = None, {}
    for field, values in numbers.items():
        value = values[index]
        if field == "label":
            label = class_label(value, where, None if classes is None else len(classes))
        elif value is None:
            raise null_number(where, names.get(field, field))
        else:
            out[field] = _python_number(value)
    return label, out


def known_meta(numbers: Mapping[str, np.ndarray], index: int) -> SampleMeta:
    """The metadata numbers of row ``index`` that are not null."""
    return {k: _python_number(numbers[k][index]) for k in META_KEYS
            if k in numbers and numbers[k][index] is not None}

