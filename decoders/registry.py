"""Decoder backends by (kind, name); third parties add theirs through entry points.

Install a package that declares, in the entry-point group ``mediapipe.decoders``,
a module or class to import; importing it runs its ``@register`` decorators.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

import torch

from mediapipe.decoders.base import Decoder, Limits
from mediapipe.decoders.options import DecoderOptions

log = logging.getLogger(__name__)

D = TypeVar("D", bound=type[Decoder])
_REGISTRY: dict[tuple[str, str], type[Decoder]] = {}  # (kind, name) -> class
_entry_points_loaded = False


def register(kind: str, name: str) -> Callable[[D], D]:
    """Class decorator: make a decoder backend known as ``name`` for media ``kind``."""

    def add(cls: D) -> D:
        if (kind, name) in _REGISTRY:
            raise ValueError(f"{kind} decoder {name!r} is already registered by {_REGISTRY[kind, name].__module__}")
        cls.kind, cls.name = kind, name
        _REGISTRY[kind, name] = cls
        return cls

    return add


def _load_entry_points_once() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group="mediapipe.decoders"):
        try:
            ep.load()
        except Exception as err:  # a broken plugin must not break the built-in backends
            log.warning("decoder plugin %r failed to load: %s", ep.name, err)


def backends(kind: str) -> dict[str, type[Decoder]]:
    """The registered backends of one kind, by name, best (lowest priority) first."""
    _load_entry_points_once()
    found = {n: c for (k, n), c in _REGISTRY.items() if k == kind}
    return dict(sorted(found.items(), key=lambda item: item[1].priority))


def options_type(kind: str, backend: str = "auto") -> type[DecoderOptions]:
    """The options dataclass of ``kind``'s decoders (the named backend's; its kind's for "auto" or
    a name not registered, whose error comes when the backend is chosen)."""
    candidates = _of_kind(kind)
    return candidates.get(backend, next(iter(candidates.values()))).options_type


def decoder_class(kind: str, backend: str = "auto", device: torch.device | None = None) -> type[Decoder]:
    """The class that `create` would instantiate; a backend named outright that cannot decode here
    (`Decoder.refusal`) is an error."""
    return _choose(kind, backend, device)[0]


def _choose(kind: str, backend: str, device: torch.device | None) -> tuple[type[Decoder], str | None]:
    """The backend class for ``backend`` on ``device``, and for "auto" why it passed over a better one."""
    candidates = _of_kind(kind)
    if backend != "auto":
        if backend not in candidates:
            raise ValueError(f"no {kind} decoder {backend!r}; known: {sorted(candidates)}")
        refused = candidates[backend].refusal(device)
        if refused is not None:
            raise RuntimeError(f"{kind} decoder {backend!r} cannot decode here: {refused}; use backend='auto' "
                               "to decode with the best backend that can")
        return candidates[backend], None
    passed_over = None
    for cls in candidates.values():
        if not (cls.available(device) and cls.preferred(device)):
            continue
        refused = cls.refusal(device)
        if refused is None:
            return cls, passed_over
        if passed_over is None:
            passed_over = f"auto passed over {cls.name}: {refused}"
    raise RuntimeError(f"no {kind} decoder can run on {device}; tried {sorted(candidates)}")


def _of_kind(kind: str) -> dict[str, type[Decoder]]:
    """`backends` of ``kind``; an unknown kind is an error naming the known ones."""
    candidates = backends(kind)
    if not candidates:
        raise ValueError(f"no decoders of kind {kind!r}; kinds known: {sorted({k for k, _ in _REGISTRY})}")
    return candidates


def create(
    kind: str, backend: str = "auto", *, device: torch.device | None = None, limits: Limits = Limits(), **options: Any
) -> Decoder:
    """A live decoder: the named backend, or for "auto" the best one available on ``device``."""
    cls, passed_over = _choose(kind, backend, device)
    if backend == "auto":
        log.info("%s decoder: chose %r for device %s%s", kind, cls.name, device,
                 f" ({passed_over})" if passed_over else "")
    elif not cls.available(device):
        raise RuntimeError(f"{kind} decoder {backend!r} cannot run on {device} here")
    decoder = cls(device=device, limits=limits, **options)
    decoder.auto_fallback = passed_over
    return decoder
