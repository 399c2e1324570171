"""Video and its audio against hostile input: an audio-only file given as video, empty files and
streams, odd display matrices, corrupt 10-bit data, truncated files, audio windows past the end
of the track, duplicate timestamps. Each gives a clear error naming the file, or the documented
result; none crashes or hangs."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import av
import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe.decoders.base import DecodeHint, TimeSpans
from mediapipe.decoders.registry import create
from mediapipe.errors import DecodeError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.video import read_counter, render_frames, write_video

H, W = 48, 64


def blob(path: Path) -> Blob:
    return Blob(str(path), path=str(path))


def video_decoder(**options):
    return create("video", "pyav", clip_len=4, stride=2, **options)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


def test_audio_only_file_given_as_video_names_the_file_and_what_it_has(root):
    import soundfile as sf

    path = root / "speech.wav"
    sf.write(str(path), np.zeros(8000, np.float32), 16000)
    with pytest.raises(DecodeError, match="no video stream \\(streams: audio\\)") as err:
        video_decoder().decode(blob(path), DecodeHint(), SampleRNG(0, 0, 0, 0), {})
    assert str(path) in str(err.value)


def test_empty_file_and_a_video_stream_without_frames(root):
    empty = root / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(DecodeError, match="empty.mp4"):
        video_decoder().decode(blob(empty), DecodeHint(), SampleRNG(0, 0, 0, 0), {})
    frameless = root / "frameless.mkv"
    with av.open(str(frameless), "w") as out:
        stream = out.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        out.start_encoding()
    with pytest.raises(DecodeError, match="no frames|cannot|no video"):
        video_decoder().decode(blob(frameless), DecodeHint(), SampleRNG(0, 0, 0, 0), {})


def test_audio_window_past_the_end_of_the_track_and_an_empty_track(root):
    rate = 48000
    tone = (0.3 * np.sin(np.arange(rate) * 2 * np.pi * 440 / rate)).astype(np.float32)[None]
    path = write_video(root / "av.mkv", render_frames(H, W, 48, seed=1), gop=12, audio=(tone, rate, 0.0))
    dec = mp.decoders.audio(from_field="video", sample_rate=16000).create()
    out = dec.decode(blob(path), DecodeHint(span=TimeSpans(((1.5, 1.9),))), SampleRNG(0, 0, 0, 0), {})
    assert out.value.shape == (1, 0) and out.fields == {"present": True}  # the track ended at 1 s
    out = dec.decode(blob(path), DecodeHint(span=TimeSpans(((0.9, 1.3),))), SampleRNG(0, 0, 0, 0), {})
    assert abs(out.value.shape[1] - 1600) <= 16  # 0.9 s to the track's end at 1.0 s
    # no span at all (a bug upstream) is a DecodeError, not a crash
    with pytest.raises(DecodeError, match="no time span"):
        dec.decode(blob(path), DecodeHint(), SampleRNG(0, 0, 0, 0), {})


def test_display_matrix_that_is_not_a_quarter_turn(root):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    base = write_video(root / "base.mp4", render_frames(H, W, 4, seed=2), gop=2)
    odd = root / "r45.mp4"
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-y", "-display_rotation", "100", "-i",
                    str(base), "-c", "copy", str(odd)], check=True)
    dec = video_decoder(sampling="uniform")
    assert dec.index(blob(odd)).rotation == 90  # rounded to the nearest quarter turn
    out = dec.decode(blob(odd), DecodeHint(), SampleRNG(0, 0, 0, 0), {}).value
    assert out.shape == (4, 3, W, H)


def test_corrupt_10_bit_stream_is_a_decode_error_or_a_clip_never_a_crash(root):
    path = write_video(root / "deep.mkv", render_frames(H, W, 24, seed=3), gop=8, pix_fmt="yuv420p10le",
                       matrix="bt709")
    data = bytearray(path.read_bytes())
    rng = np.random.default_rng(0)
    for at in rng.integers(len(data) // 4, len(data), size=64):
        data[at] ^= 0xFF
    bad = root / "deep_corrupt.mkv"
    bad.write_bytes(bytes(data))
    for sample in range(6):
        try:
            out = video_decoder(bit_depth=16).decode(blob(bad), DecodeHint(), SampleRNG(0, 0, sample, 0), {})
        except DecodeError as err:
            assert "deep_corrupt.mkv" in str(err)
        else:
            assert out.value.shape == (4, 3, H, W) and out.value.dtype == torch.uint16


@pytest.mark.parametrize("suffix", ["mp4", "mkv"])
def test_truncated_file_is_a_decode_error_or_the_frames_that_exist(root, suffix):
    path = write_video(root / f"whole.{suffix}", render_frames(H, W, 40, seed=4), gop=10)
    cut = root / f"cut.{suffix}"
    cut.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.6)])
    dec = video_decoder(sampling="all")
    try:
        out = dec.decode(blob(cut), DecodeHint(), SampleRNG(0, 0, 0, 0), {})
    except DecodeError as err:
        assert f"cut.{suffix}" in str(err)
    else:
        frames = [read_counter(f[0].numpy()) for clip in out.value for f in yuv(clip)]
        assert frames == sorted(frames) and max(frames) < 40


def yuv(clip: torch.Tensor) -> torch.Tensor:
    """Luma of an RGB clip, in the channel dim 0 slot (for read_counter)."""
    luma = 0.299 * clip[:, 0].float() + 0.587 * clip[:, 1].float() + 0.114 * clip[:, 2].float()
    return luma[:, None].round().to(torch.uint8)


def test_duplicate_timestamps_in_a_variable_frame_rate_stream(root):
    """IVF frames 5 and 6 with the same timestamp: the later one is not a frame of its own
    (as a player shows them), the reference graph is not trusted (a full decode), and both the
    frame-index and the fps sampling give frames in order."""
    src = write_video(root / "dsrc.ivf", render_frames(H, W, 20, seed=1), gop=8)
    data = bytearray(src.read_bytes())
    pos, n, prev = 32, 0, 0
    while pos + 12 <= len(data):
        size, pts = struct.unpack_from("<IQ", data, pos)
        if n == 6:
            struct.pack_into("<IQ", data, pos, size, prev)
        prev, pos, n = pts, pos + 12 + size, n + 1
    path = root / "dup.ivf"
    path.write_bytes(bytes(data))
    for options in ({"sampling": "all"}, {"sampling": "all", "fps": 10.0}, {"sampling": "random"}):
        dec = create("video", "pyav", clip_len=4, stride=2, output="yuv", **options)
        index = dec.index(blob(path))
        assert index.frames == 19 and index.deps is None
        out = dec.decode(blob(path), DecodeHint(), SampleRNG(0, 0, 0, 0), {}).value
        clips = out if out.ndim == 5 else out[None]
        for clip in clips:
            frames = [read_counter(f[0].numpy()) for f in clip]
            assert frames == sorted(frames) and 6 not in frames, frames
