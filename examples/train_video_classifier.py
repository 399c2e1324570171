"""Train a small 3D CNN on AV1 clips through the mediapipe loader: clip sampling and per-clip augmentation.

    python examples/train_video_classifier.py                  # on a few generated AV1 clips
    python examples/train_video_classifier.py ~/videos/train --clip-len 16 --stride 2 --size 112

DATA holds one sub-folder per class of video files (AV1, and anything else FFmpeg decodes).

What each batch holds (B clips of T frames):
  video         float32 (B, 3, T, size, size): RGB, normalised, in the (C, T, H, W) layout of
                3D CNNs (ClipLayout("TCHW") keeps (T, C, H, W) for frame-wise models).
  label         int64 (B,): the index of the class folder.
  index         int64 (B,): each clip's sample index in the source.
  video_colour  int64 (B,): a side field the video decoder adds, the colour code (matrix x
                range) of each clip's stream. With output="yuv" the decoder leaves the Y, U, V
                planes as they are, and YUVToRGB() reads this field to convert each clip with
                its own stream's matrix (BT.601 or BT.709) and range, as FFmpeg would, in one
                batched product on the device. You never need to read it yourself.

Clip sampling: each video gives one clip of --clip-len frames, --stride source frames apart,
at a start drawn from the sample's keyed random generator (sampling="random"; "uniform"
takes the middle clip, as for evaluation). The decoder seeks to the key frame before the
clip and decodes only what the clip needs.

Per-clip augmentation: an image op on a clip draws its parameters once per clip, so every
frame gets the same crop, flip and colour jitter. The crop is fused into the decoder (Y, U
and V planes are cropped and resized before any colour conversion); FrameDrop and
TemporalReverse act on the time axis.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.sample import VIDEO_EXTENSIONS


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", metavar="DATA", nargs="?", type=Path,
                        help="video files in class sub-folders (default: a few generated AV1 clips)")
    parser.add_argument("--steps", metavar="N", type=int, default=10, help="training steps (default: 10)")
    parser.add_argument("--clip-len", metavar="T", type=int, default=8, help="frames per clip (default: 8)")
    parser.add_argument("--stride", metavar="N", type=int, default=2, help="source frames between a clip's frames (default: 2)")
    parser.add_argument("--size", metavar="PX", type=int, default=64, help="crop side in pixels (default: 64)")
    parser.add_argument("--batch-size", metavar="N", type=int, default=4, help="clips per batch (default: 4)")
    parser.add_argument("--lr", metavar="LR", type=float, default=0.01, help="SGD learning rate (default: 0.01)")
    parser.add_argument("--workers", metavar="N", type=int, default=2, help="loader worker processes (default: 2)")
    parser.add_argument("--device", metavar="DEVICE", default="auto", help='"auto" (CUDA if present), "cpu", "cuda:1"... (default: auto)')
    parser.add_argument("--seed", metavar="N", type=int, default=0, help="seeds the model and every random draw (default: 0)")
    args = parser.parse_args(argv)
    for name in ("steps", "clip_len", "stride", "size", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: expected >= 1")
    if args.workers < 0:
        parser.error(f"--workers {args.workers}: expected >= 0")
    if args.data is not None and not args.data.is_dir():
        parser.error(f"DATA {args.data}: not a folder")
    return args


def video_pipeline(args: argparse.Namespace) -> mp.Pipeline:
    return mp.Pipeline(
        source=mp.loaders.folder(args.data, extensions=VIDEO_EXTENSIONS),  # the videos only
        # one random clip per video; Y, U, V planes, converted to RGB on the device by YUVToRGB
        decode={"video": mp.decoders.video(clip_len=args.clip_len, stride=args.stride, sampling="random",
                                           output="yuv")},
        augment=[
            A.RandomResizedCrop(args.size, scale=(0.3, 1.0), key="video"),  # one crop per clip, in the decoder
            A.HorizontalFlip(key="video"),
            A.FrameDrop(p=0.1),                        # a dropped frame repeats the one before (a stall)
            A.YUVToRGB(dtype="float32"),               # reads video_colour: each stream's own matrix and range
            A.ColorJitter(brightness=0.3, contrast=0.3, key="video"),  # one draw per clip
            A.Normalize(key="video"),
            A.ClipLayout("CTHW"),
        ],
        batch_size=args.batch_size, seed=args.seed, device=args.device,
    )


def small_3d_cnn(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv3d(3, 16, kernel_size=3, stride=(1, 2, 2), padding=1), nn.BatchNorm3d(16), nn.ReLU(),
        nn.Conv3d(16, 32, kernel_size=3, stride=2, padding=1), nn.BatchNorm3d(32), nn.ReLU(),
        nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(32, num_classes),
    )


def describe(batch: dict[str, Any]) -> str:
    return "\n".join(f"  {name:13s} {str(value.dtype).removeprefix('torch.'):8s} {tuple(value.shape)}"
                     for name, value in batch.items() if isinstance(value, torch.Tensor))


def main(argv: list[str] | None = None) -> list[float]:
    """Train for --steps steps; returns the losses."""
    args = parse_args(argv)
    if args.data is None:
        from sample_data import sample_videos

        args.data = sample_videos()
        print(f"training on generated sample clips in {args.data} (their classes are arbitrary)")
    pipe = video_pipeline(args)
    classes = pipe.source.classes
    torch.manual_seed(args.seed)
    model = small_3d_cnn(len(classes)).to(pipe.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = pipe.loader(num_workers=args.workers, shuffle=True, drop_last=True)
    if len(loader) == 0:
        raise SystemExit(f"{args.data}: fewer videos than one batch of {args.batch_size}")
    losses: list[float] = []
    started = time.perf_counter()
    while len(losses) < args.steps:
        for batch in loader:  # the epoch advances by itself after a full pass
            if not losses:
                print(f"a batch of {len(batch['label'])} clips:\n{describe(batch)}")
            loss = nn.functional.cross_entropy(model(batch["video"]), batch["label"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            print(f"step {len(losses):4d}  loss {losses[-1]:.4f}")
            if len(losses) == args.steps:
                break
    elapsed = time.perf_counter() - started
    stats = loader.stats
    print(f"{args.steps} steps in {elapsed:.1f} s; waited {stats.seconds['wait']:.1f} s for input")
    return losses


if __name__ == "__main__":
    try:
        main()
    except mp.MediapipeError as err:  # a file or folder that cannot be read: its name and why
        sys.exit(f"{Path(sys.argv[0]).name}: {err}")
