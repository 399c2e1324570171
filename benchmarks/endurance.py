"""Endurance run: thousands of batches through persistent workers, watching memory stay flat.

    python benchmarks/endurance.py                  # 3,000 batches, a row every 250
    python benchmarks/endurance.py --batches 20000 --every 1000 --workers 4

Generates a folder of photographic-looking JPEGs (``--images``, about ``--size`` px on the
shorter side) in a temporary folder, then runs an image training pipeline (RandomResizedCrop,
HorizontalFlip, ColorJitter, Normalize) on the CPU with ``persistent_workers=True`` over as
many epochs as the batches take. Every ``--every`` batches it prints: the batch count and
epoch, the resident memory (RSS) of the training process and of each worker, the shared
memory the loader holds (the /dev/shm segments that its processes have open: torch's
shared tensors are unlinked files that live on as open descriptors) and the named
/dev/shm entries they use (their queues' semaphores). At the end it prints the change of each column between the
first row after warm-up and the last. Exits non-zero if the workers changed (a restart)
or the shared memory held grew by more than ``--shm-slack-mb``.

Linux only (reads /proc). Not a test: it takes minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

MB = 1 << 20


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def shm_held_mb(pids: list[int]) -> float:
    """Bytes of /dev/shm files (named or unlinked) that these processes hold open, each file once."""
    seen: dict[tuple[int, int], int] = {}
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        for fd in os.listdir(fd_dir):
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
                if not target.startswith("/dev/shm/"):
                    continue
                st = os.stat(f"{fd_dir}/{fd}")
            except OSError:  # closed meanwhile
                continue
            seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return sum(seen.values()) / MB


def shm_names(pids: list[int]) -> int:
    """Named /dev/shm entries these processes use (open or mapped, not unlinked): the
    semaphores of their queues. Counted from /proc, so other programs' entries do not count."""
    names = set()
    for pid in pids:
        paths = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")
                 if os.path.islink(f"/proc/{pid}/fd/{fd}")]
        with open(f"/proc/{pid}/maps") as f:
            paths += [line.split(maxsplit=5)[-1].strip() for line in f if "/dev/shm/" in line]
        names |= {p for p in paths if p.startswith("/dev/shm/") and not p.endswith("(deleted)")}
    return len(names)


def write_images(root: Path, count: int, size: int) -> None:
    import numpy as np

    from mediapipe.synthetic import jpeg_bytes, photo_like

    rng = np.random.default_rng(0)
    for i in range(count):
        folder = root / f"class{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        h = int(size * rng.uniform(1.0, 1.3))
        w = int(size * rng.uniform(1.0, 1.6))
        (folder / f"img{i:05d}.jpg").write_bytes(jpeg_bytes(photo_like(h, w, i), quality=90))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=3000)
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--size", type=int, default=128, help="shorter side of the generated JPEGs, px")
    parser.add_argument("--crop", type=int, default=96)
    parser.add_argument("--warmup", type=int, default=250, help="batches before the reference row")
    parser.add_argument("--shm-slack-mb", type=float, default=32.0)
    args = parser.parse_args()

    import mediapipe as mp
    from mediapipe import augment as A

    with tempfile.TemporaryDirectory(prefix="mediapipe-endurance-") as tmp:
        root = Path(tmp)
        write_images(root, args.images, args.size)
        pipe = mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image()},
                           [A.RandomResizedCrop(args.crop), A.HorizontalFlip(), A.ColorJitter(0.3, 0.3, 0.3),
                            A.Normalize()],
                           batch_size=args.batch_size, seed=0, device="cpu")
        loader = pipe.loader(num_workers=args.workers, persistent_workers=True)
        me = os.getpid()
        header = (f"{'batches':>8} {'epoch':>6} {'main MB':>8} {'workers MB':>24} {'shm held MB':>12} "
                  f"{'shm names':>10} {'s':>7}")
        print(f"{args.images} JPEGs ~{args.size} px, crop {args.crop}, batch {args.batch_size}, "
              f"{len(loader)} batches an epoch, {args.workers} persistent workers", flush=True)
        print(header, flush=True)
        rows: list[tuple[int, float, list[float], float, int]] = []
        done, t0 = 0, time.perf_counter()
        workers: list[int] | None = None
        while done < args.batches:
            it = iter(loader)
            for batch in it:
                done += 1
                del batch
                if done % args.every == 0 or done == args.batches:
                    pids = it.worker_pids
                    if workers is None:
                        workers = pids
                    elif pids != workers:
                        print(f"workers changed: {workers} -> {pids}", file=sys.stderr)
                        return 1
                    row = (done, rss_mb(me), [rss_mb(p) for p in pids], shm_held_mb([me, *pids]),
                           shm_names([me, *pids]))
                    rows.append(row)
                    worker_mb = " ".join(f"{m:7.1f}" for m in row[2])
                    print(f"{done:>8} {loader.epoch:>6} {row[1]:>8.1f} {worker_mb:>24} {row[3]:>12.1f} "
                          f"{row[4]:>10} {time.perf_counter() - t0:>7.1f}", flush=True)
                if done >= args.batches:
                    break
            it.close()
        loader.close()
    first = next((r for r in rows if r[0] >= args.warmup), rows[0])
    last = rows[-1]
    worker_change = " ".join(f"{b - a:+.1f}" for a, b in zip(first[2], last[2]))
    print(f"change from batch {first[0]} to {last[0]}: main {last[1] - first[1]:+.1f} MB, workers {worker_change} MB, "
          f"shm held {last[3] - first[3]:+.1f} MB, shm names {last[4] - first[4]:+d}")
    return 0 if last[3] - first[3] <= args.shm_slack_mb else 1


if __name__ == "__main__":
    sys.exit(main())
