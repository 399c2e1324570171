"""Train torchvision's Faster R-CNN (MobileNetV3 FPN, random init) on a COCO-format dataset through the mediapipe loader.

    python examples/train_detector.py                         # a short run on a small generated COCO-format set
    python examples/train_detector.py --long                  # 20 steps at 320 px: minutes on a CPU
    python examples/train_detector.py data/coco/annotations.json --images data/coco/images  # sample-data's set
    python examples/train_detector.py instances_train.json --images ~/coco/train2017 --size 512

DATA is a COCO annotation file; --images is the folder its file names are relative to (default:
the file's folder). Nothing is downloaded: the model starts from random weights.

What each batch holds (B images):
  image     float32 (B, 3, size, size) in [0, 1] (the model normalises it itself).
  boxes     a list of B float32 (N_i, 4) tensors, xyxy pixels of the delivered image: the
            boxes moved with every crop, resize and flip the image went through.
  labels    a list of B int64 (N_i,) tensors: indices into source.classes (0..K-1).
  iscrowd   a list of B int64 (N_i,) tensors: 1 for COCO crowd regions, left out of the loss here.
  image_id  int64 (B,): the COCO image id of each sample.

torchvision's detection models take a list of images and a list of {"boxes", "labels"} dicts,
with label 0 kept for the background: labels go in shifted by one. A box that the crop cut to
nothing would make the loss fail: SanitizeBoundingBoxes drops it, and the same rows of labels
and iscrowd, as torchvision's does.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

import mediapipe as mp
from mediapipe import augment as A

SHORT = {"steps": 3, "batch_size": 2, "size": 160}  # the default: the pipeline at work within seconds on a CPU
LONG = {"steps": 20, "batch_size": 4, "size": 320}  # --long: the run that was the default, minutes on a CPU


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", metavar="DATA", nargs="?", type=Path,
                        help="a COCO annotation file (default: a generated COCO-format sample set)")
    parser.add_argument("--images", metavar="DIR", type=Path, help="the images' folder (default: DATA's folder)")
    parser.add_argument("--long", action="store_true",
                        help="the longer run: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in LONG.items())
                        + " (the defaults: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in SHORT.items())
                        + ", a run of seconds); a number given on the command line still counts")
    parser.add_argument("--steps", metavar="N", type=int, help="training steps")
    parser.add_argument("--batch-size", metavar="N", type=int, help="images per batch")
    parser.add_argument("--size", metavar="PX", type=int, help="training image side")
    parser.add_argument("--lr", metavar="LR", type=float, default=0.01, help="SGD learning rate (default: 0.01)")
    parser.add_argument("--workers", metavar="N", type=int, default=2, help="loader worker processes (default: 2)")
    parser.add_argument("--device", metavar="DEVICE", default="auto",
                        help='"auto" (CUDA if present), "cpu", "cuda:1"... (default: auto)')
    parser.add_argument("--seed", metavar="N", type=int, default=0, help="seeds the model and every random draw (default: 0)")
    args = parser.parse_args(argv)
    for name, value in (LONG if args.long else SHORT).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("steps", "batch_size", "size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: expected >= 1")
    if args.workers < 0:
        parser.error(f"--workers {args.workers}: expected >= 0")
    if args.data is not None and not args.data.is_file():
        parser.error(f"DATA {args.data}: not a file")
    return args


def detection_pipeline(annotations: Path, images: Path | None, args: argparse.Namespace) -> mp.Pipeline:
    return mp.Pipeline(
        source=mp.loaders.coco(annotations, images, box_format="xyxy"),  # boxes, labels, iscrowd, image_id
        decode={"image": mp.decoders.image()},
        augment=[
            # every geometric op moves the image and its boxes with one draw
            A.RandomIoUCrop(),                     # SSD's crop: fused into the JPEG decode (its region only)
            A.Resize((args.size, args.size)),
            A.SanitizeBoundingBoxes(),             # boxes the crop cut to nothing go, with their labels, iscrowd
            A.HorizontalFlip(),
            A.ColorJitter(brightness=0.2, contrast=0.2),  # the image only: boxes stay where they are
            A.ToDtype("float32", scale=True),
        ],
        batch_size=args.batch_size, seed=args.seed, device=args.device,
    )


def model_targets(batch: dict[str, Any]) -> list[dict[str, torch.Tensor]]:
    """torchvision's targets: per image, the boxes of objects (not crowd regions) and their labels
    shifted by one (0 is the background). SanitizeBoundingBoxes already dropped degenerate boxes."""
    return [{"boxes": boxes[crowd == 0], "labels": labels[crowd == 0] + 1}
            for boxes, labels, crowd in zip(batch["boxes"], batch["labels"], batch["iscrowd"])]


def main(argv: list[str] | None = None) -> list[float]:
    """Train for --steps steps; returns the losses."""
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_fpn

    args = parse_args(argv)
    if args.data is None:
        from sample_data import sample_detection

        dataset = sample_detection()
        args.data, args.images = dataset.annotations, dataset.images
        print(f"training on a generated COCO-format sample set in {dataset.root}")
    pipe = detection_pipeline(args.data, args.images, args)
    classes = pipe.source.classes
    print(f"{len(pipe.source)} images, {len(classes)} classes: {', '.join(classes[:8])}"
          + (" ..." if len(classes) > 8 else ""))
    torch.manual_seed(args.seed)
    model = fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None, num_classes=len(classes) + 1,
                                              min_size=args.size, max_size=args.size).to(pipe.device)
    model.train()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=args.lr, momentum=0.9,
                                weight_decay=1e-4)
    loader = pipe.loader(num_workers=args.workers, shuffle=True, drop_last=True)
    if len(loader) == 0:
        raise SystemExit(f"{args.data}: fewer images than one batch of {args.batch_size}")
    losses: list[float] = []
    epoch, start = 0, time.perf_counter()
    while len(losses) < args.steps:
        loader.set_epoch(epoch)
        for batch in loader:
            parts = model(list(batch["image"]), model_targets(batch))
            loss = sum(parts.values())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            objects = sum(len(b) for b in batch["boxes"])
            print(f"step {len(losses):4d}  loss {losses[-1]:.3f}  ("
                  + ", ".join(f"{k.removeprefix('loss_')} {v.item():.3f}" for k, v in parts.items())
                  + f")  {objects} objects  {time.perf_counter() - start:.1f} s")
            if len(losses) == args.steps:
                break
        epoch += 1
    return losses


if __name__ == "__main__":
    main()
