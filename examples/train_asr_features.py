"""Speech features through the mediapipe loader: log-mel, SpecAugment, duration bucketing, lengths.

    python examples/train_asr_features.py                       # on generated speech-like clips
    python examples/train_asr_features.py ~/speech/train.jsonl --batch-seconds 200

DATA is a folder of audio files (WAV, FLAC, Opus, MP3...) or a JSON-lines manifest with a
``path`` and, ideally, a ``duration`` in seconds per line (without it, each file's header is
read once for its duration). The generated sample clips have no transcripts, so the small
model here learns to fill in what SpecAugment masked (a masked-reconstruction objective);
for speech recognition, put your acoustic model and a CTC loss where the loss is.

Batches come from `DurationBucketSampler`: clips of similar duration share a batch, and each
batch holds at most --batch-seconds of audio, so short clips make big batches and long ones
small batches, for about the same work per step and little padding.

What each batch holds (B clips; T frames of 10 ms, the longest clip's):
  audio           float32 (B, 1, n_mels, T): log-mel features of the clean audio. Clips are
                  zero-padded to the longest in the batch.
  audio_lengths   int64 (B,): how much of each row is real. It is in samples while the field is
                  a waveform (the decoder's output) and in frames once a feature op has run:
                  each op that changes the time axis rewrites it. Frames at or past a row's
                  length are padding: leave them out of the loss (see `masked_mse`).
  masked, masked_lengths: the same features after SpecAugment (``out="masked"`` writes a new
                  field and keeps ``audio``).
  valid           bool (B,): False for a row that holds no real clip, such as a file that
                  failed to decode under on_error="replace" (its row is zeros, length 0), or
                  the filler a sampler adds when a rank has no sample left. Weight the loss by it.
  index           int64 (B,): each clip's sample index in the source.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.loaders import DurationBucketSampler, source_durations
from mediapipe.sample import AUDIO_EXTENSIONS

SAMPLE_RATE = 16000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", metavar="DATA", nargs="?", type=Path,
                        help="a folder of audio files or a .jsonl manifest (default: generated speech-like clips)")
    parser.add_argument("--steps", metavar="N", type=int, default=10, help="training steps (default: 10)")
    parser.add_argument("--batch-seconds", metavar="S", type=float, default=40.0,
                        help="seconds of audio per batch, at most (default: 40)")
    parser.add_argument("--buckets", metavar="N", type=int, default=4, help="duration buckets (default: 4)")
    parser.add_argument("--n-mels", metavar="N", type=int, default=40, help="mel bands (default: 40)")
    parser.add_argument("--lr", metavar="LR", type=float, default=1e-3, help="Adam learning rate (default: 0.001)")
    parser.add_argument("--workers", metavar="N", type=int, default=2, help="loader worker processes (default: 2)")
    parser.add_argument("--device", metavar="DEVICE", default="auto", help='"auto" (CUDA if present), "cpu", "cuda:1"... (default: auto)')
    parser.add_argument("--seed", metavar="N", type=int, default=0, help="seeds the model and every random draw (default: 0)")
    args = parser.parse_args(argv)
    for name in ("steps", "buckets", "n_mels"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: expected >= 1")
    if args.batch_seconds <= 0:
        parser.error(f"--batch-seconds {args.batch_seconds}: expected positive seconds")
    if args.workers < 0:
        parser.error(f"--workers {args.workers}: expected >= 0")
    if args.data is not None and not (args.data.is_dir() or (args.data.is_file() and args.data.suffix == ".jsonl")):
        parser.error(f"DATA {args.data}: not a folder or a .jsonl manifest")
    return args


def speech_pipeline(source: mp.loaders.Source, args: argparse.Namespace) -> mp.Pipeline:
    return mp.Pipeline(
        source=source,
        decode={"audio": mp.decoders.audio(sample_rate=SAMPLE_RATE, mono=True)},  # float32 (1, samples)
        augment=[
            A.Gain(db=(-6.0, 6.0)),                                   # audio_lengths: samples
            A.LogMelSpectrogram(n_mels=args.n_mels, n_fft=400, hop_length=160),  # 25 ms windows, 10 ms hop
            A.SpecAugment(freq_width=8, time_width=20, out="masked"),  # audio_lengths: frames from here on
        ],
        seed=args.seed, device=args.device, on_error="replace",
    )


def masked_mse(prediction: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor,
               valid: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the real frames of the real rows: padding and failed clips count for nothing."""
    frames = torch.arange(target.shape[-1], device=target.device)
    keep = (frames[None, :] < lengths[:, None]) & valid[:, None]  # (B, T)
    error = ((prediction - target) ** 2).mean(dim=1)  # over mel bands: (B, T)
    return (error * keep).sum() / keep.sum().clamp(min=1)


def small_model(n_mels: int) -> nn.Module:
    """A frame-wise convolutional model over (B, n_mels, T)."""
    return nn.Sequential(
        nn.Conv1d(n_mels, 64, kernel_size=5, padding=2), nn.ReLU(),
        nn.Conv1d(64, 64, kernel_size=5, padding=2), nn.ReLU(),
        nn.Conv1d(64, n_mels, kernel_size=5, padding=2),
    )


def main(argv: list[str] | None = None) -> list[float]:
    """Train for --steps steps; returns the losses."""
    args = parse_args(argv)
    if args.data is None:
        from sample_data import sample_audio

        args.data = sample_audio()
        print(f"training on generated speech-like clips listed in {args.data}")
    if args.data.is_file():
        source = mp.loaders.manifest(args.data)
    else:
        source = mp.loaders.folder(args.data, extensions=AUDIO_EXTENSIONS)  # the audio files only
    durations = source_durations(source)  # a manifest's "duration", else each file's header, read once
    sampler = DurationBucketSampler(durations, max_duration=args.batch_seconds, num_buckets=args.buckets,
                                    seed=args.seed)
    print(f"{len(durations)} clips, {durations.sum():.0f} s of audio, in {len(sampler)} batches of at most "
          f"{args.batch_seconds:g} s; padding is {sampler.padding_fraction():.0%} of the padded batches")
    pipe = speech_pipeline(source, args)
    loader = pipe.loader(sampler=sampler, num_workers=args.workers)
    torch.manual_seed(args.seed)
    model = small_model(args.n_mels).to(pipe.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    losses: list[float] = []
    started = time.perf_counter()
    while len(losses) < args.steps:
        for batch in loader:  # the epoch advances by itself after a full pass
            clean, masked = batch["audio"][:, 0] / 20, batch["masked"][:, 0] / 20  # (B, n_mels, T), dB / 20
            loss = masked_mse(model(masked), clean, batch["audio_lengths"], batch["valid"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            frames = batch["audio_lengths"]
            print(f"step {len(losses):4d}  loss {losses[-1]:.4f}  batch of {len(frames)} clips, "
                  f"{int(frames.min())}-{int(frames.max())} frames")
            if len(losses) == args.steps:
                break
    elapsed = time.perf_counter() - started
    print(f"{args.steps} steps in {elapsed:.1f} s; waited {loader.stats.seconds['wait']:.1f} s for input")
    return losses


if __name__ == "__main__":
    try:
        main()
    except mp.MediapipeError as err:  # a file or folder that cannot be read: its name and why
        sys.exit(f"{Path(sys.argv[0]).name}: {err}")
