"""The bench's second short-clip set: AV1 from the encoders other people use, through FFmpeg's
command line (the ``imageio-ffmpeg`` package's binary): libaom, rav1e and libsvtav1 at its
defaults, with key frames every 24, 48-60 or 250 frames. libaom and rav1e make every frame a
reference and chain each group of frames to the last, so a random clip needs most frames back
to its key frame: the case the project's own encodes (`make_varied_videos`) do not show.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.bench.video_sets import Progress, write_set
from mediapipe.synthetic.video import render_frames

HEIGHTS = (240, 360, 480, 720)
SUFFIXES = (".mp4", ".mkv", ".webm", ".ivf")
ENCODERS: dict[str, list[str]] = {  # FFmpeg arguments per encoder; the GOP is added per file
    "aom": ["-c:v", "libaom-av1", "-cpu-used", "8", "-row-mt", "1", "-crf", "35", "-b:v", "0"],
    "rav1e": ["-c:v", "librav1e", "-speed", "10"],
    "svt": ["-c:v", "libsvtav1"],  # FFmpeg's defaults: preset 8, 32-frame mini-GOPs
}


def ffmpeg_binary() -> str:
    """imageio-ffmpeg's FFmpeg (it has libaom, rav1e and libsvtav1), or why it is missing."""
    try:
        import imageio_ffmpeg
    except ImportError as err:
        raise RuntimeError("not available: this set is encoded by imageio-ffmpeg's FFmpeg "
                           "(pip install imageio-ffmpeg)") from err
    return imageio_ffmpeg.get_ffmpeg_exe()


def encoder_plan(count: int, seed: int) -> list[dict[str, Any]]:
    """What each file is: encoder, key-frame interval (24, 48-60 or 250), frames (48-120), height
    (240p-720p, one in four portrait), container and rate; deterministic for a seed."""
    rng = np.random.default_rng([seed, 27])
    names = list(ENCODERS)
    plan = []
    for i in range(count):
        height = HEIGHTS[i % len(HEIGHTS)]
        width = int(round(height * 16 / 9 / 2)) * 2
        if i % 4 == 1:
            height, width = width, height  # portrait, as phone video
        gop = (24, int(rng.integers(48, 61)), 250)[(i // len(names)) % 3]
        plan.append({"encoder": names[i % len(names)], "gop": gop, "frames": int(rng.integers(48, 121)),
                     "height": height, "width": width, "suffix": SUFFIXES[(i // 2) % len(SUFFIXES)],
                     "fps": int(rng.choice([24, 25, 30]))})
    return plan


def make_encoder_videos(dest: Path, count: int, seed: int, progress: Progress | None = None, **_: Any) -> list[Path]:
    """``count`` short AV1 files of `encoder_plan`, rendered by `render_frames` and encoded by
    FFmpeg's command line, in two class folders."""
    binary = ffmpeg_binary()

    def writer(i: int, item: dict[str, Any]) -> Callable[[Path], Any]:
        return lambda tmp: _encode(binary, tmp, item, seed * 100_000 + 50_000 + i)

    files = [(f"{item['encoder']}{i:04d}_g{item['gop']}_{item['height']}p{item['suffix']}", writer(i, item))
             for i, item in enumerate(encoder_plan(count, seed))]
    return write_set(dest, files, progress)


def _encode(binary: str, path: Path, item: dict[str, Any], seed: int) -> None:
    """Encode ``item``'s rendered frames to ``path``, streamed to FFmpeg one frame at a time."""
    command = [binary, "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
               "-s", f"{item['width']}x{item['height']}", "-r", str(item["fps"]), "-i", "-",
               *ENCODERS[item["encoder"]], "-g", str(item["gop"]), "-pix_fmt", "yuv420p", "-an",
               *(["-f", "ivf"] if path.suffix == ".ivf" else []), str(path)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env={**os.environ, "SVT_LOG": "1"}) as proc:  # SVT: errors only
        try:
            for frame in render_frames(item["height"], item["width"], item["frames"], seed):
                proc.stdin.write(np.ascontiguousarray(frame).tobytes())
            proc.stdin.close()
        except BrokenPipeError:
            pass  # FFmpeg stopped: its error follows
        error = proc.stderr.read().decode(errors="replace")
    if proc.returncode != 0:
        path.unlink(missing_ok=True)
        raise RuntimeError(f"FFmpeg could not encode {path.name}: {error[-300:]}")
