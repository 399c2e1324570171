"""The op protocol: an op draws parameters in one place; a pure kernel applies them.

Ops are frozen dataclasses. Each reads the fields ``keys`` (or ``key``) and writes
``out`` (default: in place). ``sample_params`` runs on the CPU, per sample, from a
keyed `SampleRNG`; ``apply`` runs a kernel. In the *sample* stage ``apply`` sees
one sample's tensor and the plain params; in the *batch* stage it sees the whole
batch on the device and the params stacked into tensors of shape (B, ...).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import torch

from mediapipe.decoders.base import DecodeHint
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

Params = dict[str, Any]

_OPS: dict[str, type[Op]] = {}


class Stage(enum.Enum):
    """Where an op runs: per sample in a worker, or on whole batches on the device."""

    SAMPLE = "sample"
    BATCH = "batch"


@dataclass(frozen=True)
class Op:
    """Base class of every augmentation op. Subclasses are registered by class name."""

    key: str = field(default="image", kw_only=True)
    keys: tuple[str, ...] | None = field(default=None, kw_only=True)
    out: str | tuple[str, ...] | None = field(default=None, kw_only=True)

    stage: ClassVar[Stage] = Stage.BATCH
    per_batch: ClassVar[bool] = False  # params drawn once per batch (MixUp), not per sample
    batch_only: ClassVar[bool] = False  # cannot run on a single sample (MixUp, CutMix)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_"):
            _OPS[cls.__name__] = cls

    def __post_init__(self) -> None:
        if self.keys is not None:
            object.__setattr__(self, "keys", tuple(self.keys))
        if isinstance(self.out, list):
            object.__setattr__(self, "out", tuple(self.out))
        if self.out is not None and len(self.outputs) != len(self.inputs):
            raise ValueError(f"{type(self).__name__}: out={self.out!r} must name one field per input {self.inputs}")

    # -- fields -----------------------------------------------------------------------
    @property
    def inputs(self) -> tuple[str, ...]:
        """The fields this op transforms."""
        return self.keys if self.keys is not None else (self.key,)

    @property
    def outputs(self) -> tuple[str, ...]:
        """The fields this op writes, one per input."""
        if self.out is None:
            return self.inputs
        return (self.out,) if isinstance(self.out, str) else tuple(self.out)

    def reads(self) -> tuple[str, ...]:
        """Every field the op needs (inputs, plus e.g. ``label`` for MixUp)."""
        return self.inputs

    def writes(self) -> tuple[str, ...]:
        return self.outputs

    # -- parameters -------------------------------------------------------------------
    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        """Draw this sample's parameters. ``meta["size"]`` is the (height, width) the op will see."""
        return {}

    def batch_params(self, rng: SampleRNG, batch_size: int) -> Params:
        """Draw parameters once per batch (only for ``per_batch`` ops)."""
        return {}

    # -- application ------------------------------------------------------------------
    def apply(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        """Apply the kernel to one field's tensor."""
        raise NotImplementedError(f"{type(self).__name__}.apply")

    def apply_to(self, x: torch.Tensor, params: Params, field: str) -> torch.Tensor:
        """Apply to the input field named ``field`` (ops that treat masks differently override)."""
        return self.apply(x, params)

    def apply_fields(self, data: dict[str, Any], params: Params) -> None:
        """Apply to every input field, writing the outputs; ops that read several fields override."""
        for src, dst in zip(self.inputs, self.outputs):
            data[dst] = self.apply_to(data[src], params, src)

    # -- fusion with the decoder (sample-stage geometry) --------------------------------
    def fusable(self, field: str) -> bool:
        """Whether the decoder of input ``field`` may do this op's work through `decode_hint`."""
        return type(self).decode_hint is not Op.decode_hint

    def decode_hint(self, params: Params, meta: SampleMeta) -> DecodeHint | None:
        """A hint that lets the decoder do (part of) this op's work, or None."""
        return None

    def apply_decoded(self, x: torch.Tensor, params: Params) -> torch.Tensor:
        """Finish the op on what a decoder returned for `decode_hint`."""
        return self.apply(x, params)

    # -- fusion with the batch op before it (CPU) ----------------------------------------
    def absorbs(self, before: Op) -> bool:
        """Whether this op can do ``before``'s work while it writes its own output, as DALI's
        CropMirrorNormalize mirrors while it normalises: one pass over the batch fewer."""
        return False

    def apply_absorbing(self, x: torch.Tensor, params: Params, before: Op, before_params: Params) -> torch.Tensor:
        """``self.apply(before.apply(x, before_params), params)`` in one pass (see `absorbs`)."""
        return self.apply(before.apply(x, before_params), params)

    # -- config -----------------------------------------------------------------------
    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"op": type(self).__name__}
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                config[f.name] = list(value) if isinstance(value, tuple) else value
        return config


def check_probability(op: Op, p: float, name: str = "p") -> None:
    """Reject a probability outside [0, 1], naming the op, the argument and the value."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{type(op).__name__}({name}={p}): expected 0 <= {name} <= 1")


def op_from_config(config: dict[str, Any]) -> Op:
    """Rebuild an op from `Op.to_config`'s dict."""
    config = dict(config)
    name = config.pop("op")
    if name not in _OPS:
        raise ValueError(f"unknown op {name!r}; known: {sorted(_OPS)}")
    cls = _OPS[name]
    tuple_fields = {f.name for f in fields(cls)}
    for k, v in config.items():
        if k in tuple_fields and isinstance(v, list):
            config[k] = _to_tuple(v)
    return cls(**config)


def _to_tuple(value: Any) -> Any:
    return tuple(_to_tuple(v) for v in value) if isinstance(value, list) else value


def registered_ops() -> dict[str, type[Op]]:
    return dict(_OPS)
