"""Ray Data's streaming executor against the Ray backend's actors, for the same batches.

    python benchmarks/ray_data_vs_actors.py --cpus 2 --batches 16

Both build the image-train batches (batch 64) of the bench's sample images with the same
`BatchBuilder` on ``--cpus`` CPUs of a local Ray: (a) ``pipe.loader(backend="ray")``, actors
sent `BatchTask`s, results in order; (b) Ray Data: ``from_items`` of the tasks, ``map`` with
an actor pool of callable builders (``ActorPoolStrategy(size=cpus)``), ``preserve_order=True``,
rows read with ``iter_rows``. Each is timed over ``--batches`` batches after a warm-up of 2, alternated
``--repeats`` times. This is how the backend's design was chosen; it is not part of the bench.
"""

from __future__ import annotations

import argparse
import statistics
import time


class _Build:
    """Ray Data's callable: one BatchTask row in, one batch row (numpy arrays) out."""

    def __init__(self, builder) -> None:
        self.builder = builder

    def __call__(self, row):
        host = self.builder(row["task"])
        return {k: v.numpy() for k, v in host.data.items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--batches", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2, help="the Ray loader's batches in flight per actor")
    args = p.parse_args()

    import ray

    from mediapipe.bench import datasets
    from mediapipe.bench.images import TRAIN, mediapipe_pipeline
    from mediapipe.stages.batch_builder import BatchBuilder
    from mediapipe.stages.host_batch import BatchTask

    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    data = datasets.prepare("sample-images", progress=False)
    pipe = mediapipe_pipeline(TRAIN, data, "cpu", 64, options={"max_batches": 200, "repeat": True})
    n = args.batches + 2
    rates: dict[str, list[float]] = {"actors": [], "ray-data": []}

    def actors() -> float:
        loader = pipe.loader(backend="ray", num_workers=args.cpus, prefetch=args.prefetch, shuffle=True,
                             drop_last=True)
        it = iter(loader)
        next(it), next(it)
        t0 = time.perf_counter()
        for _ in range(args.batches):
            next(it)
        rate = args.batches * 64 / (time.perf_counter() - t0)
        it.close()
        loader.close()
        return rate

    def ray_data() -> float:
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        builder = BatchBuilder(pipe.plan, finish=True)
        sampler = pipe.loader(num_workers=0, shuffle=True, drop_last=True).sampler
        tasks = [{"task": BatchTask(i, 0, b.indices, b.valid)} for i, b in enumerate(sampler.batches()[:n])]
        ds = ray.data.from_items(tasks).map(_Build, fn_constructor_args=(builder,), num_cpus=1,
                                            compute=ray.data.ActorPoolStrategy(size=args.cpus))
        rows = iter(ds.iter_rows())
        next(rows), next(rows)
        t0 = time.perf_counter()
        for _ in range(args.batches):
            next(rows)
        return args.batches * 64 / (time.perf_counter() - t0)

    try:
        for repeat in range(args.repeats):
            for name in (["actors", "ray-data"] if repeat % 2 == 0 else ["ray-data", "actors"]):
                rates[name].append(actors() if name == "actors" else ray_data())
    finally:
        ray.shutdown()
    for name, values in rates.items():
        print(f"| {name} | {statistics.median(values):.0f} images/s | runs: {', '.join(f'{v:.0f}' for v in values)} |")


if __name__ == "__main__":
    main()
