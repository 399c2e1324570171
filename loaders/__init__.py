"""Sources, samplers and the loader that hands device batches to a training loop."""

from mediapipe.loaders.bucketing import DurationBucketSampler, source_durations
from mediapipe.loaders.samplers import EpochBatchSampler, PlannedBatch, RepeatedAugmentationSampler
from mediapipe.loaders.sources.asr import LhotseSource, NemoSource, lhotse, nemo
from mediapipe.loaders.sources.coco import CocoSource, coco
from mediapipe.loaders.sources.folder import FolderSource, ManifestSource, Source, folder, manifest
from mediapipe.loaders.sources.huggingface import ArrowSource, huggingface
from mediapipe.loaders.sources.parquet import ParquetSource, RowGroupWindowSampler, parquet
from mediapipe.loaders.sources.recordio import RecordIOSource, recordio
from mediapipe.loaders.sources.shards import ShardSource, shards  # the converted format
from mediapipe.loaders.sources.text import TokenizedSource, tokenize
from mediapipe.loaders.sources.tfrecord import TFRecordSource, tfrecord
from mediapipe.loaders.sources.yolo import YoloSource, yolo

__all__ = [
    "ArrowSource", "CocoSource", "DurationBucketSampler", "EpochBatchSampler", "FolderSource", "LhotseSource", "ManifestSource", "NemoSource",
    "ParquetSource", "PlannedBatch", "RecordIOSource", "RepeatedAugmentationSampler", "RowGroupWindowSampler", "Source", "TFRecordSource",
    "ShardSource", "TokenizedSource", "YoloSource", "coco", "folder", "huggingface", "lhotse", "manifest", "nemo", "parquet",
    "recordio", "shards", "source_durations", "tfrecord", "tokenize", "yolo",
]
