"""Throughput of ``pipe.loader(backend="ray")`` as simulated nodes join, on one machine.

    python benchmarks/ray_scaling.py                   # 1, 2 and 3 nodes of 1 CPU, sample-images
    python benchmarks/ray_scaling.py --nodes 1,2,4 --cpus-per-node 1 --batches 12 --repeats 2

A `ray.cluster_utils.Cluster` whose head node has no CPU for actors (it holds the driver, the
training process) grows to N worker nodes of ``--cpus-per-node`` CPUs; one actor per CPU
builds the image-train batches (RandomResizedCrop 224, flip, normalise; batch 64) of the
bench's sample images, and the driver times ``--batches`` batches after a warm-up. In the
same run, the local loader with as many worker processes gives the reference. Rows
alternate (N=1, 2, 3, then the reverse) so that a shared machine's drift falls on all.

Simulated nodes share this machine's cores and memory bandwidth: past the machine's core
count the figure stops growing, whatever the node count. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time


def timed(loader, batches: int, warmup: int) -> float:
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    t0 = time.perf_counter()
    samples = 0
    for _ in range(batches):
        samples += int(next(it)["image"].shape[0])
    seconds = time.perf_counter() - t0
    it.close()
    return samples / seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default="1,2,3")
    p.add_argument("--cpus-per-node", type=int, default=1)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]

    import ray
    from ray.cluster_utils import Cluster

    from mediapipe.bench import datasets
    from mediapipe.bench.images import TRAIN, mediapipe_pipeline
    from mediapipe.loaders.ray_actors import stop_actors

    data = datasets.prepare("sample-images", progress=False)
    opts = {"max_batches": (args.warmup + args.batches) * 4, "repeat": True}
    pipe = mediapipe_pipeline(TRAIN, data, "cpu", args.batch_size, options=opts)
    rates: dict[tuple[str, int], list[float]] = {}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    nodes = []
    try:
        for repeat in range(args.repeats):
            for n in counts if repeat % 2 == 0 else counts[::-1]:
                while len(nodes) < n:
                    nodes.append(cluster.add_node(num_cpus=args.cpus_per_node))
                while len(nodes) > n:
                    stop_actors()
                    cluster.remove_node(nodes.pop())
                cluster.wait_for_nodes()
                stop_actors()  # a fresh set of actors, one per CPU of the N nodes
                actors = n * args.cpus_per_node
                ray_loader = pipe.loader(backend="ray", num_workers=actors, shuffle=True, drop_last=True)
                rates.setdefault(("ray", n), []).append(timed(ray_loader, args.batches, args.warmup))
                ray_loader.close()
                local = pipe.loader(num_workers=actors, shuffle=True, drop_last=True)
                rates.setdefault(("local", n), []).append(timed(local, args.batches, args.warmup))
                local.close()
    finally:
        stop_actors()
        ray.shutdown()
        cluster.shutdown()
    base = statistics.median(rates[("ray", counts[0])])
    print("| nodes (1 CPU each) | ray images/s (median; runs) | vs 1 node | local loader, same workers | ray / local |")
    print("| --- | --- | --- | --- | --- |")
    for n in counts:
        r, loc = statistics.median(rates[("ray", n)]), statistics.median(rates[("local", n)])
        runs = ", ".join(f"{x:.0f}" for x in rates[("ray", n)])
        print(f"| {n} | {r:.0f} ({runs}) | {r / base:.2f}x | {loc:.0f} | {r / loc:.2f} |")


if __name__ == "__main__":
    main()
