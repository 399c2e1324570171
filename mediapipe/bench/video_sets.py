"""The bench's own AV1 sample sets, drawn by `mediapipe.synthetic.video` and encoded with PyAV's
libsvtav1: long clips at one size (``sample-video``, ``sample-video-gop16``) and short varied
clips (``sample-video-varied``); `write_set` lays out any such set, the FFmpeg-encoded one too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.synthetic.video import render_frames, write_video

Progress = Callable[[int, int], Any]


def write_set(dest: Path, files: list[tuple[str, Callable[[Path], Any]]], progress: Progress | None = None) -> list[Path]:
    """Write ``files`` ((name, writer) pairs) into two class folders, file i in ``class{i % 2}``:
    each writer writes its file under a temporary name, renamed when it returns, so a file is
    whole or absent; a file already there is kept."""
    dest = Path(dest)
    paths = []
    for i, (name, write) in enumerate(files):
        folder = dest / f"class{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        if not path.exists():
            tmp = path.with_name(path.stem + ".tmp" + path.suffix)
            write(tmp)
            tmp.rename(path)
        paths.append(path)
        if progress is not None:
            progress(i + 1, len(files))
    return paths


def make_sample_videos(dest: Path, count: int, seed: int, height: int = 480, seconds: float = 10.0,
                       progress: Progress | None = None, gop: int = 60) -> list[Path]:
    """``count`` AV1 MP4 files (libsvtav1, 30 fps, a key frame every ``gop`` frames: 2 s by
    default, as camera and web video have; 16 as ``mediapipe convert --keyframe-interval 16``
    writes) of ``seconds`` each, 16:9 at ``height`` lines, in two class folders; deterministic
    for a seed."""
    if gop < 1:
        raise ValueError(f"make_sample_videos(gop={gop}): expected >= 1")
    width = int(round(height * 16 / 9 / 2)) * 2
    fps = 30

    def writer(i: int) -> Callable[[Path], Any]:
        return lambda tmp: write_video(tmp, render_frames(height, width, int(seconds * fps), seed * 100_000 + i),
                                       fps=fps, gop=gop, matrix="bt709" if height >= 720 else "bt601")

    return write_set(dest, [(f"video{i:04d}_{height}p.mp4", writer(i)) for i in range(count)], progress)


VARIED_HEIGHTS = (240, 360, 480, 720)
VARIED_ASPECTS = (16 / 9, 16 / 9, 4 / 3, 9 / 16)  # widths by height; one in four is portrait (phone video)
VARIED_SUFFIXES = (".mp4", ".mkv", ".webm", ".ivf")
VARIED_PRESETS = (12, 10, 8)  # libsvtav1 presets; 8 as FFmpeg's command line encodes by default
HARD_PRESET = 8  # ... with 32-frame mini-GOPs (hierarchical-levels=5): longer reference chains per clip


def varied_plan(count: int, seed: int) -> list[dict[str, Any]]:
    """What each file of the varied short-clip set is: frames (48-120), height (240p-720p),
    aspect, container, key-frame interval (48-60), rate and encoder preset; deterministic for a seed."""
    rng = np.random.default_rng([seed, 15])
    plan = []
    for i in range(count):
        height = int(VARIED_HEIGHTS[i % len(VARIED_HEIGHTS)])
        aspect = float(VARIED_ASPECTS[int(rng.integers(len(VARIED_ASPECTS)))])
        width = int(round(height * aspect / 2)) * 2
        plan.append({"frames": int(rng.integers(48, 121)), "height": height, "width": width,
                     "suffix": VARIED_SUFFIXES[(i // len(VARIED_HEIGHTS)) % len(VARIED_SUFFIXES)],
                     "gop": int(rng.integers(48, 61)), "fps": int(rng.choice([24, 25, 30])),
                     "preset": int(rng.choice(VARIED_PRESETS))})
    return plan


def make_varied_videos(dest: Path, count: int, seed: int, progress: Progress | None = None, **_: Any) -> list[Path]:
    """``count`` short AV1 files as real video datasets have them: 48-120 frames, 240p to 720p
    (landscape and portrait), MP4, Matroska, WebM and IVF, a key frame every 48-60 frames, 24/25/30
    fps, three encoder presets (one of them FFmpeg's command-line default, whose 32-frame
    mini-GOPs give a random clip a longer chain of reference frames to decode: the hard case);
    in two class folders."""

    def writer(i: int, item: dict[str, Any]) -> Callable[[Path], Any]:
        hard = {"svtav1-params": f"keyint={item['gop']}:scd=0:lp=2:hierarchical-levels=5"}
        return lambda tmp: write_video(
            tmp, render_frames(item["height"], item["width"], item["frames"], seed * 100_000 + i),
            fps=item["fps"], gop=item["gop"], preset=item["preset"], matrix="bt709" if item["height"] >= 720 else "bt601",
            options=hard if item["preset"] == HARD_PRESET else None)

    files = [(f"clip{i:04d}_{item['height']}p{item['suffix']}", writer(i, item))
             for i, item in enumerate(varied_plan(count, seed))]
    return write_set(dest, files, progress)
