"""Train an image classifier with torchvision's classification recipes, as mediapipe ops.

    python examples/train_recipe.py                  # a few steps on a small generated sample set
    python examples/train_recipe.py DATA --auto-augment ta_wide --random-erase 0.1 --mixup-alpha 0.2 \\
        --cutmix-alpha 1.0 --ra-sampler --ra-reps 4 --train-crop-size 176 --val-resize-size 232 \\
        --label-smoothing 0.1                        # torchvision's "new recipe" ResNet-50's data flags

The flags are those of torchvision's references/classification/train.py, with its defaults, and
build what its presets.py and train.py build: RandomResizedCrop(--train-crop-size) and
HorizontalFlip(--hflip-prob), the --auto-augment policy (ta_wide: TrivialAugmentWide, ra:
RandAugment(magnitude=--ra-magnitude), augmix: AugMix(severity=--augmix-severity), imagenet, cifar10
or svhn: AutoAugment(policy)) with --interpolation, Normalize, RandomErasing(--random-erase), and
MixUp(--mixup-alpha) or CutMix(--cutmix-alpha) chosen per batch (RandomChoice, once per batch from
the batch's key); evaluation is Resize(--val-resize-size) and CenterCrop(--val-crop-size). With
--ra-sampler each image is read --ra-reps times per epoch, each repeat with draws of its own,
spread over the ranks as torchvision's RASampler spreads them; --ra-epoch dataset (its default)
keeps that sampler's epoch of floor(N // 256 * 256 / ranks) images per rank, so a schedule in
epochs ports as it is; --ra-epoch repeats reads every repeat (needed below 256 images).

DATA holds one sub-folder per class; --val a folder like it (default: DATA itself, which says
little about generalisation). Every draw is keyed by (--seed, epoch, image, op): two runs with the
same flags see the same batches, with any --workers.
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
from mediapipe.sample import IMAGE_EXTENSIONS

POLICIES = ("ta_wide", "ra", "augmix", "imagenet", "cifar10", "svhn")
POLICY_INTERPOLATIONS = ("bilinear", "nearest")  # the policies' warps, as torchvision's on tensors


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", metavar="DATA", nargs="?", type=Path,
                        help="training images in class sub-folders (default: a generated sample set)")
    parser.add_argument("--val", metavar="DIR", type=Path, help="evaluation images in the same class folders")
    recipe = parser.add_argument_group("torchvision's recipe flags (references/classification/train.py)")
    recipe.add_argument("--auto-augment", choices=POLICIES, default=None, help="auto-augment policy (default: none)")
    recipe.add_argument("--ra-magnitude", type=int, default=9, help="RandAugment's magnitude (default: 9)")
    recipe.add_argument("--augmix-severity", type=int, default=3, help="AugMix's severity (default: 3)")
    recipe.add_argument("--random-erase", type=float, default=0.0, help="RandomErasing's p (default: 0.0)")
    recipe.add_argument("--mixup-alpha", type=float, default=0.0, help="MixUp's alpha, 0 for none (default: 0.0)")
    recipe.add_argument("--cutmix-alpha", type=float, default=0.0, help="CutMix's alpha, 0 for none (default: 0.0)")
    recipe.add_argument("--ra-sampler", action="store_true", help="repeated augmentation (default: off)")
    recipe.add_argument("--ra-reps", type=int, default=3, help="repeats per image with --ra-sampler (default: 3)")
    recipe.add_argument("--train-crop-size", type=int, default=224, help="training crop side (default: 224)")
    recipe.add_argument("--val-resize-size", type=int, default=256, help="evaluation resize side (default: 256)")
    recipe.add_argument("--val-crop-size", type=int, default=224, help="evaluation crop side (default: 224)")
    recipe.add_argument("--hflip-prob", type=float, default=0.5, help="horizontal flip probability (default: 0.5)")
    recipe.add_argument("--interpolation", choices=("bilinear", "bicubic", "nearest"), default="bilinear",
                        help="resampling of the crops, resizes and policies (default: bilinear)")
    recipe.add_argument("--label-smoothing", type=float, default=0.0, help="of the loss (default: 0.0)")
    recipe.add_argument("-b", "--batch-size", type=int, default=32, help="images per batch (default: 32)")
    recipe.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default: 0.1)")
    recipe.add_argument("--epochs", type=int, default=1, help="passes over DATA (default: 1)")
    ours = parser.add_argument_group("this example's")
    ours.add_argument("--ra-epoch", choices=("dataset", "repeats"), default="dataset",
                      help="the repeated epoch: torchvision's length, or every repeat (default: dataset)")
    ours.add_argument("--steps", type=int, default=None, help="stop after this many steps (default: the epochs)")
    ours.add_argument("--workers", type=int, default=2, help="loader worker processes (default: 2)")
    ours.add_argument("--device", default="auto", help='"auto" (CUDA if present), "cpu", "cuda:1"... (default: auto)')
    ours.add_argument("--seed", type=int, default=0, help="seeds the model and every draw (default: 0)")
    args = parser.parse_args(argv)
    for name in ("batch_size", "epochs", "ra_reps", "train_crop_size", "val_resize_size", "val_crop_size", "steps"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} {value}: expected 1 or more")
    if args.auto_augment and args.interpolation not in POLICY_INTERPOLATIONS:
        parser.error(f"--interpolation {args.interpolation} with --auto-augment: the policies warp with "
                     f"{' or '.join(POLICY_INTERPOLATIONS)}, as torchvision's do on tensors")
    for name in ("data", "val"):
        path = getattr(args, name)
        if path is not None and not path.is_dir():
            parser.error(f"{name.upper() if name == 'data' else '--val'} {path}: not a folder")
    return args


# -- the recipe as ops ---------------------------------------------------------------------------
def policy(args: argparse.Namespace) -> list[A.Op]:
    """presets.py's auto-augment step for --auto-augment."""
    name, interpolation = args.auto_augment, args.interpolation
    if name is None:
        return []
    if name == "ta_wide":
        return [A.TrivialAugmentWide(interpolation=interpolation)]
    if name == "ra":
        return [A.RandAugment(magnitude=args.ra_magnitude, interpolation=interpolation)]
    if name == "augmix":
        return [A.AugMix(severity=args.augmix_severity, interpolation=interpolation)]
    return [A.AutoAugment(policy=name, interpolation=interpolation)]


def mixing(args: argparse.Namespace, num_classes: int) -> list[A.Op]:
    """train.py's get_mixup_cutmix: MixUp or CutMix (or both, one chosen per batch)."""
    ops: list[A.Op] = []
    if args.mixup_alpha > 0:
        ops.append(A.MixUp(num_classes=num_classes, alpha=args.mixup_alpha))
    if args.cutmix_alpha > 0:
        ops.append(A.CutMix(num_classes=num_classes, alpha=args.cutmix_alpha))
    return [A.RandomChoice(ops)] if len(ops) > 1 else ops


def train_ops(args: argparse.Namespace, num_classes: int) -> list[A.Op]:
    """ClassificationPresetTrain, then the batch's MixUp or CutMix."""
    ops: list[A.Op] = [A.RandomResizedCrop(args.train_crop_size, interpolation=args.interpolation)]
    if args.hflip_prob > 0:
        ops.append(A.HorizontalFlip(p=args.hflip_prob))
    ops += [*policy(args), A.Normalize()]
    if args.random_erase > 0:
        ops.append(A.RandomErasing(p=args.random_erase))
    return ops + mixing(args, num_classes)


def val_ops(args: argparse.Namespace) -> list[A.Op]:
    """ClassificationPresetEval."""
    return [A.Resize(args.val_resize_size, interpolation=args.interpolation), A.CenterCrop(args.val_crop_size),
            A.Normalize()]


def loaders(args: argparse.Namespace) -> tuple[Any, Any, list[str]]:
    """The training loader (the recipe's ops, the repeated-augmentation sampler) and the evaluation one."""
    source = mp.loaders.folder(args.data, extensions=IMAGE_EXTENSIONS)
    classes = source.classes
    if not classes:
        raise SystemExit(f"{args.data}: no class sub-folders (DATA holds one folder of images per class)")
    decode = {"image": mp.decoders.image()}
    train = mp.Pipeline(source, decode, train_ops(args, len(classes)), batch_size=args.batch_size, seed=args.seed,
                        device=args.device)
    val_source = mp.loaders.folder(args.val or args.data, extensions=IMAGE_EXTENSIONS)
    val = mp.Pipeline(val_source, decode, val_ops(args), batch_size=args.batch_size, seed=args.seed,
                      device=args.device)
    sampling: dict[str, Any] = {}
    if args.ra_sampler:
        try:
            sampling["sampler"] = mp.loaders.RepeatedAugmentationSampler(
                len(source), args.batch_size, repeats=args.ra_reps, epoch_length=args.ra_epoch, seed=args.seed)
        except ValueError as err:
            raise SystemExit(f"--ra-sampler: {err}") from None
    train_loader = train.loader(num_workers=args.workers, **sampling)
    return train_loader, val.loader(num_workers=args.workers, shuffle=False), classes


# -- model and loop -------------------------------------------------------------------------------
def small_cnn(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes),
    )


@torch.no_grad()
def evaluate(model: nn.Module, loader: Any) -> dict[str, float]:
    model.eval()
    loss = correct = seen = 0.0
    for batch in loader:
        logits = model(batch["image"])
        loss += nn.functional.cross_entropy(logits, batch["label"], reduction="sum").item()
        correct += (logits.argmax(1) == batch["label"]).sum().item()
        seen += len(batch["label"])
    model.train()
    return {"loss": loss / seen, "accuracy": correct / seen}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train; returns the losses per step, the evaluation metrics and the training ops' names."""
    args = parse_args(argv)
    if args.data is None:
        from sample_data import sample_images

        args.data = sample_images()
        print(f"training on generated sample images in {args.data}")
    train_loader, val_loader, classes = loaders(args)
    print(train_loader.pipeline)
    if args.ra_sampler:
        print(f"repeated augmentation: each image {args.ra_reps} times ({args.ra_epoch} epoch), "
              f"{len(train_loader)} batches per epoch")
    torch.manual_seed(args.seed)
    model = small_cnn(len(classes)).to(train_loader.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)  # takes MixUp's soft labels too
    losses: list[float] = []
    started = time.perf_counter()
    for epoch in range(args.epochs):
        train_loader.set_epoch(epoch)
        for batch in train_loader:
            loss = criterion(model(batch["image"]), batch["label"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            print(f"epoch {epoch + 1}/{args.epochs}  step {len(losses):5d}  loss {loss.item():.4f}")
            if len(losses) == args.steps:
                break
        if len(losses) == args.steps:
            break
    metrics = evaluate(model, val_loader)
    print(f"{len(losses)} steps in {time.perf_counter() - started:.1f} s; evaluation loss {metrics['loss']:.4f}, "
          f"accuracy {metrics['accuracy']:.1%}")
    return {"losses": losses, "val": metrics, "ops": [type(p.op).__name__ for p in train_loader.plan.placed]}


if __name__ == "__main__":
    try:
        main()
    except mp.MediapipeError as err:  # a file or folder that cannot be read: its name and why
        sys.exit(f"{Path(sys.argv[0]).name}: {err}")
