"""`mediapipe convert` counts an input as converted only when what it wrote will decode:
a damaged JPEG is refused (not copied), reported once with its reason, and the dataset
then passes `verify`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import mediapipe as mp
from mediapipe.cli import main as cli
from mediapipe.dataset.convert import convert
from mediapipe.dataset.index import read_index
from mediapipe.dataset.inspect import verify
from mediapipe.dataset.layout import MANIFEST, REPORT
from mediapipe.dataset.transcode import TranscodeError, TranscodeOptions, transcode_image
from mediapipe.synthetic import jpeg_bytes, photo_like
from tests.helpers import write_image_folder


def damaged_jpegs(good: bytes) -> dict[str, bytes]:
    """The ways a JPEG arrives broken: cut short, its end marker lost, a Huffman table that
    cannot be built, and entropy-coded data overwritten in the middle of the scan."""
    dht = good.find(b"\xff\xc4")
    bogus_table = bytearray(good)
    bogus_table[dht + 5 : dht + 21] = bytes([255] * 16)  # 16 code-length counts summing past 256
    sos = good.find(b"\xff\xda")
    scribbled = bytearray(good)
    middle = (sos + len(good)) // 2
    noise = np.random.default_rng(0).integers(0, 255, 64, dtype=np.uint8).tobytes().replace(b"\xff", b"\x00")
    scribbled[middle : middle + 64] = noise
    return {"truncated": good[: len(good) // 2], "no_eoi": good[:-2], "bad_huffman_table": bytes(bogus_table),
            "corrupt_scan": bytes(scribbled)}


@pytest.fixture(scope="module")
def good_jpeg() -> bytes:
    return jpeg_bytes(photo_like(120, 160, 3), quality=90)


@pytest.mark.parametrize("name", ["truncated", "no_eoi", "bad_huffman_table", "corrupt_scan"])
@pytest.mark.parametrize("reencode", [False, True])
def test_a_damaged_jpeg_is_refused_with_its_reason(good_jpeg: bytes, name: str, reencode: bool) -> None:
    data = damaged_jpegs(good_jpeg)[name]
    with pytest.raises(TranscodeError, match=r"^image: damaged JPEG \(.+\)$"):
        transcode_image(data, TranscodeOptions(reencode=reencode))
    assert transcode_image(good_jpeg, TranscodeOptions())[1] == good_jpeg  # a sound JPEG is still copied


def test_convert_reports_damaged_jpegs_once_and_the_dataset_verifies(good_jpeg: bytes, tmp_path: Path,
                                                                    capsys) -> None:
    src = write_image_folder(tmp_path / "src", 4, classes=2, scale=0.2)
    damaged = damaged_jpegs(good_jpeg)
    for name, data in damaged.items():
        (src / "class1" / f"{name}.jpg").write_bytes(data)
    out = tmp_path / "out"
    assert cli(["convert", str(src), str(out), "--no-progress", "--shard-size", "3"]) == 1
    err = capsys.readouterr().err
    for name in damaged:
        assert err.count(f"{name}.jpg") == 1, err  # printed once, in the final list
    assert "Traceback" not in err
    report = json.loads((out / REPORT).read_text())["failures"]
    assert sorted(f["input"] for f in report) == sorted(f"class1/{name}.jpg" for name in damaged)
    assert all(f["reason"].startswith("image: damaged JPEG (") for f in report), report
    assert verify(out) == []
    source = mp.loaders.shards(out)
    assert len(source) == 4
    pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image()}, batch_size=1, device="cpu")
    dataset = pipe.dataset()
    assert all(dataset[i]["image"].shape[0] == 3 for i in range(len(source)))  # libjpeg-turbo, strict


def test_cmyk_and_grayscale_jpegs_are_still_copied(tmp_path: Path) -> None:
    import io

    from PIL import Image

    picture = Image.fromarray(photo_like(48, 64, 5))
    for mode in ("CMYK", "L"):
        buf = io.BytesIO()
        picture.convert(mode).save(buf, format="JPEG", quality=90)
        ext, out, meta = transcode_image(buf.getvalue(), TranscodeOptions())
        assert out == buf.getvalue() and meta["copied"] is True



def test_verify_decodes_jpegs_as_strictly_as_the_loader(good_jpeg: bytes, tmp_path: Path, capsys) -> None:
    """Damage that Pillow decodes past (and libjpeg-turbo, strict, refuses) fails verify."""
    import hashlib

    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    (src / "photo.jpg").write_bytes(good_jpeg)
    out = tmp_path / "out"
    convert(tmp_path / "src", out)
    member = read_index(out / "shard-000000.idx")[0][0]
    tar = out / "shard-000000.tar"
    data = bytearray(tar.read_bytes())
    data[member.offset : member.offset + member.size] = damaged_jpegs(good_jpeg)["corrupt_scan"]  # same size
    tar.write_bytes(bytes(data))
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["shards"][0]["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    (out / MANIFEST).write_text(json.dumps(manifest))
    problems = verify(out)
    assert [(p["member"], p["reason"].split(" (")[0]) for p in problems] == [
        ("a_photo.jpg", "cannot decode: TranscodeError: image: damaged JPEG")], problems
    assert cli(["verify", str(out)]) == 1


def test_inputs_whose_numbers_json_cannot_hold_are_reported(good_jpeg: bytes, tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"{i}.jpg").write_bytes(good_jpeg)
    rows = ['{"path": "0.jpg", "weight": 0.5}', '{"path": "1.jpg", "weight": NaN}', '{"path": "2.jpg", "weight": 1e400}']
    (tmp_path / "train.jsonl").write_text("\n".join(rows) + "\n")
    result = convert(tmp_path / "train.jsonl", tmp_path / "out")
    assert sorted((f["input"].rsplit("/", 1)[-1], f["reason"]) for f in result.failures) == [
        ("1.jpg", "field 'weight' is nan, not a finite number"), ("2.jpg", "field 'weight' is inf, not a finite number")]
    source = mp.loaders.shards(tmp_path / "out")
    assert len(source) == 1 and source.ref(0).fields == {"weight": 0.5}
