"""A window of a resampled decode lies on the output rate's grid: the samples from
``round(offset * out_rate)`` of the whole file's resampled decode, for both backends and for
rates whose grids rarely meet (44.1 kHz to 16 kHz) as well as often (48 kHz to 16 kHz)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mediapipe as mp
from mediapipe.decoders.audio import resample
from mediapipe.decoders.base import NO_HINT
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob

OUT = 16000


def tones(seconds: float, rate: int) -> np.ndarray:
    """Tones up to 6 kHz (below the output's Nyquist): a fraction of a sample off shows as a phase error."""
    t = np.arange(int(seconds * rate)) / rate
    x = sum(0.2 * np.sin(2 * np.pi * f * t + p) for f, p in ((440, 0.0), (2500, 1.0), (5800, 2.0)))
    return x.astype(np.float32)[None]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, str], Path]:
    import soundfile as sf

    root = tmp_path_factory.mktemp("grid")
    out = {}
    for rate in (44100, 48000):
        for fmt in ("wav", "flac"):
            path = root / f"t{rate}.{fmt}"
            sf.write(str(path), tones(2.0, rate)[0], rate, subtype="PCM_24" if fmt == "flac" else "FLOAT")
            out[rate, fmt] = path
    return out


def decode(path: Path, backend: str, **options) -> np.ndarray:
    dec = mp.decoders.audio(sample_rate=OUT, backend=backend, **options).create()
    return dec.decode(Blob(str(path), path=str(path)), NO_HINT, SampleRNG(0, 0, 0, 0), {}).numpy()


@pytest.mark.parametrize("backend", ["pyav", "soundfile"])
@pytest.mark.parametrize("rate", [44100, 48000])
@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_resampled_window_is_the_slice_of_the_whole_resampled_file(files, backend, rate, fmt):
    path = files[rate, fmt]
    whole = decode(path, backend)
    assert whole.shape[1] == round(2.0 * OUT)
    for offset, duration in ((0.123456, 0.5), (0.0004, 0.3), (1.2222, 0.7), (0.999999, 0.25)):
        window = decode(path, backend, offset=offset, duration=duration)
        first = round(offset * OUT)
        expected = whole[:, first : first + round(duration * OUT)]
        assert window.shape == expected.shape, (offset, window.shape, expected.shape)
        assert np.abs(window - expected).max() < 2e-3, (offset, np.abs(window - expected).max())


def test_the_native_grid_start_was_a_fraction_of_a_sample_off(files):
    """What the old decoder did (cut at round(offset * 44100), then resample) is off by a visible
    phase on these tones: the check above can fail."""
    path = files[44100, "wav"]
    offset, duration = 0.123456, 0.5
    whole = decode(path, "pyav")
    native = tones(2.0, 44100)
    old = resample(native[:, round(offset * 44100) : round(offset * 44100) + round(duration * 44100)], 44100, OUT)
    first = round(offset * OUT)
    expected = whole[:, first : first + round(duration * OUT)]
    middle = slice(400, -400)  # away from the filter's edges: only the grid offset differs
    assert np.abs(old[:, middle] - expected[:, middle]).max() > 0.05


def test_window_without_resampling_is_unchanged(files):
    path = files[48000, "wav"]
    dec = mp.decoders.audio(offset=0.5, duration=0.25).create()
    x = dec.decode(Blob(str(path), path=str(path)), NO_HINT, SampleRNG(0, 0, 0, 0), {}).numpy()
    ref = tones(2.0, 48000)[:, 24000 : 24000 + 12000]
    assert x.shape == ref.shape and np.abs(x - ref).max() < 1e-6
