"""`tokenize(source, tokenizer)`: a text field of any source as padded token ids in the batch.

The tokenizer is any callable ``str -> list[int]`` (a SentencePiece ``encode``, a Hugging
Face tokenizer's ``encode``, a character table); it runs in the worker that reads the
sample. The batch then holds ``<out>`` (int64, zeros past each sample's length, padded to the
longest in the batch) and ``<out>_lengths``, next to the text itself as a list of ``str``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import torch

from mediapipe.errors import SourceError
from mediapipe.loaders.sources.folder import Source, WrappedSource, source_from_config
from mediapipe.sample import SampleMeta, SampleRef

Tokenizer = Callable[[str], list[int]]


def _import_path(fn: Any) -> str | None:
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not name or "<" in name:
        return None
    return f"{module}:{name}"


def _load(path: str) -> Tokenizer:
    module, _, name = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


class TokenizedSource(WrappedSource):
    """``source`` with ``field`` tokenized into ``out`` (default ``<field>_ids``), padded in the batch."""

    kind = "tokenized"

    def __init__(self, source: Source | dict[str, Any], tokenizer: Tokenizer | str, field: str = "text",
                 out: str | None = None) -> None:
        self.inner = source_from_config(source) if isinstance(source, dict) else source
        self.tokenizer = _load(tokenizer) if isinstance(tokenizer, str) else tokenizer
        if not callable(self.tokenizer):
            raise TypeError(f"tokenizer={tokenizer!r}: expected a callable str -> list[int]")
        self.field, self.out = field, out or f"{field}_ids"

    def __len__(self) -> int:
        return len(self.inner)

    def ref(self, index: int) -> SampleRef:
        ref = self.inner.ref(index)
        text = ref.fields.get(self.field)
        if text is None and self.field in ref.fields:  # a null text value (Parquet, Hugging Face)
            raise SourceError(ref.key, f"text field {self.field!r} is null in this sample: there is nothing to tokenize")
        if not isinstance(text, str):
            raise SourceError(ref.key, f"no text field {self.field!r} to tokenize (fields: {sorted(ref.fields)})")
        try:
            ids = torch.as_tensor(list(self.tokenizer(text)), dtype=torch.int64).reshape(-1)
        except (TypeError, ValueError, RuntimeError, OverflowError) as err:
            raise SourceError(ref.key, f"the tokenizer failed on {self.field!r}: {type(err).__name__}: {err}") \
                from None
        return SampleRef(ref.index, ref.key, ref.blobs, ref.label, ref.meta, {**ref.fields, self.out: ids})

    def meta(self, index: int) -> SampleMeta:
        return self.inner.meta(index)

    def prefetch(self, indices: Iterable[int]) -> None:
        self.inner.prefetch(indices)

    # the declared hooks: the content ones are the inner source's (`WrappedSource`); the samples
    # are the inner source's one for one, so its rank hooks and fingerprint hold too
    # (``__getattr__`` sees only what `Source` does not declare)
    @property
    def collate(self) -> Mapping[str, str]:  # type: ignore[override]
        """The inner source's policies, and the token ids padded (with ``<out>_lengths``)."""
        return MappingProxyType({**self.inner.collate, self.out: "pad"})

    @property
    def split_by_rank(self) -> bool:  # type: ignore[override]
        return self.inner.split_by_rank

    @property
    def rank_samples(self) -> tuple[int, ...] | None:  # type: ignore[override]
        return self.inner.rank_samples

    @property
    def fingerprint(self) -> str | None:  # type: ignore[override]
        return self.inner.fingerprint

    def __getattr__(self, name: str) -> Any:  # locate(), row_groups(), window_sampler() of the inner source
        if name.startswith("_") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def to_config(self) -> dict[str, Any]:
        path = self.tokenizer if isinstance(self.tokenizer, str) else _import_path(self.tokenizer)
        if path is None:
            raise ValueError(f"tokenizer {self.tokenizer!r} has no import path (a lambda or a bound method): "
                             "give a module-level function to save this source's config")
        return {"kind": self.kind, "source": self.inner.to_config(), "tokenizer": path, "field": self.field,
                "out": self.out}


def tokenize(source: Source, tokenizer: Tokenizer, field: str = "text", *, out: str | None = None) -> TokenizedSource:
    """``source`` whose ``field`` (a ``str``) is also given as token ids: ``batch[out]`` (int64,
    zeros past each length) and ``batch[out + "_lengths"]``; ``out`` defaults to ``<field>_ids``."""
    return TokenizedSource(source, tokenizer, field, out)
