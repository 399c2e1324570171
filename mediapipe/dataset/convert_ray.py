"""The Ray engine of `mediapipe convert`: the same per-shard tasks as the local engine, on a cluster.

Each Ray task converts one shard start to finish (`convert_write.convert_shard`) and writes it
into the output folder, so the inputs and the output folder must be visible at the same
paths on every node (a shared file system). The driver commits each shard to the manifest
as its task finishes, so ``--resume`` works exactly as with the local engine.
Ray is an optional extra: ``pip install "mediapipe-loader[ray]"``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from mediapipe.dataset.convert_plan import ShardTask
from mediapipe.dataset.convert_write import ShardResult, convert_shard
from mediapipe.dataset.transcode import TranscodeOptions

log = logging.getLogger(__name__)


def run_ray(out: Path, tasks: list[ShardTask], options: TranscodeOptions, *, address: str | None = None,
            num_cpus: int | None = None, max_in_flight: int | None = None) -> Iterator[ShardResult]:
    """Run one Ray task per shard; yield each shard's result as it finishes (any order).

    ``address``: an existing cluster ("auto", "ray://host:10001"); None starts a local Ray
    with ``num_cpus`` CPUs. A Ray this process already uses is joined; one the library
    connected is let go of with its last user (this run or a Ray loader), as `use_ray` says.
    At most ``max_in_flight`` tasks (default: twice the cluster's CPUs) are queued, so a huge
    plan does not flood the scheduler.
    """
    try:
        from mediapipe.loaders.ray_base import import_ray
        from mediapipe.loaders.ray_connection import release_ray, use_ray

        import_ray()
    except ImportError as err:
        raise RuntimeError('--engine ray needs Ray: pip install "ray[default]"') from err
    run = object()  # this run, as a user of the Ray it connects or joins
    ray = use_ray(run, address=address, num_cpus=num_cpus)
    try:
        remote = ray.remote(num_cpus=1, max_retries=2)(convert_shard)
        limit = max_in_flight or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        queue, running = list(tasks), []
        out_str = str(Path(out).resolve())
        while queue or running:
            while queue and len(running) < limit:
                running.append(remote.remote(out_str, queue.pop(0), options))
            ready, running = ray.wait(running, num_returns=1)
            result = ray.get(ready[0])
            log.info("ray: shard %d done (%d samples)", result.entry["shard"], result.entry["samples"])
            yield result
    finally:
        release_ray(run)
