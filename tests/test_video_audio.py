"""Audio of a video aligned to each clip: ``decode={"video": video(...), "audio":
audio(from_field="video", sample_rate=16000)}`` gives, per clip, the samples from its first
frame's time to its last frame's end. Checked on generated files whose audio plays a distinct
tone during each frame: the tone sequence expected for the decoded frames (read from the
counter stamped in each frame) is found in the decoded audio within a millisecond, in MP4
(AAC), Matroska (FLAC) and WebM (Opus), with the audio track starting with the video or later."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe.errors import PipelineError
from mediapipe.synthetic.video import read_counter, render_frames, write_video

FPS, RATE, OUT = 24, 48000, 16000
H, W = 48, 64


def tone_of(frame: int) -> float:
    return 400.0 + 173.0 * (frame % 20)


def tones(frames: int, t0: float, t1: float, rate: int) -> np.ndarray:
    """Samples at ``rate`` over [t0, t1) s of the file's timeline: frame i's tone while frame i
    shows (phase from the frame's start), silence after the last frame."""
    t = t0 + np.arange(int(round((t1 - t0) * rate))) / rate
    index = np.floor(t * FPS + 1e-9).astype(int)
    out = 0.5 * np.sin(2 * np.pi * np.vectorize(tone_of)(index) * (t - index / FPS))
    out[(index >= frames) | (t < 0)] = 0.0
    return out.astype(np.float32)


def write(path: Path, frames: int, audio_start: float = 0.0, audio_end: float | None = None) -> Path:
    end = frames / FPS if audio_end is None else audio_end
    samples = tones(frames, audio_start, end, RATE)[None]
    return write_video(path, render_frames(H, W, frames, seed=5), fps=FPS, gop=12, crf=30,
                       audio=(samples, RATE, audio_start))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("av")
    (root / "a").mkdir()
    for suffix in ("mp4", "mkv", "webm"):
        write(root / "a" / f"with.{suffix}", 60)
        write(root / "a" / f"late.{suffix}", 60, audio_start=0.5)
    write_video(root / "a" / "silent.ivf", render_frames(H, W, 40, seed=6), fps=FPS, gop=12)  # no audio track
    write(root / "a" / "short.mkv", 60, audio_end=1.5)  # the track ends half a second before the video
    return root


def ffmpeg_timeline(path: Path) -> np.ndarray:
    """FFmpeg's own decode of the file's audio placed on the file's timeline (silence before a
    late track: ``aresample=async=1:first_pts=0``), mono, 16 kHz: the independent oracle."""
    import subprocess

    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    raw = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", str(path), "-map", "0:a",
                          "-af", "aresample=async=1:first_pts=0", "-ac", "1", "-ar", str(OUT), "-f", "f32le", "-"],
                         capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.float32)


def lag_samples(actual: np.ndarray, expected: np.ndarray, search: int = 100) -> tuple[int, float]:
    """The shift of ``actual`` against ``expected`` (samples) with the best correlation, and that
    correlation coefficient."""
    best, score = 0, -1.0
    n = min(len(actual), len(expected)) - 2 * search
    for lag in range(-search, search + 1):
        a = actual[search + lag : search + lag + n]
        e = expected[search : search + n]
        c = float(np.dot(a, e) / (np.linalg.norm(a) * np.linalg.norm(e) + 1e-12))
        if c > score:
            best, score = lag, c
    return best, score


def clip_frames(video: torch.Tensor) -> list[int]:
    """The frame numbers stamped in an RGB clip (T, 3, H, W)."""
    luma = 0.299 * video[:, 0].float() + 0.587 * video[:, 1].float() + 0.114 * video[:, 2].float()
    return [read_counter(f) for f in luma.numpy()]


def pipeline(root: Path, **video) -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.folder(root), {
        "video": mp.decoders.video(clip_len=8, stride=2, **video),
        "audio": mp.decoders.audio(from_field="video", sample_rate=OUT, mono=True),
    }, [], batch_size=1, seed=11, device="cpu")


def test_each_clip_gets_the_audio_of_its_frames_within_a_millisecond(folder):
    pipe = pipeline(folder)
    oracles: dict[str, np.ndarray] = {}
    checked = set()
    for epoch in range(4):
        loader = pipe.loader(num_workers=0, shuffle=False)
        loader.set_epoch(epoch)
        for batch in loader:
            path = Path(pipe.source.ref(int(batch["index"][0])).blob("video").path)
            frames = clip_frames(batch["video"][0])
            assert np.all(np.diff(frames) == 2), (path.name, frames)
            start, end = frames[0] / FPS, (frames[-1] + 1) / FPS
            length, got = round((end - start) * OUT), int(batch["audio_lengths"][0])
            if path.name == "silent.ivf":  # no audio track: flagged, no samples
                assert not bool(batch["audio_present"][0]) and got == 0
                continue
            assert bool(batch["audio_present"][0])
            audio = batch["audio"][0, 0, :got].numpy()
            if path.name == "short.mkv":  # the track ends at 1.5 s: fewer samples, up to its end
                assert abs(got - min(length, max(0, round((1.5 - start) * OUT)))) <= OUT // 1000, (got, start)
            else:
                # the track may end a fraction of a millisecond before the last frame does
                assert got == length or (frames[-1] >= 58 and length - OUT // 1000 <= got < length), (path.name, got)
            if got < 400:
                continue
            # against FFmpeg's placement of the same track: within a millisecond (16 samples)
            oracle = oracles.setdefault(path.name, ffmpeg_timeline(path))
            first = round(start * OUT)
            lag, score = lag_samples(audio, oracle[first : first + got])
            assert abs(lag) <= OUT // 1000 and score > 0.95, (path.name, frames[0], lag, score)
            # and the tones are those of the decoded frames (the frame identity, not only a shift)
            expected = tones(60, start, start + got / OUT, OUT)
            expected[: max(0, round(((0.5 if path.name.startswith("late") else 0.0) - start) * OUT))] = 0.0
            if np.abs(expected).max() > 0:
                lag, score = lag_samples(audio, expected)
                assert abs(lag) <= 2 * OUT // 1000 and score > 0.9, (path.name, frames[0], lag, score)
            if path.name.startswith("late") and start < 0.45:  # before the track: silence
                assert np.abs(audio[: round((0.45 - start) * OUT)]).max() < 1e-3, path.name
            checked.add(path.name)
    assert {"with.mp4", "with.mkv", "with.webm", "late.mp4", "late.mkv", "late.webm"} <= checked, checked


def test_several_clips_per_video_stack_their_audio(folder, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "with.mkv").symlink_to(folder / "a" / "with.mkv")
    pipe = pipeline(tmp_path, clips_per_video=3, sampling="uniform")
    batch = next(iter(pipe.loader(num_workers=0, shuffle=False)))
    assert batch["video"].shape[:3] == (1, 3, 8) and batch["audio"].shape[:3] == (1, 3, 1)
    assert batch["audio"].shape[-1] == round(15 / FPS * OUT)
    for clip in range(3):
        start = clip_frames(batch["video"][0, clip])[0] / FPS
        lag, score = lag_samples(batch["audio"][0, clip, 0].numpy(), tones(60, start, start + 15 / FPS, OUT))
        assert abs(lag) <= OUT // 1000 and score > 0.9, (clip, lag, score)


def test_from_field_is_checked_when_the_pipeline_is_built(folder):
    with pytest.raises(PipelineError, match="not a decoded field"):
        mp.Pipeline(mp.loaders.folder(folder), {"video": mp.decoders.video(),
                                                "audio": mp.decoders.audio(from_field="clip")}, [], batch_size=1)
    with pytest.raises(ValueError, match="from_field"):
        mp.decoders.audio(from_field="video", random_crop=1.0)


def test_a_file_without_audio_is_flagged_not_an_error(folder):
    from mediapipe.decoders.base import DecodeHint, TimeSpans
    from mediapipe.errors import DecodeError
    from mediapipe.rng import SampleRNG
    from mediapipe.sample import Blob

    path = folder / "a" / "silent.ivf"
    blob = Blob(str(path), path=str(path))
    dec = mp.decoders.audio(from_field="video", sample_rate=OUT).create()
    out = dec.decode(blob, DecodeHint(span=TimeSpans(((0.0, 0.5),))), SampleRNG(0, 0, 0, 0), {})
    assert out.value.shape == (2, 0) and out.fields == {"present": False}
    with pytest.raises(DecodeError, match="no audio stream"):
        mp.decoders.audio().create().decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {})
