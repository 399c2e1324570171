"""`mediapipe sample-data DIR`: the small datasets the README's Python blocks and the examples read.

Everything is generated here (`mediapipe.synthetic`: photographic-looking JPEGs, speech-like
audio through PyAV, COCO scenes, AV1 clips) and deterministic; nothing is downloaded. A dataset
whose writer is an optional package that is not installed is skipped with a line naming it.
Each dataset is written into a staging folder inside DIR and moved into place whole, so an
interrupted run leaves no half dataset (a killed run's staging folder is removed by the next),
a dataset already in DIR is kept, and a second run on DIR waits for the first.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import shutil
import struct
import sys
import textwrap

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

IMAGE_COUNT = 100  # ten classes of ten: every README block and example gets several batches
IMAGE_CLASSES = 10
SPEECH_RATE = 16000
TRANSCRIPTS = ("hello there", "general kenobi", "you are a bold one", "the quick brown fox",
               "jumps over the lazy dog", "a short utterance", "speech like sounds", "one two three four")
DETECTION_COUNT = 24
VIDEO_COUNT = 8  # two classes of four: the video example's batches of four


@dataclass(frozen=True)
class SampleSet:
    """One dataset: the paths under DIR it writes, how, and the optional package that writes it."""

    name: str  # what --only takes, and the report names
    outputs: tuple[str, ...]  # paths under DIR
    what: str  # one line: what it holds and who reads it
    write: Callable[[Path, Path], None]  # (staging folder, DIR): writes every output under the staging folder
    needs: str | None = None  # the module of the optional package that writes it
    after: tuple[str, ...] = ()  # the sample sets it reads from DIR, made first


# -- images -----------------------------------------------------------------------------------------
def write_images(stage: Path, root: Path) -> None:
    """train/class00..class09/NNNN.jpg: photographic-looking JPEGs of 96-192 x 128-256 pixels."""
    from mediapipe.synthetic import jpeg_bytes, photo_like

    rng = np.random.default_rng(0)
    for i in range(IMAGE_COUNT):
        folder = stage / "train" / f"class{i % IMAGE_CLASSES:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        height, width = int(rng.integers(96, 193)), int(rng.integers(128, 257))
        (folder / f"{i:04d}.jpg").write_bytes(jpeg_bytes(photo_like(height, width, seed=i), quality=90))


def train_images(root: Path) -> tuple[list[tuple[bytes, int]], list[str]]:
    """data/train's (JPEG bytes, label) pairs in the folder source's order, and its class names."""
    from mediapipe.loaders.sources.folder import FolderSource

    source = FolderSource(root / "train")
    pairs = []
    for i in range(len(source)):
        ref = source.ref(i)
        pairs.append((next(iter(ref.blobs.values())).read(), ref.label))
    return pairs, list(source.classes)


def write_huggingface(stage: Path, root: Path) -> None:
    """hf/ (save_to_disk) and hf.parquet: train's images with a ClassLabel and a caption column."""
    import datasets

    images, classes = train_images(root)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=classes),
                                  "caption": datasets.Value("string")})
    columns = {"image": [{"bytes": data, "path": None} for data, _ in images],
               "label": [label for _, label in images],
               "caption": [f"picture {i} of {classes[label]}" for i, (_, label) in enumerate(images)]}
    bars = datasets.utils.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        dataset = datasets.Dataset.from_dict(columns, features=features)
        dataset.save_to_disk(str(stage / "hf"))
        dataset.to_parquet(str(stage / "hf.parquet"))
    finally:
        if not bars:
            datasets.enable_progress_bars()


def write_tfrecord(stage: Path, root: Path) -> None:
    """train.tfrecord: tf.train.Example records with ImageNet's keys (image/encoded, image/class/label)."""
    import tfrecord

    writer = tfrecord.TFRecordWriter(str(stage / "train.tfrecord"))
    try:
        for data, label in train_images(root)[0]:
            writer.write({"image/encoded": (data, "byte"), "image/class/label": (label, "int")})
    finally:
        writer.close()


RECORDIO_MAGIC = 0xCED7230A
IR_HEADER = struct.Struct("<IfQQ")  # im2rec's IRHeader: flag, label, id, id2


def recordio_record(payload: bytes) -> bytes:
    """One record as dmlc's RecordIOWriter writes it: split where the magic number sits at an
    aligned position (the reader puts it back), each part framed and padded to 4 bytes."""
    magic = struct.pack("<I", RECORDIO_MAGIC)
    parts, start = [], 0
    for i in range(0, len(payload) // 4 * 4, 4):
        if payload[i:i + 4] == magic:
            parts.append(payload[start:i])
            start = i + 4
    parts.append(payload[start:])
    out = bytearray()
    for n, part in enumerate(parts):
        flag = 0 if len(parts) == 1 else 1 if n == 0 else 3 if n == len(parts) - 1 else 2
        out += magic + struct.pack("<I", (flag << 29) | len(part)) + part + b"\0" * (-len(part) % 4)
    return bytes(out)


def write_recordio(stage: Path, root: Path) -> None:
    """train.rec and train.idx: MXNet RecordIO in the im2rec layout (IRHeader, then the JPEG)."""
    with open(stage / "train.rec", "wb") as rec, open(stage / "train.idx", "w") as idx:
        for key, (data, label) in enumerate(train_images(root)[0]):
            idx.write(f"{key}\t{rec.tell()}\n")
            rec.write(recordio_record(IR_HEADER.pack(0, float(label), key, 0) + data))


# -- speech -----------------------------------------------------------------------------------------
def utterances() -> Iterator[tuple[str, np.ndarray, str]]:
    """(file name, 16 kHz float32 samples, transcript) of each speech-like utterance, 1 to 3 s long."""
    from mediapipe.synthetic.audio import speech_like

    for i, text in enumerate(TRANSCRIPTS):
        yield f"utt{i}.flac", speech_like(1.0 + 2.0 * i / (len(TRANSCRIPTS) - 1), seed=i), text


def write_speech(stage: Path, root: Path) -> None:
    """speech/uttN.flac and speech/manifest.json, a NeMo manifest (paths relative to its folder)."""
    from mediapipe.synthetic.audio import encode_audio

    folder = stage / "speech"
    folder.mkdir()
    rows = []
    for name, samples, text in utterances():
        encode_audio(folder / name, samples, SPEECH_RATE)
        rows.append({"audio_filepath": name, "duration": len(samples) / SPEECH_RATE, "text": text})
    (folder / "manifest.json").write_text("".join(json.dumps(row) + "\n" for row in rows))


def write_lhotse(stage: Path, root: Path) -> None:
    """speech/cuts.jsonl.gz: a Lhotse CutSet of the same utterances, one supervision each."""
    import lhotse

    recordings, supervisions = [], []
    for n, row in enumerate(json.loads(line) for line in (root / "speech" / "manifest.json").read_text().splitlines()):
        name = row["audio_filepath"]
        recording = lhotse.Recording.from_file(root / "speech" / name, recording_id=Path(name).stem)
        sources = [dataclasses.replace(s, source=name) for s in recording.sources]  # relative to the manifest
        recordings.append(dataclasses.replace(recording, sources=sources))
        supervisions.append(lhotse.SupervisionSegment(f"s{n}", recording.id, 0.0, recording.duration,
                                                      channel=0, text=row["text"]))
    cuts = lhotse.CutSet.from_manifests(recordings=lhotse.RecordingSet.from_recordings(recordings),
                                        supervisions=lhotse.SupervisionSet.from_segments(supervisions))
    (stage / "speech").mkdir()
    cuts.to_file(stage / "speech" / "cuts.jsonl.gz")


# -- detection and video ----------------------------------------------------------------------------
def write_detection(stage: Path, root: Path) -> None:
    """coco/annotations.json with coco/images/ and YOLO txt labels in coco/labels/."""
    from mediapipe.synthetic.detection import write_detection_dataset

    write_detection_dataset(stage / "coco", count=DETECTION_COUNT, seed=0, yolo=True)


def write_videos(stage: Path, root: Path) -> None:
    """videos/class0, videos/class1: AV1 MP4 clips of 1.5 s, 170x96 at 30 fps, a key frame every 16."""
    from mediapipe.synthetic.video import render_frames, write_video

    for i in range(VIDEO_COUNT):
        folder = stage / "videos" / f"class{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        write_video(folder / f"clip{i:02d}.mp4", render_frames(96, 170, 45, seed=i), fps=30, gop=16)


SAMPLE_SETS = (
    SampleSet("train", ("train",), f"{IMAGE_COUNT} JPEG photos in {IMAGE_CLASSES} class folders: "
              "mp.loaders.folder, examples/train_classifier.py", write_images),
    SampleSet("hf", ("hf", "hf.parquet"), "the same images as a Hugging Face save_to_disk folder and a Parquet "
              "file (image, ClassLabel label, caption): mp.loaders.huggingface, mp.loaders.parquet",
              write_huggingface, needs="datasets", after=("train",)),
    SampleSet("train.tfrecord", ("train.tfrecord",), "the same images as tf.train.Example records: "
              "mp.loaders.tfrecord", write_tfrecord, needs="tfrecord", after=("train",)),
    SampleSet("train.rec", ("train.rec", "train.idx"), "the same images as MXNet RecordIO (.rec + .idx): "
              "mp.loaders.recordio", write_recordio, after=("train",)),
    SampleSet("speech", ("speech",), f"{len(TRANSCRIPTS)} speech-like FLAC utterances (1-3 s, 16 kHz) with a NeMo "
              "manifest.json: mp.loaders.nemo, examples/train_asr_features.py", write_speech),
    SampleSet("speech/cuts.jsonl.gz", ("speech/cuts.jsonl.gz",), "the same utterances as Lhotse cuts: "
              "mp.loaders.lhotse", write_lhotse, needs="lhotse", after=("speech",)),
    SampleSet("coco", ("coco",), f"{DETECTION_COUNT} photos with objects: COCO annotations.json, images/ and YOLO "
              "labels/: mp.loaders.coco, mp.loaders.yolo, examples/train_detector.py", write_detection),
    SampleSet("videos", ("videos",), f"{VIDEO_COUNT} AV1 clips in two class folders: "
              "examples/train_video_classifier.py", write_videos),
)
BY_NAME = {sample.name: sample for sample in SAMPLE_SETS}
INSTALL = {"datasets": "pip install datasets", "tfrecord": "pip install tfrecord", "lhotse": "pip install lhotse"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter  # the epilog's table keeps its lines
    p.description = textwrap.fill(
        "Write the small datasets that the README's Python blocks and the examples read, generated here "
        "(photographic-looking JPEGs, speech-like audio, COCO scenes, AV1 clips): nothing is downloaded. Run "
        "`mediapipe sample-data data` in the folder you run the README's blocks from; a dataset already in DIR "
        "is kept.", width=88)
    p.epilog = "datasets (--only takes these names):\n" + "\n".join(
        f"  {s.name:<21} {s.what}" + (f"\n  {'':<21} (written by the optional `{s.needs}` package: "
                                      f"{INSTALL[s.needs]}; skipped without it)" if s.needs else "")
        for s in SAMPLE_SETS)
    p.add_argument("dir", metavar="DIR", type=Path, help="the folder to write them into (made if missing)")
    p.add_argument("--only", metavar="NAMES", default=None,
                   help="comma-separated names of the datasets to write (with those they are made from)")


def run(args: argparse.Namespace) -> int:
    try:
        wanted = chosen(args.only)
    except ValueError as err:
        print(f"mediapipe sample-data: error: {err}", file=sys.stderr)
        return 2
    try:
        args.dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # DIR is a file, under a file, or not writable
        print(f"mediapipe sample-data: error: cannot make the folder {args.dir}: {err.strerror or err}",
              file=sys.stderr)
        return 2
    return write_sample_data(args.dir, wanted)


def chosen(only: str | None) -> list[SampleSet]:
    """The sample sets --only names, with those they read, in the order they are made."""
    if only is None:
        return list(SAMPLE_SETS)
    names = [n.strip() for n in only.split(",") if n.strip()]
    if not names:
        raise ValueError(f"--only {only!r} names no dataset (the names are {', '.join(BY_NAME)})")
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"--only {','.join(unknown)}: no such dataset (the names are {', '.join(BY_NAME)})")
    needed: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name not in needed:
            needed.add(name)
            pending.extend(BY_NAME[name].after)
    return [s for s in SAMPLE_SETS if s.name in needed]


def write_sample_data(root: Path, samples: list[SampleSet]) -> int:
    """Write each sample set into ``root`` (keeping those already there); 1 if one failed, else 0."""
    root.mkdir(parents=True, exist_ok=True)
    lock = os.open(root, os.O_RDONLY)  # the folder itself is the lock: nothing is left in it
    try:
        take_turn(lock, root)
        remove_stale_stages(root)
        return write_locked(root, samples)
    finally:
        os.close(lock)


STAGE_PREFIX = ".sample-data-"


def take_turn(lock: int, root: Path) -> None:
    """Wait for another `sample-data` run on ``root`` to end: two runs would replace each other's folders."""
    if fcntl is None:  # no flock (Windows): one run at a time is the user's to keep
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"waiting for another `mediapipe sample-data` run writing into {root}", file=sys.stderr, flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)


def remove_stale_stages(root: Path) -> None:
    """Remove the staging folders of runs that were killed (their process is gone)."""
    for stage in root.glob(f"{STAGE_PREFIX}*"):
        pid = stage.name[len(STAGE_PREFIX):]
        if stage.is_dir() and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(stage, ignore_errors=True)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's, or cannot tell: keep its folder
    return True


def write_locked(root: Path, samples: list[SampleSet]) -> int:
    """`write_sample_data` once this run holds ``root``'s lock."""
    stage = root / f"{STAGE_PREFIX}{os.getpid()}"
    failed: list[str] = []
    try:
        for sample in samples:
            missing = [name for name in sample.after if name in failed]
            if missing:
                failed.append(sample.name)
                print(f"skipped {sample.name}: it is made from {', '.join(missing)}, which failed", file=sys.stderr)
                continue
            try:
                print(write_one(sample, root, stage), flush=True)
            except SampleSetFailed as err:
                failed.append(sample.name)
                print(f"FAILED {err}", file=sys.stderr)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if failed:
        return 1
    print(f"the sample data is in {root}: the README's blocks read it as data/... from the folder that holds "
          + ("it" if root.name == "data" else "it under the name data"))
    return 0


class SampleSetFailed(Exception):
    """A writer's failure, named by its sample set."""


def write_one(sample: SampleSet, root: Path, stage: Path) -> str:
    """Write one sample set (or keep or skip it); the line that says which."""
    if all((root / out).exists() for out in sample.outputs):
        return f"kept {sample.name} (already in {root})"
    if sample.needs is not None:
        try:
            importlib.import_module(sample.needs)
        except ImportError:
            return (f"skipped {sample.name}: the `{sample.needs}` package writes it and is not installed "
                    f"({INSTALL[sample.needs]})")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    try:
        sample.write(stage, root)
    except Exception as err:  # noqa: BLE001  reported with its set's name; the others are still made
        raise SampleSetFailed(f"{sample.name}: {type(err).__name__}: {err}") from err
    for out in sample.outputs:
        move_into_place(stage / out, root / out)
    size = sum(tree_bytes(root / out) for out in sample.outputs)
    return f"wrote {', '.join(sample.outputs)} ({size / 1e6:.1f} MB)" if size >= 1e5 else (
        f"wrote {', '.join(sample.outputs)} ({size / 1e3:.0f} kB)")


def move_into_place(made: Path, dest: Path) -> None:
    """Replace ``dest`` (a file or a folder, perhaps left half-made) by ``made``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    elif dest.exists() or dest.is_symlink():
        dest.unlink()
    os.replace(made, dest)


def tree_bytes(path: Path) -> int:
    """The bytes of a file, or of every file under a folder."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
