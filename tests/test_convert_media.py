"""Video (AV1 through SVT-AV1, or copied) and audio (FLAC, Opus, copied) through convert and back."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe.dataset.convert import convert
from mediapipe.dataset.inspect import summarize, verify
from mediapipe.dataset.transcode import TranscodeOptions

av = pytest.importorskip("av")


def make_video(frames: int = 16, width: int = 96, height: int = 64, fps: int = 8, audio: bool = True) -> bytes:
    """An MPEG-4 Part 2 video (every 12th frame a key frame) in MP4, with an AAC tone."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        video = out.add_stream("mpeg4", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        tone = out.add_stream("aac", rate=16000, layout="mono") if audio else None
        for i in range(frames):
            rgb = np.zeros((height, width, 3), np.uint8)
            rgb[:, (i * 5) % width : (i * 5) % width + 8] = 255
            rgb[..., 1] = (i * 13) % 256
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = i
            for packet in video.encode(frame):
                out.mux(packet)
        for packet in video.encode(None):
            out.mux(packet)
        if tone is not None:
            t = np.arange(16000 * frames // fps) / 16000
            samples = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None]
            for k in range(0, samples.shape[1], 1024):
                frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples[:, k : k + 1024]), format="fltp",
                                                   layout="mono")
                frame.sample_rate = 16000
                for packet in tone.encode(frame):
                    out.mux(packet)
            for packet in tone.encode(None):
                out.mux(packet)
    return buf.getvalue()


def make_wav(seconds: float = 0.5, rate: int = 22050) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format="wav") as out:
        stream = out.add_stream("pcm_s16le", rate=rate, layout="stereo")
        t = np.arange(int(rate * seconds)) / rate
        mono = (0.3 * np.sin(2 * np.pi * 330 * t) * 32767).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(np.stack([mono, mono], 1).reshape(1, -1).copy(), format="s16",
                                           layout="stereo")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


@pytest.fixture(scope="module")
def media_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("media")
    (root / "clips").mkdir()
    (root / "sounds").mkdir()
    (root / "clips" / "walk.mp4").write_bytes(make_video())
    (root / "sounds" / "tone.wav").write_bytes(make_wav())
    return root


def _decode_video(data: bytes) -> tuple[list[np.ndarray], list[bool], int]:
    with av.open(io.BytesIO(data)) as c:
        frames = [f for f in c.decode(c.streams.video[0])]
        return [f.to_ndarray() for f in frames], [f.key_frame for f in frames], len(c.streams.audio)


def test_video_to_av1_and_audio_to_flac(media_folder: Path, tmp_path: Path) -> None:
    options = TranscodeOptions(video_max_height=48, fps=4, keyframe_interval=2, crf=40, preset=12,
                               audio_rate=16000, audio_channels=1, audio_codec="flac")
    result = convert(media_folder, tmp_path / "out", options=options, shuffle=False)
    assert result.num_samples == 2 and not result.failures
    source = mp.loaders.shards(tmp_path / "out")
    video = next(i for i in range(2) if source.meta(i)["kind"] == "video")
    meta = source.meta(video)
    assert set(source.ref(video).blobs) == {"mkv"}
    assert (meta["codec"], meta["width"], meta["height"], meta["fps"], meta["frames"]) == ("av1", 72, 48, 4.0, 8)
    assert meta["keyframes"] == [0, 2, 4, 6] and meta["duration"] == pytest.approx(2.0)
    frames, keys, audio_tracks = _decode_video(source.ref(video).blob("video").read())
    assert len(frames) == 8 and [i for i, k in enumerate(keys) if k] == [0, 2, 4, 6] and audio_tracks == 1
    sound = 1 - video
    meta = source.meta(sound)
    assert set(source.ref(sound).blobs) == {"flac"}
    assert (meta["codec"], meta["sample_rate"], meta["channels"]) == ("flac", 16000, 1)
    assert meta["num_samples"] == pytest.approx(8000, abs=32)
    assert verify(tmp_path / "out") == []
    summary = summarize(tmp_path / "out")
    assert summary["codecs"] == {"video:av1": 1, "audio:flac": 1} and summary["fps"] == {"4": 1}
    assert summary["gop"] == {"2": 3}  # key frames 0, 2, 4, 6 of 8 frames: three whole GOPs of 2


def test_copy_keeps_streams_and_opus_and_dropping_audio(media_folder: Path, tmp_path: Path) -> None:
    copied = convert(media_folder, tmp_path / "copy", options=TranscodeOptions(video_codec="copy", audio_codec="copy"))
    assert not copied.failures
    source = mp.loaders.shards(tmp_path / "copy")
    originals = {"clips_walk": (media_folder / "clips" / "walk.mp4").read_bytes(),
                 "sounds_tone": (media_folder / "sounds" / "tone.wav").read_bytes()}
    for i in range(len(source)):
        (blob,) = source.ref(i).blobs.values()
        assert blob.read() == originals[source.ref(i).key]
    _, keys, _ = _decode_video(originals["clips_walk"])
    meta = source.meta([source.ref(i).key for i in range(2)].index("clips_walk"))
    assert meta["keyframes"] == [i for i, k in enumerate(keys) if k] and meta["frames"] == 16
    muted = convert(media_folder, tmp_path / "muted",
                    options=TranscodeOptions(video_codec="copy", keep_audio=False, audio_codec="opus"))
    assert not muted.failures
    source = mp.loaders.shards(tmp_path / "muted")
    exts = {source.ref(i).key: next(iter(source.ref(i).blobs)) for i in range(2)}
    assert exts == {"clips_walk": "mkv", "sounds_tone": "opus"}
    video = [source.ref(i).key for i in range(2)].index("clips_walk")
    frames, _, audio_tracks = _decode_video(source.ref(video).blob("video").read())
    assert len(frames) == 16 and audio_tracks == 0
    assert verify(tmp_path / "muted") == []


def test_video_and_audio_decoders_read_shards_as_they_read_a_folder(media_folder: Path, tmp_path: Path) -> None:
    convert(media_folder, tmp_path / "out", options=TranscodeOptions(video_codec="copy", audio_codec="copy"),
            shuffle=False)
    folder, shards = mp.loaders.folder(media_folder), mp.loaders.shards(tmp_path / "out")
    assert [shards.ref(i).key for i in range(2)] == ["clips_walk", "sounds_tone"]
    for decode, index in (({"video": mp.decoders.video(clip_len=4, sampling="uniform")}, 0),
                          ({"audio": mp.decoders.audio(sample_rate=8000, mono=True)}, 1)):
        a = mp.Pipeline(source=folder, decode=decode, batch_size=1, device="cpu").dataset()[index]
        b = mp.Pipeline(source=shards, decode=decode, batch_size=1, device="cpu").dataset()[index]
        (name,) = decode
        assert a[name].shape == b[name].shape and a[name].numel() > 0
        assert torch.equal(a[name], b[name])
