"""Sources, samplers and the loader that hands device batches to a training loop."""

from mediapipe.loaders.bucketing import DurationBucketSampler, source_durations  # noqa: F401
from mediapipe.loaders.samplers import EpochBatchSampler, PlannedBatch
from mediapipe.loaders.shards import ShardSource, shards  # noqa: F401  (the converted format)
from mediapipe.loaders.sources import FolderSource, ManifestSource, Source, folder, manifest

__all__ = ["EpochBatchSampler", "FolderSource", "ManifestSource", "PlannedBatch", "Source", "folder", "manifest"]
