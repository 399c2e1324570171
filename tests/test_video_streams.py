"""Files with several streams of a kind: the video and audio decoders read the streams FFmpeg's
command line picks (the independent oracle), not the first ones listed: a cover picture stored
as a video track before the film, a second audio track (commentary) flagged as the default."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import mediapipe as mp
from mediapipe.decoders.base import DecodeHint
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.video import read_counter, render_frames, write_video

H, W, FPS, FRAMES, RATE = 48, 64, 24, 24, 16000


def ffmpeg() -> str:
    return pytest.importorskip("imageio_ffmpeg").get_ffmpeg_exe()


def blob(path: Path) -> Blob:
    return Blob(str(path), path=str(path))


def luma_counters(clip: torch.Tensor) -> list[int]:
    luma = 0.299 * clip[:, 0].float() + 0.587 * clip[:, 1].float() + 0.114 * clip[:, 2].float()
    return [read_counter(f) for f in luma.round().to(torch.uint8).numpy()]


@pytest.fixture(scope="module")
def film(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """AV1 video with a FLAC track of a 440 Hz tone."""
    root = tmp_path_factory.mktemp("streams")
    t = np.arange(int(FRAMES / FPS * 48000)) / 48000
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None]
    return write_video(root / "film.mkv", render_frames(H, W, FRAMES, seed=9), fps=FPS, gop=8, audio=(tone, 48000, 0.0))


def with_cover(film: Path, tmp_path: Path) -> Path:
    """``film`` remuxed behind a 32x32 still: two video tracks, neither flagged default."""
    cover = tmp_path / "cover.png"
    Image.new("RGB", (32, 32), (255, 0, 0)).save(cover)
    path = tmp_path / "with_cover.mkv"
    subprocess.run([ffmpeg(), "-v", "error", "-y", "-i", str(cover), "-i", str(film), "-map", "0", "-map", "1:v",
                    "-c:v:0", "png", "-c:v:1", "copy", "-disposition:v:0", "0", "-disposition:v:1", "0", str(path)],
                   check=True)
    return path


def test_a_cover_picture_listed_first_is_not_the_video(film, tmp_path):
    """Two video tracks, neither flagged default: FFmpeg takes the larger (the film); the decoder
    read the first (a 32x32 still) and padded a clip of it."""
    path = with_cover(film, tmp_path)
    raw = subprocess.run([ffmpeg(), "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                         capture_output=True, check=True).stdout
    assert len(raw) == FRAMES * H * W * 3  # FFmpeg takes the film
    dec = mp.decoders.video(clip_len=4, stride=2, sampling="uniform").create()
    meta = dec.probe(blob(path))
    assert (meta["height"], meta["width"], meta["frames"]) == (H, W, FRAMES)
    clip = dec.decode(blob(path), DecodeHint(), SampleRNG(0, 0, 0, 0), {}).value
    assert clip.shape == (4, 3, H, W) and luma_counters(clip) == [8, 10, 12, 14]


def test_the_default_audio_track_is_the_one_decoded(film, tmp_path):
    """A 3 kHz commentary track listed first, the film's 440 Hz track flagged default: FFmpeg
    decodes the default one, and so do the plain and the ``from_field`` audio decoders."""
    path = tmp_path / "two_tracks.mkv"
    subprocess.run([ffmpeg(), "-v", "error", "-y", "-f", "lavfi", "-i", "sine=frequency=3000:duration=1:sample_rate=48000",
                    "-i", str(film), "-map", "1:v", "-map", "0:a", "-map", "1:a", "-c:v", "copy", "-c:a", "flac",
                    "-disposition:a:0", "0", "-disposition:a:1", "default", str(path)], check=True)
    raw = subprocess.run([ffmpeg(), "-v", "error", "-i", str(path), "-ac", "1", "-ar", str(RATE), "-f", "f32le", "-"],
                         capture_output=True, check=True).stdout
    oracle = np.frombuffer(raw, np.float32)

    def pitch(x: np.ndarray) -> float:
        spectrum = np.abs(np.fft.rfft(x))
        return float(np.argmax(spectrum) * RATE / len(x))

    assert abs(pitch(oracle) - 440) < 5  # FFmpeg's pick
    plain = mp.decoders.audio(sample_rate=RATE, mono=True).create()
    whole = plain.decode(blob(path), DecodeHint(), SampleRNG(0, 0, 0, 0), {}).numpy()[0]
    assert abs(pitch(whole) - 440) < 5
    n = min(len(whole), len(oracle))
    assert np.abs(whole[:n] - oracle[:n]).max() < 0.02
    video = mp.decoders.video(clip_len=8, sampling="uniform").create()
    span = video.decode(blob(path), DecodeHint(), SampleRNG(0, 0, 0, 0), {}).span
    from_field = mp.decoders.audio(from_field="video", sample_rate=RATE, mono=True).create()
    clip_audio = from_field.decode(blob(path), DecodeHint(span=span), SampleRNG(0, 0, 0, 0), {}).value.numpy()[0]
    (start, end), = span.spans
    assert len(clip_audio) == round((end - start) * RATE) and abs(pitch(clip_audio) - 440) < 40


def test_convert_probes_and_transcodes_the_film_not_its_cover(film, tmp_path):
    """`mediapipe convert` reads the stream the decoders read: the probe and the AV1 transcode
    of a file with a cover picture listed first describe and keep the film."""
    from mediapipe.dataset.transcode import TranscodeOptions, probe_video, transcode_video

    data = with_cover(film, tmp_path).read_bytes()
    meta = probe_video(data)
    assert (meta["height"], meta["width"], meta["frames"]) == (H, W, FRAMES)
    for codec in ("copy", "av1"):
        ext, out, meta = transcode_video(data, "mkv", TranscodeOptions(video_codec=codec))
        assert (meta["height"], meta["width"], meta["frames"]) == (H, W, FRAMES), codec
        path = tmp_path / f"out_{codec}.{ext}"
        path.write_bytes(out)
        dec = mp.decoders.video(clip_len=4, stride=2, sampling="uniform").create()
        assert dec.probe(blob(path))["frames"] == FRAMES
