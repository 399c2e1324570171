"""`Pipeline`: the spec (source, decoders, ops, batch size, seed, device) and its entry points."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import torch

from mediapipe.augment.base import Op, op_from_config
from mediapipe.decoders.base import Limits
from mediapipe.decoders.spec import DecoderSpec
from mediapipe.loaders.loader_base import loader_class
from mediapipe.loaders.sources.folder import Source, source_from_config
from mediapipe.options import LastBatch, LoaderBackend, OnError
from mediapipe.plan import Plan
from mediapipe.stages.stats import StageStats
from mediapipe.torchvision_names import refuse_foreign_augment

if TYPE_CHECKING:
    from mediapipe.loaders.auto_workers import AutoLoader
    from mediapipe.loaders.dali.loader import DaliLoader
    from mediapipe.loaders.loader import Loader
    from mediapipe.loaders.ray_loader import RayLoader

CONFIG_VERSION = 1


def resolve_device(device: str | torch.device) -> torch.device:
    """"auto": CUDA (or ROCm, which torch also calls cuda) when present, else the CPU."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class Pipeline:
    """Media files to batches of augmented tensors on a torch device.

    Args:
        source: where samples come from (`mp.loaders.folder`, `manifest`, `shards`).
        decode: field name -> decoder spec, e.g. ``{"image": mp.decoders.image()}``.
        augment: ops, in order; each is placed in the sample or the batch stage.
        batch_size: samples per batch.
        seed: keys every random draw, with the epoch and the sample index.
        device: where the batch stage runs and batches land: "auto", "cpu", "cuda", "cuda:1"...
        on_error: "raise" (default), "skip" (a deterministic replacement keeps the batch
            size; counted in ``loader.stats``) or "replace" (zeros, flagged False in
            ``batch["valid"]``; counted).
        max_pixels, max_frames, max_duration: limits checked on headers before decoding.
        collate: field -> how its samples batch: "stack" (equal shapes), "pad" (the varying axis
            padded, plus ``<field>_lengths``: boxes as (B, N_max, 4)) or "list" (a list of
            per-sample tensors); by default boxes and keypoints are lists, audio is padded and the
            rest stacked (see `mediapipe.fields`).
    """

    def __init__(
        self,
        source: Source,
        decode: dict[str, DecoderSpec],
        augment: Sequence[Op] = (),
        batch_size: int = 32,
        seed: int = 0,
        device: str | torch.device = "auto",
        on_error: OnError = "raise",
        max_pixels: int | None = Limits.max_pixels,
        max_frames: int | None = Limits.max_frames,
        max_duration: float | None = Limits.max_duration,
        collate: dict[str, str] | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size={batch_size!r}: expected a positive int")
        if isinstance(augment, Op):
            raise ValueError(f"augment={augment!r}: expected a list of ops, e.g. [A.HorizontalFlip()]")
        refuse_foreign_augment(augment)  # torchvision's Compose or one transform: named, with what replaces it
        self.source, self.batch_size, self.seed = source, batch_size, seed
        self.device_spec = str(device)
        self.device = resolve_device(device)
        self.limits = Limits(max_pixels=max_pixels, max_frames=max_frames, max_duration=max_duration)
        self.plan = Plan(source, decode, list(augment), seed=seed, on_error=on_error, limits=self.limits,
                         device=self.device, collate=collate)

    @property
    def decode(self) -> dict[str, DecoderSpec]:
        return self.plan.decode

    @property
    def augment(self) -> list[Op]:
        return self.plan.ops

    @property
    def on_error(self) -> str:
        return self.plan.on_error

    @property
    def collate(self) -> dict[str, str]:
        return dict(self.plan.collate_policy)

    @property
    def field_types(self) -> dict[str, Any]:
        """Every field's `FieldType` once all ops ran (what a batch holds, besides side fields)."""
        return dict(self.plan.types)

    @overload
    def loader(self, num_workers: int = ..., shuffle: bool = ..., drop_last: bool | None = ...,
               last_batch: LastBatch = ..., backend: Literal["torch"] = ..., **kwargs: Any) -> Loader: ...

    @overload
    def loader(self, num_workers: Literal["auto"], shuffle: bool = ..., drop_last: bool | None = ...,
               last_batch: LastBatch = ..., backend: Literal["torch"] = ..., **kwargs: Any) -> AutoLoader: ...

    @overload
    def loader(self, num_workers: int = ..., shuffle: bool = ..., drop_last: bool | None = ...,
               last_batch: LastBatch = ..., *, backend: Literal["dali"], **kwargs: Any) -> DaliLoader: ...

    @overload
    def loader(self, num_workers: int = ..., shuffle: bool = ..., drop_last: bool | None = ...,
               last_batch: LastBatch = ..., *, backend: Literal["ray"], **kwargs: Any) -> RayLoader: ...

    def loader(self, num_workers: int | Literal["auto"] = 0, shuffle: bool = True, drop_last: bool | None = None,
               last_batch: LastBatch = "partial", backend: LoaderBackend = "torch",
               **kwargs: Any) -> Loader | AutoLoader | DaliLoader | RayLoader:
        """An iterable of device batches (see `Loader`); ``backend="dali"`` lowers the spec to DALI;
        ``backend="ray"`` runs the sample stage on a Ray cluster (see `RayLoader`). The backends are
        `mediapipe.loaders.loader_base.BACKENDS`; ``num_workers=0`` asks each for its default;
        ``num_workers="auto"`` (torch) measures a few settings on the first batches and keeps the
        fastest (`AutoLoader`)."""
        if num_workers == "auto":
            if backend != "torch":
                raise ValueError(f"num_workers='auto' is the torch backend's; give the {backend} backend a number")
            from mediapipe.loaders.auto_workers import AutoLoader

            return AutoLoader(self, shuffle=shuffle, drop_last=drop_last, last_batch=last_batch, **kwargs)
        cls = loader_class(backend)
        return cls(self, num_workers=num_workers or cls.default_workers, shuffle=shuffle, drop_last=drop_last,
                   last_batch=last_batch, **kwargs)

    def dataset(self) -> PipelineDataset:
        """A map-style torch Dataset of processed samples, for users who bring their own DataLoader."""
        return PipelineDataset(self)

    # -- config -----------------------------------------------------------------------
    def to_config(self) -> dict[str, Any]:
        """Plain dicts and lists: JSON and YAML serialisable, consumed by `from_config`."""
        return {
            "version": CONFIG_VERSION,
            "source": self.source.to_config(),
            "decode": {name: spec.to_config() for name, spec in self.decode.items()},
            "augment": [op.to_config() for op in self.augment],
            "batch_size": self.batch_size,
            "seed": self.seed,
            "device": self.device_spec,
            "on_error": self.on_error,
            "max_pixels": self.limits.max_pixels,
            "max_frames": self.limits.max_frames,
            "max_duration": self.limits.max_duration,
            **({"collate": self.collate} if self.collate else {}),
        }

    @classmethod
    def from_config(cls, config: dict[str, Any] | str | os.PathLike, **overrides: Any) -> Pipeline:
        """Build from `to_config`'s dict, or from a .json / .yaml file holding one."""
        if not isinstance(config, dict):
            config = load_config_file(config)
        config = {**config, **overrides}
        version = config.pop("version", CONFIG_VERSION)
        if version != CONFIG_VERSION:
            raise ValueError(f"pipeline config version {version}; this library reads {CONFIG_VERSION}")
        source = config.pop("source")
        return cls(
            source=source if isinstance(source, Source) else source_from_config(source),
            decode={name: DecoderSpec.from_config(spec) for name, spec in config.pop("decode").items()},
            augment=[op if isinstance(op, Op) else op_from_config(op) for op in config.pop("augment", [])],
            **config,
        )

    def save_config(self, path: str | os.PathLike) -> None:
        path = Path(path)
        config = self.to_config()
        if path.suffix in (".yaml", ".yml"):
            import yaml

            path.write_text(yaml.safe_dump(config, sort_keys=False))
        else:
            path.write_text(json.dumps(config, indent=2))

    def __repr__(self) -> str:
        return f"Pipeline(batch_size={self.batch_size}, seed={self.seed}, device={self.device})\n{self.plan.describe()}"


def load_config_file(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(text)
    return json.loads(text)


class PipelineDataset(torch.utils.data.Dataset):
    """Sample ``i`` of the current epoch, through the sample stage and the batch-stage ops
    (applied to a batch of one, on the CPU): the same values the loader would give."""

    def __init__(self, pipeline: Pipeline) -> None:
        from mediapipe.stages.batch_builder import BatchBuilder

        self.pipeline, self.plan, self.epoch = pipeline, pipeline.plan, 0
        self.builder = BatchBuilder(self.plan)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.pipeline.source)

    def __getitem__(self, index: int) -> dict[str, Any]:
        import numpy as np

        from mediapipe.stages.device_stage import finish_batch
        from mediapipe.stages.host_batch import BatchTask

        data = finish_batch(self.plan, self.builder(BatchTask(0, self.epoch, np.array([index]), 1)))
        return {k: (v[0] if isinstance(v, torch.Tensor) else v[0] if isinstance(v, list) else v)
                for k, v in data.items()}


__all__ = ["Pipeline", "PipelineDataset", "StageStats", "resolve_device"]
