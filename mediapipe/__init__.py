"""mediapipe: media files (JPEG, AV1 video, audio) to batched, augmented PyTorch tensors.

    import mediapipe as mp
    from mediapipe import augment as A
    pipe = mp.Pipeline(source=mp.loaders.folder("train"), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(224), A.HorizontalFlip(), A.Normalize()],
                       batch_size=256, seed=0)
    for batch in pipe.loader(num_workers=8): ...
"""

from mediapipe import augment, decoders, loaders  # noqa: F401  (the subpackages, as mp.augment...)
from mediapipe.errors import DecodeError, LimitError, MediapipeError, PipelineError, SourceError, WorkerError
from mediapipe.pipeline import Pipeline, PipelineDataset

__version__ = "0.1.0"

__all__ = [
    "DecodeError", "LimitError", "MediapipeError", "Pipeline", "PipelineDataset", "PipelineError", "SourceError",
    "WorkerError", "augment", "decoders", "loaders",
]
