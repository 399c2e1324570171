"""A bounded reader of ``tf.train.Example`` protocol buffers, without TensorFlow or protobuf.

Every length read from the message is checked against the bytes that remain before it is
used, so a malformed record raises `ValueError` (with the reason) and never allocates more
than the record holds.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

Feature = tuple[str, list[Any]]
"""(kind, values): kind is "bytes", "float" or "int64"."""

_KINDS = {1: "bytes", 2: "float", 3: "int64"}


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= end:
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


def _fields(buf: memoryview, pos: int, end: int):
    """(field number, wire type, value or (start, stop) of a length-delimited field)."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield number, wire, value
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if length > end - pos:
                raise ValueError(f"field {number} says {length} bytes, {end - pos} remain")
            yield number, wire, (pos, pos + length)
            pos += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if size > end - pos:
                raise ValueError(f"field {number}: truncated fixed-size value")
            yield number, wire, (pos, pos + size)
            pos += size
        else:
            raise ValueError(f"field {number}: unsupported wire type {wire}")


def _signed64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _feature(buf: memoryview, start: int, end: int) -> Feature:
    for number, wire, value in _fields(buf, start, end):
        if number not in _KINDS or wire != 2:
            continue
        kind, (lo, hi) = _KINDS[number], value
        values: list[Any] = []
        for n, w, v in _fields(buf, lo, hi):
            if n != 1:
                continue
            if kind == "bytes":
                if w != 2:
                    raise ValueError("bytes_list value is not length-delimited")
                values.append(buf[v[0]:v[1]])
            elif kind == "float":
                if w == 2:  # packed
                    if (v[1] - v[0]) % 4:
                        raise ValueError("float_list packed length is not a multiple of 4")
                    values.extend(np.frombuffer(buf[v[0]:v[1]], dtype="<f4").tolist())
                elif w == 5:
                    values.append(struct.unpack("<f", buf[v[0]:v[1]])[0])
                else:
                    raise ValueError(f"float_list value of wire type {w}")
            elif w == 2:  # packed int64
                p = v[0]
                while p < v[1]:
                    x, p = _varint(buf, p, v[1])
                    values.append(_signed64(x))
            elif w == 0:
                values.append(_signed64(v))
            else:
                raise ValueError(f"int64_list value of wire type {w}")
        return kind, values
    return "bytes", []  # a Feature with no kind set: an empty list


def parse_example(data: bytes | memoryview) -> dict[str, Feature]:
    """The features of a serialized ``tf.train.Example``: name -> (kind, values); bytes values
    are memoryviews into ``data`` (no copy)."""
    buf = memoryview(data)
    out: dict[str, Feature] = {}
    for number, wire, value in _fields(buf, 0, len(buf)):
        if number != 1 or wire != 2:  # Example.features
            continue
        for n, w, entry in _fields(buf, *value):
            if n != 1 or w != 2:  # Features.feature (a map entry)
                continue
            name, feature = None, ("bytes", [])
            for k, kw, v in _fields(buf, *entry):
                if k == 1 and kw == 2:
                    try:
                        name = bytes(buf[v[0]:v[1]]).decode("utf-8")
                    except UnicodeDecodeError:
                        raise ValueError("a feature name is not UTF-8") from None
                elif k == 2 and kw == 2:
                    feature = _feature(buf, *v)
            if name is None:
                raise ValueError("a feature map entry has no name")
            out[name] = feature
    return out
