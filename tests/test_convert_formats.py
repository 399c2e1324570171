"""`mediapipe convert` reads TFRecord, RecordIO, Hugging Face (save_to_disk and Parquet) and NeMo
datasets: the shards hold the same images (JPEGs copied byte for byte), labels, texts and, for a
NeMo utterance, its segment only; a corrupt record is reported by name, the rest converted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mediapipe as mp
from mediapipe.dataset.convert import convert

pytest.importorskip("tfrecord")
datasets = pytest.importorskip("datasets")


def _converted(out: Path) -> dict[str, tuple]:
    """label, image bytes and caption/text of every converted sample, by its text (unique here)."""
    source = mp.loaders.shards(out)
    rows = {}
    for i in range(len(source)):
        ref = source.ref(i)
        rows[ref.fields.get("text") or ref.fields.get("caption")] = (ref.label, ref.blob("image").read())
    return rows


def test_tfrecord_recordio_and_hf_convert_to_the_same_shards(tmp_path):
    from tests.helpers import make_rec, write_imagenet_tfrecord

    rows = write_imagenet_tfrecord(tmp_path / "train.tfrecord")
    result = convert(tmp_path / "train.tfrecord", tmp_path / "from_tfrecord", shard_size=4)
    assert result.num_samples == len(rows) and not result.failures
    source = mp.loaders.shards(tmp_path / "from_tfrecord")
    by_label_image = sorted((source.ref(i).label, source.ref(i).blob("image").read()) for i in range(len(source)))
    assert by_label_image == sorted((r["label"], r["image"]) for r in rows)

    (tmp_path / "rec").mkdir()
    rec, items = make_rec(tmp_path / "rec")
    result = convert(rec, tmp_path / "from_rec")
    # record 2's id (the magic number in both halves: above 2^63) does not fit the converted format: reported
    assert [f["input"] for f in result.failures] == ["train.rec:2"] and "'id'" in result.failures[0]["reason"]
    source = mp.loaders.shards(tmp_path / "from_rec")
    assert sorted(source.ref(i).blob("image").read() for i in range(len(source))) == sorted(
        x[2] for n, x in enumerate(items) if n != 2)

    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": r["image"], "path": None} for r in rows], "label": [r["label"] for r in rows],
         "caption": [r["text"] for r in rows]},
        features=datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=list("abcd")),
                                    "caption": datasets.Value("string")}))
    ds.save_to_disk(str(tmp_path / "hf"))
    ds.to_parquet(str(tmp_path / "hf.parquet"))
    expected = {r["text"]: (r["label"], r["image"]) for r in rows}
    for src, out in ((tmp_path / "hf", "from_hf"), (tmp_path / "hf.parquet", "from_parquet")):
        convert(src, tmp_path / out)
        assert _converted(tmp_path / out) == expected
        assert json.loads((tmp_path / out / "manifest.json").read_text())["classes"] == list("abcd")


def test_a_nemo_manifest_converts_each_utterance_to_its_segment(tmp_path):
    sf = pytest.importorskip("soundfile")
    t = np.arange(32000) / 16000
    x = (0.4 * np.sin(2 * np.pi * (200 + 300 * t) * t)).astype(np.float32)
    sf.write(tmp_path / "long.flac", x, 16000)
    whole = sf.read(tmp_path / "long.flac", dtype="float32")[0]
    rows = [{"audio_filepath": "long.flac", "offset": 0.5, "duration": 0.25, "text": "first"},
            {"audio_filepath": "long.flac", "offset": 1.0, "duration": 1.0, "text": "second"}]
    (tmp_path / "manifest.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the command line, as a user runs it
    subprocess.run([sys.executable, "-m", "mediapipe.cli", "convert", str(tmp_path / "manifest.json"),
                    str(tmp_path / "out")], check=True, capture_output=True)
    source = mp.loaders.shards(tmp_path / "out")
    pipe = mp.Pipeline(source=source, decode={"audio": mp.decoders.audio()}, batch_size=1, seed=0)
    for i in range(len(source)):
        sample = pipe.dataset()[i]
        row = next(r for r in rows if r["text"] == source.ref(i).fields["text"])
        start, n = int(row["offset"] * 16000), int(row["duration"] * 16000)
        np.testing.assert_array_equal(sample["audio"][0].numpy(), whole[start:start + n])
        assert source.meta(i)["duration"] == pytest.approx(row["duration"])


def test_a_corrupt_record_is_reported_by_name_and_the_rest_converted(tmp_path):
    from tests.helpers import write_imagenet_tfrecord

    path = tmp_path / "train.tfrecord"
    rows = write_imagenet_tfrecord(path)
    source = mp.loaders.tfrecord(path)
    offset = int(Path(str(path) + ".idx").read_text().splitlines()[2].split()[0])
    data = bytearray(path.read_bytes())
    data[offset + 40] ^= 0xFF
    path.write_bytes(bytes(data))
    assert len(source) == len(rows)
    result = convert(path, tmp_path / "out")
    assert result.num_samples == len(rows) - 1
    assert len(result.failures) == 1 and "record 2" in result.failures[0]["reason"]
