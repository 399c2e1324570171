"""`DecoderSpec`: what the user writes for a field (a media kind, a backend name, the kind's
options), and what it becomes in a worker: a live `Decoder` from the registry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from mediapipe.decoders.base import Decoder, Limits
from mediapipe.decoders.options import DecoderOptions
from mediapipe.decoders.registry import create, decoder_class, options_type
from mediapipe.fields import KINDS, OTHER, FieldType
from mediapipe.options import Where


@dataclass(frozen=True)
class DecoderSpec:
    """What the user writes: a media kind, a backend name ("auto") and the kind's options.

    ``options``: the kind's options dataclass (`Decoder.options_type`: `ImageOptions`...); a
    mapping (a config's) is read into it, checked. ``field_kind``: the kind of field the decoded
    tensor is (see `mediapipe.fields`), when it is not the media kind: "mask" for a segmentation
    mask decoded from an image file."""

    kind: str
    backend: str = "auto"
    options: DecoderOptions = field(default_factory=dict)  # type: ignore[assignment]  # read in __post_init__
    field_kind: str | None = None

    def __post_init__(self) -> None:
        given: Mapping[str, Any] = self.options
        object.__setattr__(self, "options", options_type(self.kind, self.backend).of(given))

    def create(self, device: torch.device | None = None, limits: Limits = Limits()) -> Decoder:
        return create(self.kind, self.backend, device=device, limits=limits, **self.options)

    def to_config(self) -> dict[str, Any]:
        config = {"kind": self.kind, "backend": self.backend, **self.options}
        if self.field_kind is not None:
            config["field_kind"] = self.field_kind
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> DecoderSpec:
        config = dict(config)
        return cls(kind=config.pop("kind"), backend=config.pop("backend", "auto"),
                   field_kind=config.pop("field_kind", None), options=config)

    @property
    def field_type(self) -> FieldType:
        """The type of the field this decoder fills: its ``field_kind``, else its media kind, batched
        as the decoder batches (audio: padded)."""
        kind = self.field_kind or self.kind
        return FieldType(kind if kind in KINDS else OTHER, collate=self.collate if self.collate != "stack" else None)

    @property
    def collate(self) -> str:
        return decoder_class(self.kind, self.backend).collate

    @property
    def side_fields(self) -> tuple[str, ...]:
        return decoder_class(self.kind, self.backend).side_fields_for(self.options)

    @property
    def from_field(self) -> str | None:
        """The field whose file and time spans this one decodes (audio of a video), or None."""
        return self.options.get("from_field")

    def placement(self, device: torch.device | None) -> Where:
        """Where this spec's backend decodes for ``device``: "worker" or "device"."""
        return decoder_class(self.kind, self.backend, device).placement(device, self.options)
