"""The vocabulary of string options: one ``Literal`` type per option, and its allowed values.

Signatures name these types, so a type checker catches ``on_error="skipp"``; the code that
checks a value at run time takes its tuple from the same type (`typing.get_args`)."""

from __future__ import annotations

from typing import Literal, get_args

OnError = Literal["raise", "skip", "replace"]
LastBatch = Literal["drop", "partial", "pad"]
WorkerType = Literal["process", "thread"]
LoaderBackend = Literal["torch", "dali", "ray"]
# where a decoder or an op runs: per sample in the loader workers, or in the training process on
# the pipeline's device (a device decode, the ops after it, the batch stage)
Where = Literal["worker", "device"]

ON_ERROR: tuple[str, ...] = get_args(OnError)
LAST_BATCH: tuple[str, ...] = get_args(LastBatch)
WORKER_TYPES: tuple[str, ...] = get_args(WorkerType)
LOADER_BACKENDS: tuple[str, ...] = get_args(LoaderBackend)
WHERE: tuple[str, ...] = get_args(Where)
