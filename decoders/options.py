"""Decoder options: one frozen dataclass per media kind, shared by the factory (``mp.decoders.video()``),
the config and the live decoder, so each option has one definition, one type and one default.

A kind's options (`ImageOptions`, `VideoOptions`, `AudioOptions`, next to their factories) subclass
`DecoderOptions`: every value is checked once, against its annotation and the kind's own rules,
when the options are made, and an unknown or ill-typed option is a `PipelineError` naming it.
Read as a mapping, the options are what a config holds: an option that configs leave out at its
default (`written_unless_default`) is absent there.
"""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, TypeVar

from mediapipe.arguments import conform, type_name
from mediapipe.errors import PipelineError

OptionsT = TypeVar("OptionsT", bound="DecoderOptions")

_UNLESS_DEFAULT = "written unless default"


def written_unless_default(default: Any) -> Any:
    """A field that a config holds only when it is not ``default`` (an option added later, so the
    configs written before it stay as they were)."""
    return field(default=default, metadata={_UNLESS_DEFAULT: True})


@dataclass(frozen=True)
class DecoderOptions(Mapping[str, Any]):
    """The options of a kind's decoders (none, for a kind that declares none); see the module docstring."""

    factory: ClassVar[str] = "decoder"  # what messages call the options: "video" for video(clip_len=0)

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, self._conformed(f.name, getattr(self, f.name)))
        self.check()

    @classmethod
    def of(cls: type[OptionsT], values: Mapping[str, Any]) -> OptionsT:
        """Options from a config's or a caller's values; an unknown name is refused, naming it."""
        if isinstance(values, cls):
            return values
        known = [f.name for f in fields(cls)]
        offered = f"the options are {known}" if known else ("its decoders declare none (a backend declares its "
                                                             "kind's options as Decoder.options_type)")
        for name, value in values.items():
            if name not in known:
                raise PipelineError(f"{cls.factory}({name}={value!r}): no such option; {offered}")
        return cls(**values)

    def check(self) -> None:
        """The kind's rules over the values (ranges, options that exclude each other)."""

    def refuse(self, name: str, expected: str) -> PipelineError:
        """The error for option ``name``'s value: what was given, and what is expected."""
        return PipelineError(f"{self.factory}({name}={getattr(self, name)!r}): {expected}")

    def _conformed(self, name: str, value: Any) -> Any:
        """``value`` as option ``name``'s annotation takes it (a numpy scalar as Python's), or refused."""

        hint = _hints(type(self))[name]
        if typing.get_origin(hint) is Literal:
            choices = typing.get_args(hint)
            if not any(value == c and type(value) is type(c) for c in choices):
                raise PipelineError(f"{self.factory}({name}={value!r}): expected one of {choices}")
            return value
        ok, fixed = conform(value, hint)
        if not ok:
            raise PipelineError(f"{self.factory}({name}={value!r}): expected {type_name(hint)}")
        if isinstance(fixed, float) and not math.isfinite(fixed):  # NaN passes every range check
            raise PipelineError(f"{self.factory}({name}={value!r}): expected a finite number")
        return fixed

    # -- as a mapping: the options a config holds -------------------------------------------
    def _written(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if not (f.metadata.get(_UNLESS_DEFAULT) and getattr(self, f.name) == f.default)}

    def __getitem__(self, name: str) -> Any:
        return self._written()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._written())

    def __len__(self) -> int:
        return len(self._written())


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)
