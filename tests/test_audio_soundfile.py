"""The soundfile audio backend: the same samples as the pyav backend (bit for bit on lossless files),
per-file hand-over to pyav, every source kind, bad input, and the choice of "auto"."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe.decoders.base import NO_HINT, DecodeHint, Limits
from mediapipe.decoders.registry import create, decoder_class
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.audio import encode_audio, speech_like

pytest.importorskip("soundfile")
sf_backend = importlib.import_module("mediapipe.decoders.audio_soundfile")
SR = 16000


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sf_audio")
    x = np.stack([speech_like(2.5, 1), speech_like(2.5, 2)])
    out = {name: encode_audio(root / name, x, SR, codec=codec) for name, codec in [
        ("a.flac", None), ("s16.wav", None), ("s24.wav", "pcm_s24le"), ("f32.wav", "pcm_f32le"),
        ("a.opus", None), ("a.mp3", None)]}
    out["mono.flac"] = encode_audio(root / "mono.flac", speech_like(4.0, 3), SR)
    (root / "flac_named.opus").write_bytes(out["a.flac"].read_bytes())  # the bytes decide, not the name
    (root / "opus_named.flac").write_bytes(out["a.opus"].read_bytes())
    out["flac_named.opus"], out["opus_named.flac"] = root / "flac_named.opus", root / "opus_named.flac"
    return out


def blob(path: Path) -> Blob:
    return Blob(str(path), path=str(path))


def run(backend: str, path: Path, hint: DecodeHint = NO_HINT, index: int = 0, **options) -> torch.Tensor:
    return create("audio", backend, **options).decode(blob(path), hint, SampleRNG(0, 0, index, 0), {})


OPTIONS = [{}, {"mono": True}, {"sample_rate": 22050}, {"sample_rate": 8000, "mono": True},
           {"offset": 1.1, "duration": 0.7}, {"offset": 2.0}, {"random_crop": 1.0}]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
@pytest.mark.parametrize("name", ["a.flac", "s16.wav", "s24.wav", "f32.wav", "mono.flac"])
def test_lossless_equals_the_pyav_backend_bit_for_bit(clips, name, options):
    for index in (0, 7):  # random_crop: the same keyed window in both backends
        ours = run("soundfile", clips[name], index=index, **options)
        ref = run("pyav", clips[name], index=index, **options)
        assert ours.dtype == torch.float32 and ours.is_contiguous()
        assert ours.shape == ref.shape and torch.equal(ours, ref), (name, options)


@pytest.mark.parametrize("name", ["a.flac", "s24.wav"])
def test_windows_equal_slices_of_the_full_decode(clips, name):
    full = run("soundfile", clips[name])
    for start, length in [(0.0, 0.5), (1.37, 0.8), (2.0, 5.0), (0.00003, 0.01)]:
        w = run("soundfile", clips[name], DecodeHint(window=(start, length)))
        a = round(start * SR)
        assert torch.equal(w, full[:, a : a + round(length * SR)]), (start, length)
    with pytest.raises(mp.DecodeError, match="no audio samples"):
        run("soundfile", clips[name], DecodeHint(window=(9.0, 1.0)))


@pytest.mark.parametrize("name", ["a.opus", "a.mp3", "opus_named.flac"])
def test_other_formats_go_to_pyav(clips, name, monkeypatch):
    ref = run("pyav", clips[name], sample_rate=SR, mono=True)
    assert torch.equal(run("soundfile", clips[name], sample_rate=SR, mono=True), ref)
    monkeypatch.setattr(sf_backend, "_read", lambda *a: pytest.fail("libsndfile read a file it should hand over"))
    assert torch.equal(run("soundfile", clips[name], sample_rate=SR, mono=True), ref)
    meta = create("audio", "soundfile").probe(blob(clips[name]))
    assert meta == create("audio", "pyav").probe(blob(clips[name]))


def test_flac_bytes_under_another_name_are_read_by_libsndfile(clips, monkeypatch):
    decoder = create("audio", "soundfile")
    monkeypatch.setattr(decoder.fallback, "decode", lambda *a: pytest.fail("handed to pyav"))
    x = decoder.decode(blob(clips["flac_named.opus"]), NO_HINT, SampleRNG(0, 0, 0, 0), {})
    assert torch.equal(x, run("pyav", clips["a.flac"]))


def test_bytes_in_memory_and_byte_ranges_decode_alike(clips, tmp_path):
    data = clips["a.flac"].read_bytes()
    full = run("soundfile", clips["a.flac"])
    decoder = create("audio", "soundfile", offset=0.5, duration=1.0)
    window = full[:, SR // 2 : SR // 2 + SR]
    packed = tmp_path / "packed.bin"  # a tar-like file: the FLAC sits at an offset
    packed.write_bytes(b"x" * 1000 + data + b"y" * 77)
    for b in (Blob("mem.flac", data=data), Blob("packed.bin:a.flac", path=str(packed), offset=1000, size=len(data))):
        assert torch.equal(decoder.decode(b, NO_HINT, SampleRNG(0, 0, 0, 0), {}), window), b.name
        assert create("audio", "soundfile").probe(b)["num_samples"] == full.shape[1]
    assert create("audio", "soundfile").probe(Blob("x.flac"), data=data)["duration"] == 2.5


def test_probe_reads_only_the_header(clips, monkeypatch):
    monkeypatch.setattr(sf_backend, "_read", lambda *a: pytest.fail("probe decoded samples"))
    for name, codec in [("a.flac", "flac"), ("s24.wav", "pcm_s24le"), ("f32.wav", "pcm_f32le"), ("mono.flac", "flac")]:
        meta = create("audio", "soundfile").probe(blob(clips[name]))
        channels, seconds = (1, 4.0) if name == "mono.flac" else (2, 2.5)
        assert meta == {"sample_rate": SR, "channels": channels, "codec": codec, "duration": seconds,
                        "num_samples": round(seconds * SR)}


def _flac_declaring(data: bytes, total_samples: int) -> bytes:
    """Rewrite STREAMINFO's 36-bit total-samples field (the low bits of file bytes 18..25)."""
    out = bytearray(data)
    word = int.from_bytes(out[18:26], "big")
    out[18:26] = ((word & ~((1 << 36) - 1)) | total_samples).to_bytes(8, "big")
    return bytes(out)


def test_bad_files(clips, tmp_path, monkeypatch):
    data = clips["mono.flac"].read_bytes()
    (tmp_path / "empty.flac").write_bytes(b"")
    (tmp_path / "truncated.flac").write_bytes(data[: len(data) // 2])
    (tmp_path / "zeros.flac").write_bytes(data[: len(data) // 3] + bytes(3000) + data[len(data) // 3 + 3000 :])
    (tmp_path / "garbage.flac").write_bytes(b"fLaC" + bytes(300))
    wav = clips["s16.wav"].read_bytes()
    (tmp_path / "truncated.wav").write_bytes(wav[: len(wav) // 2])  # the data chunk declares twice this
    (tmp_path / "hours.flac").write_bytes(_flac_declaring(data, SR * 3600 * 5))
    cases = {"empty.flac": "empty file (0 bytes)", "truncated.flac": "truncated or corrupt",
             "zeros.flac": "truncated or corrupt", "garbage.flac": "cannot open"}
    for name, reason in cases.items():
        with pytest.raises(mp.DecodeError) as info:
            run("soundfile", tmp_path / name)
        assert info.value.decoder == "soundfile" and reason in info.value.reason, (name, info.value)
        assert name in str(info.value)
    # a WAV cut short: both libraries take the length from the file size (the data chunk's size field
    # is known to be wrong in streamed WAVs), so it decodes as the shorter file it is, in both backends
    cut = run("soundfile", tmp_path / "truncated.wav")
    assert cut.shape[1] < 1.3 * SR and torch.equal(cut, run("pyav", tmp_path / "truncated.wav"))
    # a header declaring 5 hours: LimitError from the header, before a sample is read
    monkeypatch.setattr(sf_backend, "_read", lambda *a: pytest.fail("read samples past the limit"))
    with pytest.raises(mp.LimitError, match="header declares 18000.0 s"):
        run("soundfile", tmp_path / "hours.flac")
    with pytest.raises(mp.LimitError, match="max_duration=3"):
        run("soundfile", clips["mono.flac"], max_duration=3.0)


def test_a_lying_header_without_a_limit_is_read_in_pieces(clips, tmp_path, monkeypatch):
    data = clips["mono.flac"].read_bytes()
    (tmp_path / "long.flac").write_bytes(_flac_declaring(data, (1 << 36) - 1))  # 50 days at 16 kHz
    monkeypatch.setattr(sf_backend, "_CHUNK_FRAMES", 10_000)
    decoder = create("audio", "soundfile", limits=Limits(max_duration=None))
    with pytest.raises(mp.DecodeError, match="truncated or corrupt"):  # no 4 TB allocation first
        decoder.decode(blob(tmp_path / "long.flac"), NO_HINT, SampleRNG(0, 0, 0, 0), {})
    pieces = create("audio", "soundfile").decode(blob(clips["mono.flac"]), NO_HINT, SampleRNG(0, 0, 0, 0), {})
    assert pieces.shape == (1, 4 * SR) and torch.equal(pieces, run("pyav", clips["mono.flac"]))


def test_auto_prefers_soundfile_and_falls_back_without_it(clips, monkeypatch):
    assert decoder_class("audio") is sf_backend.SoundfileAudioDecoder
    spec = mp.decoders.audio(sample_rate=SR, mono=True)
    assert spec.create().name == "soundfile"
    monkeypatch.setattr(sf_backend, "_sf", None)  # as if soundfile were not installed
    assert not sf_backend.SoundfileAudioDecoder.available(None)
    assert spec.create().name == "pyav"
    with pytest.raises(RuntimeError, match="cannot run"):
        create("audio", "soundfile")


def test_the_pipeline_decodes_alike_with_either_backend(clips, tmp_path):
    names = ["a.flac", "s24.wav", "a.opus", "mono.flac"]
    (tmp_path / "m.jsonl").write_text("".join(f'{{"path": "{clips[n]}"}}\n' for n in names))
    batches = []
    for backend in ("pyav", "soundfile"):
        pipe = mp.Pipeline(source=mp.loaders.manifest(tmp_path / "m.jsonl"),
                           decode={"audio": mp.decoders.audio(sample_rate=SR, mono=True, random_crop=2.0,
                                                              backend=backend)},
                           batch_size=4, seed=3, device="cpu")
        batches.append(next(iter(pipe.loader(shuffle=False))))
    assert torch.equal(batches[0]["audio"], batches[1]["audio"])
    assert batches[0]["audio_lengths"].tolist() == [2 * SR] * 4
