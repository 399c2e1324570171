"""Train a small CNN for a few steps on a folder of images through the mediapipe loader.

    python examples/train_classifier.py DATA_DIR [--steps 20] [--workers 2] [--device auto]

DATA_DIR holds one sub-folder per class. Prints the loss per step and the input
wait time the loader measured, so you can see whether training was input-bound.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import mediapipe as mp
from mediapipe import augment as A


def small_cnn(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes),
    )


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)

    source = mp.loaders.folder(args.data)
    pipe = mp.Pipeline(
        source=source,
        decode={"image": mp.decoders.image()},
        augment=[A.RandomResizedCrop(args.size), A.HorizontalFlip(), A.Normalize()],
        batch_size=args.batch_size, seed=0, device=args.device,
    )
    model = small_cnn(len(source.classes)).to(pipe.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = pipe.loader(num_workers=args.workers, shuffle=True, drop_last=True)
    losses: list[float] = []
    start = time.perf_counter()
    while len(losses) < args.steps:
        for batch in loader:
            loss = nn.functional.cross_entropy(model(batch["image"]), batch["label"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            print(f"step {len(losses):4d}  loss {losses[-1]:.4f}")
            if len(losses) == args.steps:
                break
    elapsed = time.perf_counter() - start
    wait = loader.stats.seconds["wait"]
    print(f"{args.steps} steps in {elapsed:.1f} s; waited {wait:.1f} s for input ({100 * wait / elapsed:.0f}%)")
    return losses


if __name__ == "__main__":
    main()
