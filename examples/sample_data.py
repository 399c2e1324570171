"""Small generated datasets for the examples, made once (into the user cache unless a folder is given).

They come from the benchmark's generators (`mediapipe.bench.datasets`, `mediapipe.bench.video`,
`mediapipe.bench.audio`): photographic-looking JPEGs in ten class folders, AV1 clips of a slow
pan and zoom in two class folders, speech-like FLAC and Opus clips of 2 to 15 s with a
``manifest.jsonl`` of their durations. Their classes are arbitrary (the pictures do not
differ by class), so a model trained on them shows the pipeline at work, not a task learnt.
"""

from __future__ import annotations

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
    from mediapipe.bench.video import make_sample_videos

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
