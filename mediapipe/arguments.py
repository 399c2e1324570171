"""Arguments checked against their annotations: ``int`` is not ``float``, a string is not a
tuple, lists become tuples. The ops' dataclass fields and the decoders' options share it."""

from __future__ import annotations

import types
import typing
from typing import Any, Union

import numpy as np


def conform(value: Any, tp: Any) -> tuple[bool, Any]:
    """(value matches tp, the value with lists turned into tuples where tp is a tuple)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return True, value
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            ok, fixed = conform(value, arg)
            if ok:
                return True, fixed
        return False, value
    if tp is type(None):
        return value is None, value
    if tp is bool:
        return isinstance(value, (bool, np.bool_)), bool(value) if isinstance(value, np.bool_) else value
    if tp is int:
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
        return ok, int(value) if ok else value
    if tp is float:
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
        return ok, value if isinstance(value, (int, float)) or not ok else float(value)
    if tp is str:
        return isinstance(value, str), value
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            return False, value
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            parts = [conform(v, args[0]) for v in value]
        elif len(args) != len(value):
            return False, value
        else:
            parts = [conform(v, a) for v, a in zip(value, args)]
        if not all(ok for ok, _ in parts):
            return False, value
        return True, tuple(fixed for _, fixed in parts)
    return True, value


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "None"
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a tuple of {type_name(args[0])}"
        return f"a tuple ({', '.join(type_name(a) for a in args)})"
    return {int: "an int", float: "a number", str: "a string", bool: "a bool"}.get(tp, getattr(tp, "__name__", str(tp)))
