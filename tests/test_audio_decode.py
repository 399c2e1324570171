"""The audio decoders (pyav, soundfile) against independent decodes (ffmpeg CLI, soundfile), windows,
options, limits; the resampler against swresample and torchaudio."""

from __future__ import annotations

import importlib
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torchaudio

import mediapipe as mp
from mediapipe.decoders.base import NO_HINT, DecodeHint
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.audio import encode_audio, speech_like

SR = 16000


def chirp(seconds: float, sr: int, f0: float = 200.0, f1: float = 3000.0) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    return (0.5 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t * t / (2 * seconds)))).astype(np.float32)


def stereo_clip(seconds: float, sr: int) -> np.ndarray:
    """Left: a chirp with a silent gap; right: a 440 Hz tone plus noise."""
    left = chirp(seconds, sr)
    left[int(0.4 * len(left)) : int(0.5 * len(left))] = 0.0
    t = np.arange(len(left)) / sr
    right = 0.3 * np.sin(2 * np.pi * 440 * t) + np.random.default_rng(0).normal(0, 0.02, len(t))
    return np.stack([left, right.astype(np.float32)])


@pytest.fixture(scope="session")
def ffmpeg() -> str:
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


def ffmpeg_decode(ffmpeg: str, path: Path, channels: int, rate: int | None = None) -> np.ndarray:
    cmd = [ffmpeg, "-v", "error", "-i", str(path), "-f", "f32le", "-acodec", "pcm_f32le"]
    cmd += ["-ar", str(rate)] if rate else []
    raw = subprocess.run([*cmd, "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.float32).reshape(-1, channels).T


@pytest.fixture(scope="session")
def clips(tmp_path_factory: pytest.TempPathFactory, ffmpeg: str) -> dict[str, Path]:
    """3 s stereo clips in every format; name -> path."""
    root = tmp_path_factory.mktemp("audio")
    x = stereo_clip(3.0, SR)
    out = {}
    for name, codec in [("s16.wav", None), ("s24.wav", "pcm_s24le"), ("s32.wav", "pcm_s32le"),
                        ("f32.wav", "pcm_f32le"), ("a.flac", None), ("a.opus", None), ("a.mp3", None),
                        ("a.m4a", None)]:
        out[name] = encode_audio(root / name, x, SR, codec=codec)
    wav = out["s16.wav"]
    out["a.ogg"] = root / "a.ogg"  # Vorbis through the ffmpeg CLI's libvorbis
    subprocess.run([ffmpeg, "-v", "error", "-i", str(wav), "-c:a", "libvorbis", str(out["a.ogg"])], check=True)
    out["video.mp4"] = root / "video.mp4"  # a video container whose audio track we read
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "color=c=gray:s=64x48:r=10:d=3", "-i", str(wav),
                    "-c:v", "mpeg4", "-c:a", "aac", "-shortest", str(out["video.mp4"])], check=True)
    return out


BACKENDS = ["pyav", "soundfile"]


def decode(path: Path, hint: DecodeHint = NO_HINT, index: int = 0, backend: str = "auto", **options) -> torch.Tensor:
    decoder = mp.decoders.audio(backend=backend, **options).create()
    return decoder.decode(Blob(str(path), path=str(path)), hint, SampleRNG(0, 0, index, 0), {})


LOSSLESS = ["s16.wav", "s24.wav", "s32.wav", "f32.wav", "a.flac"]
LOSSY = ["a.opus", "a.mp3", "a.m4a", "a.ogg", "video.mp4"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", LOSSLESS)
def test_lossless_matches_soundfile(clips, name, backend):
    import soundfile

    x = decode(clips[name], backend=backend)
    ref, rate = soundfile.read(str(clips[name]), dtype="float32", always_2d=True)
    assert x.dtype == torch.float32 and x.shape == (2, 3 * SR) and rate == SR
    bits = {"s16.wav": 16, "a.flac": 16, "s24.wav": 24, "s32.wav": 32, "f32.wav": 32}[name]
    np.testing.assert_allclose(x.numpy(), ref.T, atol=2.0 ** (1 - bits), rtol=0)
    # and the source signal, within the quantisation step
    np.testing.assert_allclose(x.numpy(), stereo_clip(3.0, SR), atol=2.0 ** (1 - min(bits, 24)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", LOSSY)
def test_lossy_matches_ffmpeg_cli(clips, ffmpeg, name, backend):
    x = decode(clips[name], backend=backend).numpy()
    ref = ffmpeg_decode(ffmpeg, clips[name], 2)
    assert x.shape[0] == 2
    assert abs(x.shape[1] - ref.shape[1]) <= 2048, (x.shape, ref.shape)  # priming/padding differ by a frame
    n = min(x.shape[1], ref.shape[1])
    assert np.abs(x[:, :n] - ref[:, :n]).max() < 1e-3
    native = 48000 if name == "a.opus" else SR
    assert abs(x.shape[1] / native - 3.0) < 0.1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["s16.wav", "s24.wav", "a.flac", "a.opus", "a.mp3", "a.m4a", "a.ogg"])
def test_window_equals_slice_of_full_decode(clips, name, backend):
    full = decode(clips[name], backend=backend)
    rate = 48000 if name == "a.opus" else SR
    for start, length in [(0.0, 0.5), (1.37, 0.8), (2.5, 5.0)]:
        w = decode(clips[name], DecodeHint(window=(start, length)), backend=backend)
        a = round(start * rate)
        expected = full[:, a : a + round(length * rate)]
        assert w.shape == expected.shape, (start, length, w.shape, expected.shape)
        tol = 1e-6 if name in ("s16.wav", "s24.wav", "a.flac") else 2e-3  # lossy decoders settle after a seek
        assert (w - expected).abs().max() < tol


@pytest.mark.parametrize("backend", BACKENDS)
def test_offset_duration_options_and_random_crop(clips, backend):
    full = decode(clips["a.flac"], backend=backend)
    w = decode(clips["a.flac"], offset=1.0, duration=0.25, backend=backend)
    assert torch.equal(w, full[:, SR : SR + SR // 4])
    crops = [decode(clips["a.flac"], index=i, random_crop=0.5, backend=backend) for i in range(4)]
    again = decode(clips["a.flac"], index=2, random_crop=0.5, backend=backend)
    assert torch.equal(crops[2], again)  # the same key, the same window
    starts = set()
    for c in crops:
        assert c.shape == (2, SR // 2)
        hits = [s for s in range(0, full.shape[1] - SR // 2 + 1) if torch.equal(full[:, s : s + SR // 2], c)]
        assert len(hits) == 1
        starts.add(hits[0])
    assert len(starts) > 1  # different samples, different windows
    assert decode(clips["a.flac"], random_crop=10.0, backend=backend).shape == full.shape  # shorter: whole


@pytest.mark.parametrize("backend", BACKENDS)
def test_mono_and_resample(clips, ffmpeg, backend):
    full = decode(clips["a.flac"], backend=backend)
    mono = decode(clips["a.flac"], mono=True, backend=backend)
    assert mono.shape == (1, full.shape[1])
    assert torch.allclose(mono[0], full.mean(0), atol=1e-7)
    up = decode(clips["a.flac"], sample_rate=22050, backend=backend)
    assert up.shape == (2, round(3 * 22050))
    ref = ffmpeg_decode(ffmpeg, clips["a.flac"], 2, rate=22050)  # swresample, another filter
    n = min(up.shape[1], ref.shape[1])
    # the left channel is a chirp below 3 kHz: both filters pass it whole (but at the edges of
    # its silent gap); the right one has white noise up to 8 kHz, where the filters' bands differ
    chirp_part = np.r_[100 : int(0.39 * n), int(0.51 * n) : n - 100]
    assert np.abs(up.numpy()[0, chirp_part] - ref[0, chirp_part]).max() < 1e-3
    other = torchaudio.functional.resample(full, SR, 22050)  # another sinc filter, same band
    assert (up[:, 100:-100] - other[:, 100:-100]).abs().max() < 2e-2
    down = decode(clips["a.opus"], sample_rate=SR, mono=True, backend=backend)
    assert down.shape[0] == 1 and abs(down.shape[1] - 3 * SR) <= 160
    # the 440 Hz tone of the right channel survives 48 kHz -> 16 kHz at half amplitude
    spectrum = np.abs(np.fft.rfft(down[0, SR // 2 : SR // 2 + SR].numpy()))
    assert abs(int(np.argmax(spectrum[300:600])) + 300 - 440) <= 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_probe_is_header_only(clips, backend):
    decoder = mp.decoders.audio(backend=backend).create()
    for name in ("a.flac", "s24.wav", "a.opus", "video.mp4"):
        meta = decoder.probe(Blob(str(clips[name]), path=str(clips[name])))
        assert meta["channels"] == 2 and abs(meta["duration"] - 3.0) < 0.1
        assert meta["sample_rate"] == (48000 if name == "a.opus" else SR)
        assert meta["codec"] == {"a.flac": "flac", "s24.wav": "pcm_s24le", "a.opus": "opus", "video.mp4": "aac"}[name]


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_duration_rejects_before_decoding(clips, backend):
    with pytest.raises(mp.LimitError, match="max_duration=2"):
        decode(clips["a.flac"], max_duration=2.0, backend=backend)
    assert decode(clips["a.flac"], max_duration=5.0, backend=backend).shape[1] == 3 * SR


def test_resample_is_soxr_when_installed_else_swresample(clips, ffmpeg, monkeypatch):
    audio_module = importlib.import_module("mediapipe.decoders.audio")  # the package's `audio` is the spec
    soxr = pytest.importorskip("soxr")
    full = decode(clips["a.flac"]).numpy()
    up = audio_module.resample(full, SR, 22050)
    assert up.shape == (2, round(3 * 22050)) and up.dtype == np.float32 and up.flags.c_contiguous
    np.testing.assert_allclose(up, soxr.resample(full.T, SR, 22050, quality="HQ").T[:, : up.shape[1]], atol=1e-6)
    monkeypatch.setattr(audio_module, "_soxr", None)  # no soxr: FFmpeg's swresample, as the ffmpeg CLI
    swr = audio_module.resample(full, SR, 22050)
    ref = ffmpeg_decode(ffmpeg, clips["a.flac"], 2, rate=22050)
    n = min(swr.shape[1], ref.shape[1])
    assert swr.shape == up.shape and np.abs(swr[:, 100 : n - 100] - ref[:, 100 : n - 100]).max() < 1e-3
    assert not np.array_equal(swr, up)  # a different filter indeed
    for rate, target in [(48000, 16000), (16000, 48000), (44100, 16000)]:  # lengths round(n * target / rate)
        for n in (1, 2, 47999, 48001):
            y = audio_module.resample(np.ones((1, n), np.float32), rate, target)
            assert y.shape == (1, round(n * target / rate))


def test_resample_48k_to_16k_keeps_the_band_and_stops_aliases():
    from mediapipe.decoders.audio import resample

    t = np.arange(48000) / 48000
    tone = np.sin(2 * np.pi * 1000 * t).astype(np.float32)  # kept
    alias = np.sin(2 * np.pi * 11000 * t).astype(np.float32)  # above 8 kHz: would fold to 5 kHz
    y = resample((tone + alias)[None], 48000, 16000)[0, 1000:-1000]
    spectrum = np.abs(np.fft.rfft(y * np.hanning(len(y))))
    freqs = np.fft.rfftfreq(len(y), 1 / 16000)
    kept, folded = spectrum[np.argmin(abs(freqs - 1000))], spectrum[np.argmin(abs(freqs - 5000))]
    assert folded < 1e-3 * kept
    expected = np.sin(2 * np.pi * 1000 * np.arange(16000) / 16000)[1000:-1000]
    assert np.abs(y - expected).max() < 1e-3


def test_speech_like_fixture_is_deterministic(tmp_path):
    a, b = speech_like(2.5, 7), speech_like(2.5, 7)
    assert np.array_equal(a, b) and a.shape == (40000,) and 0.05 < np.abs(a).max() <= 1.0
    assert not np.array_equal(a, speech_like(2.5, 8))
