"""mediapipe: media files (JPEG, AV1 video, audio) to batched, augmented PyTorch tensors.

    import mediapipe as mp
    from mediapipe import augment as A
    pipe = mp.Pipeline(source=mp.loaders.folder("train"), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(224), A.HorizontalFlip(), A.Normalize()],
                       batch_size=256, seed=0)
    for batch in pipe.loader(num_workers=8): ...

Names are imported on first use, so the command line (``mediapipe convert``) starts
without paying for torch until it needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mediapipe.errors import (
    DecodeError,
    LimitError,
    MediapipeError,
    PipelineError,
    SampleUnavailableError,
    SourceError,
    WorkerError,
)

if TYPE_CHECKING:
    from mediapipe import augment, decoders, loaders
    from mediapipe.augment.schedule import Schedule
    from mediapipe.pipeline import Pipeline, PipelineDataset
    from mediapipe.stages.epoch_cache import EpochCache

__version__ = "0.1.0"

_LAZY = {"Pipeline": "mediapipe.pipeline", "PipelineDataset": "mediapipe.pipeline",
         "EpochCache": "mediapipe.stages.epoch_cache", "Schedule": "mediapipe.augment.schedule",
         "augment": None, "decoders": None, "loaders": None}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'mediapipe' has no attribute {name!r}")
    module = _LAZY[name]
    value = importlib.import_module(f"mediapipe.{name}") if module is None else getattr(
        importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "DecodeError", "EpochCache", "LimitError", "MediapipeError", "Pipeline", "PipelineDataset", "PipelineError",
    "SampleUnavailableError", "Schedule", "SourceError", "WorkerError", "augment", "decoders", "loaders",
]
