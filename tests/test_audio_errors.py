"""Bad audio under each on_error policy: truncated FLAC, a corrupt Opus page, an empty file, and a
header that declares hours of audio.

Documented behaviour of both backends (soundfile reads the FLAC files itself and hands Opus to pyav):
- truncated FLAC / corrupt Opus page: FFmpeg decodes what it can; a decode that ends more than
  max(50 ms, 1 %) before the length the header declares raises DecodeError "truncated or corrupt";
- zero-length file: DecodeError "empty file (0 bytes)";
- a header declaring more than max_duration (default 4 h): LimitError before any decoding.
Under on_error="raise" the error names the file; "skip" replaces the sample by a deterministic
other one and counts the reason in loader.stats; "replace" keeps the slot, zero with length 0
and ``valid`` False.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe.stages.stats import normalise_reason
from mediapipe.synthetic.audio import encode_audio, speech_like

BAD = {
    "truncated.flac": "truncated or corrupt",
    "corrupt.opus": "truncated or corrupt",
    "empty.flac": "empty file",
    "hours.flac": "header declares 18000.0 s",
}


def _flac_declaring(data: bytes, total_samples: int) -> bytes:
    """Rewrite STREAMINFO's 36-bit total-samples field (the low bits of file bytes 18..25)."""
    out = bytearray(data)
    assert out[:4] == b"fLaC"
    word = int.from_bytes(out[18:26], "big")
    word = (word & ~((1 << 36) - 1)) | total_samples
    out[18:26] = word.to_bytes(8, "big")
    return bytes(out)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad_audio")
    for i in range(4):
        encode_audio(root / f"good{i}.flac", speech_like(1.0 + 0.2 * i, i), 16000)
    x = speech_like(2.0, 9)
    flac = encode_audio(root / "src.flac", x, 16000).read_bytes()
    opus = bytearray(encode_audio(root / "src.opus", x, 16000).read_bytes())
    (root / "src.flac").unlink()
    (root / "src.opus").unlink()
    (root / "truncated.flac").write_bytes(flac[: len(flac) // 2])
    page = opus.find(b"OggS", len(opus) // 2)
    opus[page + 40 : page + 80] = bytes(40)  # a data page with a broken checksum
    (root / "corrupt.opus").write_bytes(bytes(opus))
    (root / "empty.flac").write_bytes(b"")
    (root / "hours.flac").write_bytes(_flac_declaring(flac, 16000 * 3600 * 5))
    return root


BACKENDS = ["pyav", "soundfile"]


def pipeline(folder: Path, on_error: str, name: str, backend: str = "auto") -> mp.Pipeline:
    files = sorted(p.name for p in folder.iterdir() if p.name.startswith("good")) + [name]
    manifest = folder / f"{name}.jsonl"
    manifest.write_text("".join(f'{{"path": "{f}"}}\n' for f in files))
    return mp.Pipeline(source=mp.loaders.manifest(manifest), decode={"audio": mp.decoders.audio(backend=backend)},
                       batch_size=5, seed=0, device="cpu", on_error=on_error)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(BAD))
def test_raise_names_the_file_and_the_reason(folder, name, backend):
    loader = pipeline(folder, "raise", name, backend).loader(shuffle=False)
    with pytest.raises(mp.DecodeError) as info:
        next(iter(loader))
    assert name in str(info.value) and BAD[name] in info.value.reason
    # the backend that read the file names itself: soundfile reads FLAC, pyav the rest
    assert info.value.decoder == ("soundfile" if backend == "soundfile" and name.endswith(".flac") else "pyav")
    if name == "hours.flac":
        assert isinstance(info.value, mp.LimitError)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(BAD))
def test_skip_replaces_and_counts(folder, name, backend):
    loader = pipeline(folder, "skip", name, backend).loader(shuffle=False)
    batch = next(iter(loader))
    assert batch["audio"].shape[0] == 5 and (batch["audio_lengths"] > 0).all()
    assert 4 not in batch["index"].tolist()  # the bad sample's slot holds another sample
    assert sum(loader.stats.errors.values()) >= 1
    assert any(normalise_reason(BAD[name]) in reason for reason in loader.stats.errors)  # by reason class
    assert any(name in failed and BAD[name] in failed for failed in loader.stats.failed)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(BAD))
def test_replace_keeps_the_slot_flagged(folder, name, backend):
    loader = pipeline(folder, "replace", name, backend).loader(shuffle=False)
    batch = next(iter(loader))
    assert batch["valid"].tolist() == [True, True, True, True, False]
    assert batch["audio_lengths"][4] == 0 and torch.all(batch["audio"][4] == 0)
    assert any(name in failed for failed in loader.stats.failed)


def test_lower_max_duration_from_the_pipeline(folder):
    pipe = mp.Pipeline(source=mp.loaders.folder(folder, extensions=["flac"]), decode={"audio": mp.decoders.audio()},
                       batch_size=2, seed=0, device="cpu", on_error="skip", max_duration=1.3)
    total = sum(1 for _ in pipe.loader(shuffle=False))
    assert total > 0
    stats = pipe.loader(shuffle=False)
    for batch in stats:
        assert np.all(batch["audio_lengths"].numpy() <= 1.3 * 16000)
    assert any("max_duration=1.3" in r for r in stats.stats.errors)
