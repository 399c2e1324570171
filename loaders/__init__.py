"""Sources, samplers and the loader that hands device batches to a training loop."""

from mediapipe.loaders.asr import LhotseSource, NemoSource, lhotse, nemo
from mediapipe.loaders.bucketing import DurationBucketSampler, source_durations  # noqa: F401
from mediapipe.loaders.coco import CocoSource, coco
from mediapipe.loaders.huggingface import ArrowSource, huggingface
from mediapipe.loaders.parquet import ParquetSource, RowGroupWindowSampler, parquet
from mediapipe.loaders.recordio import RecordIOSource, recordio
from mediapipe.loaders.samplers import EpochBatchSampler, PlannedBatch
from mediapipe.loaders.shards import ShardSource, shards  # noqa: F401  (the converted format)
from mediapipe.loaders.sources import FolderSource, ManifestSource, Source, folder, manifest
from mediapipe.loaders.text import TokenizedSource, tokenize
from mediapipe.loaders.tfrecord import TFRecordSource, tfrecord
from mediapipe.loaders.yolo import YoloSource, yolo

__all__ = [
    "ArrowSource", "CocoSource", "EpochBatchSampler", "FolderSource", "LhotseSource", "ManifestSource", "NemoSource",
    "ParquetSource", "PlannedBatch", "RecordIOSource", "RowGroupWindowSampler", "Source", "TFRecordSource",
    "TokenizedSource", "YoloSource", "coco", "folder", "huggingface", "lhotse", "manifest", "nemo", "parquet",
    "recordio", "tfrecord", "tokenize", "yolo",
]
