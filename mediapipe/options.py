"""The vocabulary of string options: one ``Literal`` type per option, and its allowed values.

Signatures name these types, so a type checker catches ``on_error="skipp"``; the code that
checks a value at run time takes its tuple from the same type (`typing.get_args`)."""

from __future__ import annotations

from typing import Literal, get_args

OnError = Literal["raise", "skip", "replace"]
LastBatch = Literal["drop", "partial", "pad"]
WorkerType = Literal["process", "thread"]
LoaderBackend = Literal["torch", "dali", "ray"]

ON_ERROR: tuple[str, ...] = get_args(OnError)
LAST_BATCH: tuple[str, ...] = get_args(LastBatch)
WORKER_TYPES: tuple[str, ...] = get_args(WorkerType)
LOADER_BACKENDS: tuple[str, ...] = get_args(LoaderBackend)
