"""A header whose claim the file's size or its own frames make impossible (a FLAC declaring more
samples than its bytes could hold, an IVF whose timestamps spread 20 frames over centuries,
metadata declaring more frames than bytes) is reported as truncated or corrupt, naming the
claim, not as a file over a limit. Files honestly over a limit still get the limit's reason,
and a FLAC written to a pipe (no length in its header) decodes."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from mediapipe.decoders.base import DecodeHint, Limits
from mediapipe.decoders.registry import create
from mediapipe.decoders.video_index import clear_cache
from mediapipe.errors import DecodeError, LimitError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.audio import encode_audio, speech_like
from mediapipe.synthetic.video import render_frames, write_video

RNG = SampleRNG(0, 0, 0, 0)
AUDIO_BACKENDS = ["pyav", "soundfile"]


def blob(path: Path) -> Blob:
    return Blob(str(path), path=str(path))


def flac_declaring(data: bytes, total_samples: int) -> bytes:
    """STREAMINFO's 36-bit total-samples field (the low bits of bytes 18..25) rewritten."""
    out = bytearray(data)
    assert out[:4] == b"fLaC"
    word = int.from_bytes(out[18:26], "big")
    out[18:26] = ((word & ~((1 << 36) - 1)) | total_samples).to_bytes(8, "big")
    return bytes(out)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("claims")


@pytest.fixture(scope="module")
def flac(root: Path) -> bytes:
    """Two seconds of speech-like audio at 48 kHz, as FLAC."""
    path = encode_audio(root / "speech.flac", speech_like(2.0, 3, sample_rate=48000), 48000)
    return path.read_bytes()


@pytest.mark.parametrize("backend", AUDIO_BACKENDS)
def test_a_truncated_flac_whose_header_claims_too_much_is_truncated_or_corrupt(root: Path, flac: bytes,
                                                                              backend: str) -> None:
    path = root / f"truncated-{backend}.flac"
    cut = len(flac) // 2
    path.write_bytes(flac_declaring(flac, (1 << 36) - 1)[:cut])  # the field all ones, and the file cut
    with pytest.raises(DecodeError) as raised:
        create("audio", backend).decode(blob(path), DecodeHint(), RNG, {})
    err = raised.value
    assert not isinstance(err, LimitError), err
    assert str(path) in str(err)
    assert err.reason == ("truncated or corrupt: the header declares 68719476735 samples (1431655.8 s at 48000 Hz) "
                          f"in a file of {cut} bytes, more than any audio codec stores in so few"), err.reason


@pytest.mark.parametrize("backend", AUDIO_BACKENDS)
def test_a_plausible_claim_over_the_limit_is_still_the_limit(root: Path, flac: bytes, backend: str) -> None:
    path = root / f"long-{backend}.flac"
    path.write_bytes(flac)
    with pytest.raises(LimitError, match=r"header declares 2\.0 s of audio, above max_duration=1 s"):
        create("audio", backend, limits=Limits(max_duration=1.0)).decode(blob(path), DecodeHint(), RNG, {})


@pytest.mark.parametrize("backend", AUDIO_BACKENDS)
def test_a_flac_without_a_length_in_its_header_decodes(root: Path, flac: bytes, backend: str) -> None:
    """A FLAC written to a pipe has total samples 0 ("unknown"); libsndfile then reports a
    length of 2**63 - 1 frames, which is no claim at all."""
    whole = root / "whole.flac"
    whole.write_bytes(flac)
    streamed = root / f"streamed-{backend}.flac"
    streamed.write_bytes(flac_declaring(flac, 0))
    expected = create("audio", "pyav").decode(blob(whole), DecodeHint(), RNG, {})
    got = create("audio", backend).decode(blob(streamed), DecodeHint(), RNG, {})
    assert got.shape == expected.shape == (1, 96000)
    assert np.array_equal(got.numpy(), expected.numpy())


@pytest.fixture(scope="module")
def ivf(root: Path) -> bytes:
    """20 AV1 frames at 24 fps in IVF, AV1's raw container."""
    return write_video(root / "clip.ivf", render_frames(48, 64, 20, seed=1), fps=24, gop=8).read_bytes()


def ivf_frames(data: bytes) -> list[int]:
    """The offsets of the IVF frame headers (4 bytes size, 8 bytes timestamp) after the 32-byte file header."""
    offsets, at = [], 32
    while at + 12 <= len(data):
        offsets.append(at)
        at += 12 + struct.unpack_from("<I", data, at)[0]
    return offsets


def decode_video(path: Path, limits: Limits = Limits(), meta: dict | None = None):
    clear_cache()
    return create("video", "pyav", limits=limits, clip_len=4, stride=2).decode(blob(path), DecodeHint(), RNG,
                                                                               meta or {})


@pytest.mark.parametrize("damage", ["time base", "last timestamp"])
def test_an_ivf_with_corrupt_timing_is_corrupt_not_long(root: Path, ivf: bytes, damage: str) -> None:
    data = bytearray(ivf)
    if damage == "time base":  # file header: rate 1, scale 2**31 - 1: a frame every 68 years
        struct.pack_into("<II", data, 16, 1, 0x7FFFFFFF)
    else:
        struct.pack_into("<Q", data, ivf_frames(ivf)[-1] + 4, 1 << 40)
    path = root / f"corrupt-{damage.replace(' ', '-')}.ivf"
    path.write_bytes(bytes(data))
    with pytest.raises(DecodeError) as raised:
        decode_video(path)
    err = raised.value
    assert not isinstance(err, LimitError), err
    assert str(path) in str(err)
    assert err.reason.startswith("truncated or corrupt: its timestamps spread 20 frames over "), err.reason
    assert "video lasts" not in err.reason


def test_a_video_honestly_over_the_limit_is_still_the_limit(root: Path, ivf: bytes) -> None:
    path = root / "honest.ivf"
    path.write_bytes(ivf)
    assert decode_video(path).value.shape[0] == 4
    with pytest.raises(LimitError, match=r"video lasts 0\.8 s, above max_duration=0\.5"):
        decode_video(path, Limits(max_duration=0.5))
    with pytest.raises(LimitError, match=r"video has 20 frames, above max_frames=10"):
        decode_video(path, Limits(max_frames=10))


def test_metadata_declaring_more_frames_than_bytes_is_corrupt(root: Path, ivf: bytes) -> None:
    path = root / "meta.ivf"
    path.write_bytes(ivf)
    with pytest.raises(DecodeError) as raised:
        decode_video(path, meta={"frames": 10**9, "fps": 24.0, "keyframes": [0]})
    assert not isinstance(raised.value, LimitError)
    assert raised.value.reason == (f"truncated or corrupt: 1000000000 frames declared in a file of {len(ivf)} bytes "
                                   "(a frame takes at least one)")
