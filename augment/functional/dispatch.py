"""Kernels by field kind: one table {kind: kernel} per functional, as torchvision v2's
``_register_kernel_internal`` / ``_get_kernel`` (which key the table by tensor type).

A functional names one operation (``hflip``); each kind it can transform registers its
kernel, named ``<functional>_<kind>`` (``hflip_image``, ``hflip_boxes``...)::

    hflip = Functional("hflip")

    @register_kernel(hflip, "boxes")
    def hflip_boxes(boxes, flip, *, canvas_size, format): ...

Calling the functional with ``kind=`` runs that kind's kernel. A kernel also gets the keywords
its kind's `KindSpec.kernel_args` names: boxes kernels the boxes' ``format`` and ``canvas_size``
(H, W), keypoints kernels ``canvas_size``; every kernel gets the op's options as keywords and
ignores those that do not apply to its kind (a mask's resize ignores ``interpolation``: a mask
is resampled with nearest).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mediapipe.fields import KIND_SPECS, KINDS

K = TypeVar("K", bound=Callable[..., Any])


class Functional:
    """One operation's kernels, by kind. Callable: ``hflip(x, flip, kind="mask")``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.kernels: dict[str, Callable[..., Any]] = {}

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(self.kernels)

    def kernel(self, kind: str) -> Callable[..., Any]:
        """The kernel for ``kind``; a TypeError naming the kinds it has when there is none."""
        try:
            return self.kernels[kind]
        except KeyError:
            raise TypeError(f"{self.name} has no kernel for {kind!r} fields; it transforms "
                            f"{sorted(self.kernels)}") from None

    def __call__(self, x: Any, *args: Any, kind: str, canvas_size: tuple[int, int] | None = None,
                 format: str | None = None, **options: Any) -> Any:
        kernel = self.kernel(kind)
        given = {"canvas_size": canvas_size, "format": format}
        return kernel(x, *args, **{name: given[name] for name in KIND_SPECS[kind].kernel_args}, **options)

    def __repr__(self) -> str:
        return f"Functional({self.name!r}, kinds={sorted(self.kernels)})"


def register_kernel(functional: Functional, kind: str) -> Callable[[K], K]:
    """Decorate ``<functional>_<kind>`` to be ``functional``'s kernel for ``kind``; a second
    kernel for the same kind is refused (two would silently shadow each other)."""
    if kind not in KINDS:
        raise ValueError(f"register_kernel({functional.name}, {kind!r}): unknown kind; kinds are {KINDS}")

    def decorator(kernel: K) -> K:
        if kind in functional.kernels:
            raise ValueError(f"{functional.name} already has a kernel for {kind!r}: "
                             f"{functional.kernels[kind].__name__}")
        functional.kernels[kind] = kernel
        return kernel

    return decorator
