"""`mediapipe convert`: a folder or manifest of media to sharded, indexed, transcoded datasets.

`convert` is the one entry: into a local folder it is `mediapipe.dataset.convert_run`'s run
(the plan, the shards as independent tasks on a process pool or a Ray cluster, and the resume
of a killed run), into object storage (``s3://``, ``gs://``) `mediapipe.dataset.convert_remote`'s,
which runs the same conversion into a staging folder and uploads each shard as it commits.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from mediapipe.dataset.convert_plan import DEFAULT_OPTIONS
from mediapipe.dataset.convert_remote import convert_to_store
from mediapipe.dataset.convert_run import ConversionResult, convert_to_folder
from mediapipe.dataset.convert_write import ShardResult
from mediapipe.dataset.transcode import TranscodeOptions
from mediapipe.remote.urls import is_remote


def convert(src: Any, out: str | os.PathLike, *, shard_size: str | int = "256MB",
            shuffle: bool = True, seed: int = 0, workers: int = 1, resume: bool = False, engine: str = "local",
            options: TranscodeOptions = DEFAULT_OPTIONS, ray_address: str | None = None,
            progress: bool = False, storage_options: dict[str, Any] | None = None,
            on_commit: Callable[[dict[str, Any], ShardResult | None], None] | None = None) -> ConversionResult:
    """Convert ``src`` (a folder of class sub-folders, a JSON-lines manifest, a dataset that
    `open_inputs` reads: TFRecord, RecordIO, Parquet, Hugging Face, NeMo, Lhotse, a COCO
    annotation file; or a source: ``mp.loaders.yolo(...)``) into ``out``. A source that declares
    targets (boxes, labels, masks: ``field_types()``) has them written into each sample's
    ``.json`` member and their types into the manifest, for `mediapipe.loaders.sources.shards`.

    ``resume=True`` continues a killed run (same inputs and settings), redoing only the
    shards its manifest does not list; the result equals an uninterrupted run byte for byte.
    ``out`` may be a URL (``s3://bucket/out``: see `mediapipe.dataset.convert_remote`, which passes
    ``storage_options`` to fsspec); ``on_commit(manifest, result)`` runs after each shard is
    committed, and once more with None when the dataset is complete.
    """
    if is_remote(str(out)):
        return convert_to_store(src, str(out), resume=resume, storage_options=storage_options, shard_size=shard_size,
                                shuffle=shuffle, seed=seed, workers=workers, engine=engine, options=options,
                                ray_address=ray_address, progress=progress)
    return convert_to_folder(src, out, shard_size=shard_size, shuffle=shuffle, seed=seed, workers=workers,
                             resume=resume, engine=engine, options=options, ray_address=ray_address,
                             progress=progress, on_commit=on_commit)
