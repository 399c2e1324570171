"""This library's loader beyond one machine, as bench backends of the image scenarios:
``mediapipe-ray`` (``pipe.loader(backend="ray")`` on a local Ray with as many CPUs as the
local loader has workers) and ``mediapipe-http`` (a converted dataset read over HTTP from
a server on 127.0.0.1 in the backend's process, against the same shards on disk).

Neither runs unless asked for (``--backend ray``, ``--backends mediapipe,mediapipe-http``).
The HTTP server runs in a child process of the backend's (its own interpreter, so it takes
no GIL from the loader): its CPU time counts against the backend, as a real server's would not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mediapipe.bench.streams import EpochStream, Stream, loader_stages, touch_image

REMOTE_BACKENDS = ("mediapipe-ray", "mediapipe-http")


def why_not(backend: str, data_is_converted: bool | None = None) -> str | None:
    """Why ``backend`` cannot run here (a missing extra), or None."""
    import importlib.util

    if backend == "mediapipe-ray" and importlib.util.find_spec("ray") is None:
        return 'not installed: Ray (pip install "mediapipe-loader[ray]")'
    if backend == "mediapipe-http" and (importlib.util.find_spec("fsspec") is None
                                        or importlib.util.find_spec("aiohttp") is None):
        return 'not installed: fsspec and aiohttp (pip install "mediapipe-loader[remote]")'
    return None


def open_mediapipe_ray(scenario: str, data: Path, *, device: str, workers: int, batch_size: int,
                       options: dict[str, Any]) -> Stream:
    """The same pipeline as ``mediapipe``, its sample stage on ``workers`` Ray actors (a local Ray
    of ``workers`` CPUs: the local loader's workers, as actors)."""
    from mediapipe.bench.image_data import TRAIN
    from mediapipe.bench.images import mediapipe_pipeline

    actors = max(1, workers)
    pipe = mediapipe_pipeline(scenario, data, device, batch_size, options=options)
    loader = pipe.loader(backend="ray", num_workers=actors, num_cpus=actors, shuffle=scenario == TRAIN,
                         drop_last=True)
    return EpochStream(lambda: loader, buffered=loader.max_in_flight + 1, stats=lambda: loader_stages(loader),
                       samples=touch_image, on_close=loader.close)


def open_mediapipe_http(scenario: str, data: Path, *, device: str, workers: int, batch_size: int,
                        options: dict[str, Any]) -> Stream:
    """The same pipeline as ``mediapipe`` on a converted dataset, its shards read over HTTP
    (one ranged read per sample, a batch's reads together) from a local server."""
    import mediapipe as mp
    from mediapipe.bench.image_data import TRAIN, dataset_layout
    from mediapipe.bench.images import mediapipe_pipeline

    if dataset_layout(data) != "converted":
        raise NotImplementedError("not applicable: shards over HTTP need a converted dataset (--as-shards, or "
                                  "--data of a converted dataset)")
    import multiprocessing

    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(str(data.parent), theirs),
                                                          daemon=True, name="mediapipe-bench-http")
    server.start()
    url = ours.recv()
    source = mp.loaders.shards(f"{url}/{data.name}")
    pipe = mediapipe_pipeline(scenario, data, device, batch_size, options=options, source=source)
    kwargs = {"worker_type": options["worker_type"]} if options.get("worker_type") else {}
    loader = pipe.loader(num_workers=workers, shuffle=scenario == TRAIN, drop_last=True, **kwargs)
    return EpochStream(lambda: loader, buffered=max(1, workers) * getattr(loader, "prefetch", 2) + 1,
                       stats=lambda: loader_stages(loader), samples=touch_image,
                        on_close=lambda: (ours.close(), server.kill()))  # (holds the pipe open: the server's life)


def _serve(root: str, conn: Any) -> None:
    """The HTTP server's process: serve ``root`` until the backend goes away."""
    from mediapipe.bench.http_server import RangeServer

    server = RangeServer(Path(root))
    conn.send(server.url)
    try:
        conn.recv()  # EOF when the backend's process ends
    except EOFError:
        pass
    server.close()


OPENERS = {"mediapipe-ray": open_mediapipe_ray, "mediapipe-http": open_mediapipe_http}
