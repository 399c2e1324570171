"""Train a small image classifier through the mediapipe loader, with evaluation, checkpoints and resume.

    python examples/train_classifier.py                      # on a small generated sample set
    python examples/train_classifier.py ~/data/train --val ~/data/val --epochs 10
    python examples/train_classifier.py --resume             # go on from the last checkpoint
    python examples/train_classifier.py data/train           # on `mediapipe sample-data data`'s images

DATA holds one sub-folder per class. Without --val, every 10th image of each class is held
out for evaluation. Each epoch ends with the validation loss and accuracy and a checkpoint
holding the model, the optimizer and the loader's state; Ctrl-C stops after the current
step and writes one too. --resume continues from it, mid-epoch if it was written mid-epoch:
the batches and losses after it are those the uninterrupted run would have had. The checkpoint
(and the held-out split's lists beside it) go to the system's temporary folder unless
--checkpoint names a file elsewhere, so a run never writes into the folder it is started from.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.sample import IMAGE_EXTENSIONS

# outside the working folder (a checkout's `checkpoints/` is git-ignored too), the same for every run of a user
DEFAULT_CHECKPOINT = Path(tempfile.gettempdir()) / "mediapipe-examples" / "checkpoints" / "classifier.pt"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", metavar="DATA", nargs="?", type=Path,
                        help="training images in class sub-folders (default: a generated sample set)")
    parser.add_argument("--val", metavar="DIR", type=Path, help="validation images in the same class sub-folders "
                        "(default: hold out --val-fraction of DATA)")
    parser.add_argument("--val-fraction", metavar="F", type=float, default=0.1,
                        help="share of each class held out for validation when --val is not given (default: 0.1)")
    parser.add_argument("--epochs", metavar="N", type=int, default=3, help="passes over the training set (default: 3)")
    parser.add_argument("--max-steps", metavar="N", type=int, default=None,
                        help="stop after this many steps in all, with a checkpoint (default: no limit)")
    parser.add_argument("--batch-size", metavar="N", type=int, default=32, help="images per batch (default: 32)")
    parser.add_argument("--size", metavar="PX", type=int, default=64, help="training crop side in pixels (default: 64)")
    parser.add_argument("--lr", metavar="LR", type=float, default=0.05, help="SGD learning rate (default: 0.05)")
    parser.add_argument("--workers", metavar="N", type=int, default=2, help="loader worker processes (default: 2)")
    parser.add_argument("--device", metavar="DEVICE", default="auto", help='"auto" (CUDA if present), "cpu", "cuda:1"... (default: auto)')
    parser.add_argument("--seed", metavar="N", type=int, default=0, help="seeds the model and every augmentation draw (default: 0)")
    parser.add_argument("--checkpoint", metavar="PATH", type=Path, default=DEFAULT_CHECKPOINT,
                        help=f"checkpoint file, written at each epoch's end (default: {DEFAULT_CHECKPOINT})")
    parser.add_argument("--log-every", metavar="N", type=int, default=10, help="print the loss every N steps (default: 10)")
    parser.add_argument("--save-every", metavar="N", type=int, default=0,
                        help="also write the checkpoint every N steps (default: 0, only at epoch ends)")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "size", "workers", "log_every", "save_every", "max_steps"):
        value = getattr(args, name)
        if value is not None and value < (0 if name in ("workers", "save_every") else 1):
            parser.error(f"--{name.replace('_', '-')} {value}: too small")
    if not 0.0 < args.val_fraction < 1.0:
        parser.error(f"--val-fraction {args.val_fraction}: expected a share between 0 and 1")
    for name in ("data", "val"):
        path = getattr(args, name)
        if path is not None and not path.is_dir():
            parser.error(f"{name.upper() if name == 'data' else '--val'} {path}: not a folder")
    if args.resume and not args.checkpoint.is_file():
        parser.error(f"--resume: no checkpoint at {args.checkpoint} (run once without --resume first)")
    return args


# -- data ---------------------------------------------------------------------------------------
def class_folders(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def held_out_split(root: Path, fraction: float, out: Path) -> tuple[Path, Path]:
    """Manifests of DATA's training and validation images: every ``round(1 / fraction)``-th file of
    each class (in name order) is held out, so the split is the same on every run and resume."""
    every = max(2, round(1 / fraction))
    train, val = [], []
    for label, name in enumerate(class_folders(root)):
        files = sorted(p for p in (root / name).iterdir()
                       if p.suffix.lower().lstrip(".") in IMAGE_EXTENSIONS and not p.name.startswith("."))
        for i, path in enumerate(files):
            (val if i % every == 0 else train).append({"path": str(path.resolve()), "label": label})
    if not train or not val:
        raise SystemExit(f"{root}: too few images to hold out a validation set; give --val")
    out.mkdir(parents=True, exist_ok=True)
    paths = out / "train.jsonl", out / "val.jsonl"
    for path, rows in zip(paths, (train, val)):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def pipelines(args: argparse.Namespace) -> tuple[mp.Pipeline, mp.Pipeline, list[str]]:
    """The training pipeline (random crops, flips, colour jitter) and the evaluation one (a centre crop)."""
    classes = class_folders(args.data)
    if not classes:
        raise SystemExit(f"{args.data}: no class sub-folders (DATA holds one folder of images per class)")
    if args.val is not None:
        if class_folders(args.val) != classes:
            raise SystemExit(f"--val {args.val}: its class folders differ from those of {args.data}")
        train_source = mp.loaders.folder(args.data, extensions=IMAGE_EXTENSIONS)
        val_source = mp.loaders.folder(args.val, extensions=IMAGE_EXTENSIONS)
    else:
        train_list, val_list = held_out_split(args.data, args.val_fraction, args.checkpoint.parent / "split")
        train_source, val_source = mp.loaders.manifest(train_list), mp.loaders.manifest(val_list)
    decode = {"image": mp.decoders.image()}
    train = mp.Pipeline(
        source=train_source, decode=decode,
        augment=[A.RandomResizedCrop(args.size, scale=(0.25, 1.0)), A.HorizontalFlip(),
                 A.ColorJitter(brightness=0.2, contrast=0.2), A.Normalize()],
        batch_size=args.batch_size, seed=args.seed, device=args.device)
    val = mp.Pipeline(
        source=val_source, decode=decode,
        augment=[A.Resize(args.size * 8 // 7), A.CenterCrop(args.size), A.Normalize()],
        batch_size=args.batch_size, seed=args.seed, device=args.device)
    return train, val, classes


# -- model --------------------------------------------------------------------------------------
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


def save_checkpoint(path: Path, **state: Any) -> None:
    """Write to a temporary file, then rename: a kill while saving leaves the last checkpoint whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


class StopRequest:
    """The first Ctrl-C asks the loop to stop after the current step (and save); a second one stops at once.

    The handler is installed before the loader forks its workers, so they inherit it and keep
    working through the first Ctrl-C instead of dying in the middle of a batch."""

    def __init__(self) -> None:
        self.requested = False
        self.pid = os.getpid()

    def __enter__(self) -> StopRequest:
        self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if os.getpid() == self.pid:
            print("\nstopping after this step, with a checkpoint (Ctrl-C again to quit at once)", file=sys.stderr)

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self.previous)


# -- training -----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train; returns the history: per step (step, epoch, sample indices, loss), per epoch the
    validation metrics, and whether the run stopped early (Ctrl-C or --max-steps)."""
    args = parse_args(argv)
    if args.data is None:
        from sample_data import sample_images

        args.data = sample_images()
        print(f"training on generated sample images in {args.data} (their classes are arbitrary, so the "
              "accuracy says little; give DATA for a real task)")
    train_pipe, val_pipe, classes = pipelines(args)
    torch.manual_seed(args.seed)
    model = small_cnn(len(classes)).to(train_pipe.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = train_pipe.loader(num_workers=args.workers, shuffle=True, drop_last=True)
    val_loader = val_pipe.loader(num_workers=args.workers, shuffle=False)
    if len(loader) == 0:
        raise SystemExit(f"{args.data}: fewer training images than one batch of {args.batch_size}")
    step = 0
    if args.resume:
        state = torch.load(args.checkpoint, map_location=train_pipe.device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        try:
            loader.load_state_dict(state["loader"])
        except ValueError as err:  # another dataset, batch size or seed than the checkpoint's
            raise SystemExit(f"{args.checkpoint} does not fit this run: {err}") from None
        step = state["step"]
        if loader.epoch >= args.epochs:
            print(f"{args.checkpoint} is at the end of epoch {loader.epoch}: nothing left to do "
                  f"(a larger --epochs trains on)")
            return {"steps": [], "val": [], "stopped": None}
        print(f"resumed from {args.checkpoint}: step {step}, epoch {loader.epoch + 1}, "
              f"batch {loader.sampler.position} of {len(loader)}")

    def checkpoint() -> None:
        save_checkpoint(args.checkpoint, model=model.state_dict(), optimizer=optimizer.state_dict(),
                        loader=loader.state_dict(), step=step, classes=classes)

    # stopped: None (all epochs done), "interrupted" (Ctrl-C) or "max-steps"
    history: dict[str, Any] = {"steps": [], "val": [], "stopped": None}
    started = time.perf_counter()
    with StopRequest() as stop:
        while loader.epoch < args.epochs:
            epoch = loader.epoch
            loader.set_epoch(epoch)  # resumed at this epoch's last step: its pass is empty and its validation runs
            try:
                for batch in loader:
                    loss = nn.functional.cross_entropy(model(batch["image"]), batch["label"])
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    step += 1
                    history["steps"].append((step, epoch, batch["index"].tolist(), loss.item()))
                    if step % args.log_every == 0:
                        print(f"epoch {epoch + 1}/{args.epochs}  step {step:5d}  loss {loss.item():.4f}")
                    if args.save_every and step % args.save_every == 0:
                        checkpoint()
                    if stop.requested or step == args.max_steps:
                        history["stopped"] = "interrupted" if stop.requested else "max-steps"
                        break
            except (KeyboardInterrupt, mp.WorkerError):
                if not stop.requested:  # a worker interrupted by the first Ctrl-C (spawned workers do not
                    raise               # inherit the handler): the last step is whole, save it
                history["stopped"] = "interrupted"
            if history["stopped"]:
                checkpoint()
                print(f"stopped at step {step} with a checkpoint in {args.checkpoint}; continue with --resume")
                break
            metrics = evaluate(model, val_loader)
            history["val"].append(metrics)
            checkpoint()
            print(f"epoch {epoch + 1}/{args.epochs}  validation loss {metrics['loss']:.4f}  "
                  f"accuracy {metrics['accuracy']:.1%}  (checkpoint: {args.checkpoint})")
    elapsed = time.perf_counter() - started
    wait = loader.stats.seconds["wait"]
    share = wait / max(elapsed, 1e-9)
    verdict = "input-bound: more --workers may help" if share > 0.05 else "not input-bound"
    print(f"{len(history['steps'])} steps in {elapsed:.1f} s; waited {wait:.1f} s for input ({share:.0%}, {verdict})")
    return history


if __name__ == "__main__":
    try:
        history = main()
    except mp.MediapipeError as err:  # a file or folder that cannot be read: its name and why
        sys.exit(f"{Path(sys.argv[0]).name}: {err}")
    sys.exit(130 if history["stopped"] == "interrupted" else 0)  # 130: the shell's status for Ctrl-C
