"""Small generated datasets for the examples, made once (into the user cache unless a folder is given).

    python examples/sample_data.py              # make all four now, into <user cache>/mediapipe/examples
    python examples/sample_data.py /tmp/sets    # or into a folder of your choice

Each example makes the set it needs on first use when it is given no DATA; running this first
only moves the wait. For the datasets the README's Python blocks read (data/train, data/hf,
data/train.tfrecord, data/speech, data/coco...), run `mediapipe sample-data data` instead.

They come from the benchmark's generators (`mediapipe.bench.datasets`, `mediapipe.bench.video`,
`mediapipe.bench.audio`): photographic-looking JPEGs in ten class folders, AV1 clips of a slow
pan and zoom in two class folders, speech-like FLAC and Opus clips of 2 to 15 s with a
``manifest.jsonl`` of their durations. Their classes are arbitrary (the pictures do not
differ by class), so a model trained on them shows the pipeline at work, not a task learnt.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mediapipe.bench.datasets import cache_dir


def default_root() -> Path:
    """``<user cache>/mediapipe/examples`` (``$MEDIAPIPE_CACHE_DIR`` moves it)."""
    return cache_dir() / "examples"


def sample_images(root: Path | None = None, count: int = 200) -> Path:
    """A folder of ``count`` JPEGs in class sub-folders ``class00``..``class09``."""
    from mediapipe.bench.datasets import sample_images as make

    return make(Path(root or default_root()), count, seed=0)


def sample_videos(root: Path | None = None, count: int = 8, height: int = 96, seconds: float = 2.0) -> Path:
    """A folder of ``count`` AV1 MP4 clips (30 fps, a key frame every 16 frames) in ``class0``/``class1``."""
    from mediapipe.bench.video_sets import make_sample_videos

    dest = Path(root or default_root()) / f"sample-videos-n{count}-h{height}-t{seconds:g}"
    make_sample_videos(dest, count, seed=0, height=height, seconds=seconds, gop=16)  # keeps files already made
    return dest


def sample_audio(root: Path | None = None, count: int = 24) -> Path:
    """The ``manifest.jsonl`` of ``count`` speech-like 16 kHz clips (``path`` and ``duration`` per line)."""
    from mediapipe.bench.audio import make_sample_audio

    dest = Path(root or default_root()) / f"sample-audio-n{count}"
    make_sample_audio(dest, count, seed=0)  # keeps files already made; writes the manifest last
    return dest / "manifest.jsonl"


def sample_detection(root: Path | None = None, count: int = 64):
    """A COCO-format set of ``count`` photos with 1-8 objects each (`mediapipe.synthetic.detection`):
    ``.annotations`` (the COCO file) and ``.images`` (its folder)."""
    from mediapipe.bench.datasets import sample_detection as make
    from mediapipe.synthetic.detection import dataset_at

    return dataset_at(make(Path(root or default_root()), count, seed=0, progress=False))


SETS = {"images": sample_images, "videos": sample_videos, "audio": sample_audio, "detection": sample_detection}


def main(argv: list[str] | None = None) -> None:
    """Make the sets --only names (all four by default) and print where each one is."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", metavar="DIR", nargs="?", type=Path,
                        help=f"where to make them (default: {default_root()}; $MEDIAPIPE_CACHE_DIR moves the cache)")
    parser.add_argument("--only", choices=sorted(SETS), action="append",
                        help="make only this set (repeatable): images (train_classifier.py), videos "
                             "(train_video_classifier.py), audio (train_asr_features.py), detection (train_detector.py)")
    args = parser.parse_args(argv)
    for name in args.only or SETS:
        made = SETS[name](args.root)
        print(f"{name}: {getattr(made, 'root', made)}")


if __name__ == "__main__":
    main()
