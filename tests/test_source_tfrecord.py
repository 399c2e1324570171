"""TFRecord source: files written by the `tfrecord` package's writer; DALI's reader as the oracle;
truncated records, bad CRCs, wrong lengths and stale indices get named errors."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe.errors import SourceError
from mediapipe.loaders.sources.tfrecord import BOXES, masked_crc
from mediapipe.synthetic import jpeg_bytes, photo_like
from tests.helpers import write_imagenet_tfrecord

tfrecord_pkg = pytest.importorskip("tfrecord")

@pytest.fixture()
def records(tmp_path: Path) -> tuple[Path, list[dict]]:
    path = tmp_path / "train-00000-of-00001.tfrecord"
    return path, write_imagenet_tfrecord(path)


FEATURES = {"image": "image/encoded", "label": "image/class/label", "text": "image/class/text", "boxes": BOXES}


def test_reads_what_the_tfrecord_writer_wrote_and_builds_its_index(records):
    path, rows = records
    source = mp.loaders.tfrecord(path, FEATURES)
    assert len(source) == len(rows)
    for i, row in enumerate(rows):
        ref = source.ref(i)
        assert ref.blobs["image"].read() == row["image"]
        assert ref.label == row["label"] and ref.fields["text"] == row["text"]
        height, width = 40 + 4 * i, 56  # the image's size: TF's normalised boxes become its pixels
        expected = torch.tensor(row["boxes"], dtype=torch.float32).reshape(-1, 4) * torch.tensor(
            [width, height, width, height])
        assert ref.meta == {"width": width, "height": height}
        torch.testing.assert_close(ref.fields["boxes"], expected)
    # the index, built on first open, is the tfrecord package's own (and DALI's tfrecord2idx) format
    oracle = path.parent / "oracle.idx"
    from tfrecord.tools.tfrecord2idx import create_index

    create_index(str(path), str(oracle))
    assert Path(str(path) + ".idx").read_text() == oracle.read_text()


def test_dali_reads_the_same_records_with_the_built_index(records):
    dali = pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn
    from nvidia.dali import tfrecord as tfrec

    path, rows = records
    source = mp.loaders.tfrecord(path)
    index = str(path) + ".idx"

    @dali.pipeline_def(batch_size=len(rows), num_threads=1, device_id=None)
    def pipe():
        out = fn.readers.tfrecord(path=str(path), index_path=index, random_shuffle=False,
                                  features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                                            "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)})
        return out["image/encoded"], out["image/class/label"]

    p = pipe()
    p.build()
    images, labels = p.run()
    for i in range(len(rows)):
        assert bytes(np.array(images[i])) == source.ref(i).blobs["image"].read()
        assert int(np.array(labels[i])[0]) == source.ref(i).label


def test_a_pipeline_batches_images_labels_and_texts(records):
    path, rows = records
    source = mp.loaders.tfrecord(path, {"image": "image/encoded", "label": "image/class/label",
                                        "text": "image/class/text"})
    pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image()},
                       augment=[mp.augment.Resize((32, 32))], batch_size=3, seed=0)
    batches = list(pipe.loader(shuffle=True))
    seen = sorted(int(i) for b in batches for i in b["index"])
    assert seen == list(range(len(rows)))
    for b in batches:
        assert b["image"].shape == (3, 3, 32, 32)
        assert b["text"] == [rows[int(i)]["text"] for i in b["index"]]
        assert b["label"].tolist() == [rows[int(i)]["label"] for i in b["index"]]


def _offsets(path: Path) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in line.split()) for line in Path(str(path) + ".idx").read_text().splitlines()]


def test_a_truncated_file_is_named_with_its_record(records):
    path, rows = records
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(SourceError, match=rf"record {len(rows) - 1}.*truncated"):
        mp.loaders.tfrecord(path)


def test_a_length_field_of_2_63_with_a_valid_crc_is_refused_before_reading(records):
    path, _ = records
    mp.loaders.tfrecord(path)
    offset, _ = _offsets(path)[2]
    Path(str(path) + ".idx").unlink()
    data = bytearray(path.read_bytes())
    length = struct.pack("<Q", 2**63)
    data[offset:offset + 12] = length + struct.pack("<I", masked_crc(length))
    path.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"record 2.*length field says 9223372036854775808"):
        mp.loaders.tfrecord(path)


def test_a_bad_data_crc_and_a_wrong_length_are_named_errors(records, tmp_path):
    path, rows = records
    source = mp.loaders.tfrecord(path)
    offset, size = _offsets(path)[3]
    data = bytearray(path.read_bytes())
    data[offset + 12 + 40] ^= 0xFF  # a payload byte
    path.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"record 3.*data CRC mismatch"):
        source.ref(3)
    # the index says one size, the record's length field another
    other = tmp_path / "stale.idx"
    entries = _offsets(path)
    entries[1] = (entries[1][0], entries[1][1] - 4)
    other.write_text("".join(f"{o} {s}\n" for o, s in entries))
    stale = mp.loaders.tfrecord(path, index_paths=[other])
    with pytest.raises(SourceError, match=r"record 1.*wrong length"):
        stale.ref(1)


def test_an_index_pointing_past_the_end_of_the_file_is_refused(records, tmp_path):
    path, _ = records
    index = tmp_path / "bad.idx"
    index.write_text(f"0 100\n{path.stat().st_size - 8} 64\n")
    with pytest.raises(SourceError, match="entry 1 .* outside"):
        mp.loaders.tfrecord(path, index_paths=[index])
    index.write_text("0 100\nnot numbers\n")
    with pytest.raises(SourceError, match=r"bad.idx:2"):
        mp.loaders.tfrecord(path, index_paths=[index])
    index.write_text(f"0 {2**70}\n")
    with pytest.raises(SourceError, match=r"bad.idx:1"):
        mp.loaders.tfrecord(path, index_paths=[index])


def test_on_error_skip_names_the_bad_record_and_keeps_going(records):
    path, rows = records
    source = mp.loaders.tfrecord(path)
    offset, _ = _offsets(path)[4]
    data = bytearray(path.read_bytes())
    data[offset + 30] ^= 0x55
    path.write_bytes(bytes(data))
    pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image()},
                       augment=[mp.augment.Resize((24, 24))], batch_size=2, seed=0, on_error="skip")
    loader = pipe.loader(shuffle=False)
    batches = list(loader)
    assert sum(len(b["index"]) for b in batches) == len(rows)
    assert any("record 4" in str(p) for p in loader.stats.failed)


def test_non_utf8_text_and_garbage_protobufs_are_named(tmp_path):
    path = tmp_path / "bad.tfrecord"
    writer = tfrecord_pkg.TFRecordWriter(str(path))
    writer.write({"image/encoded": (jpeg_bytes(photo_like(32, 32, 1)), "byte"), "image/class/label": (1, "int"),
                  "image/class/text": (b"\xff\xfe caption", "byte")})
    writer.close()
    source = mp.loaders.tfrecord(path, {"image": "image/encoded", "text": "image/class/text"})
    with pytest.raises(SourceError, match=r"record 0.*image/class/text.*not UTF-8"):
        source.ref(0)
    # a record whose payload is not a protobuf (its framing and CRCs are right)
    payload = b"\x0a\xff\xff\xff\xff\x0f" + b"x" * 20  # field 1, a length of 2^32 - 1
    length = struct.pack("<Q", len(payload))
    path.write_bytes(length + struct.pack("<I", masked_crc(length)) + payload + struct.pack("<I", masked_crc(payload)))
    Path(str(path) + ".idx").unlink()
    with pytest.raises(SourceError, match=r"record 0.*not a tf.train.Example.*remain"):
        mp.loaders.tfrecord(path).ref(0)


def test_batches_are_the_same_whatever_the_workers_and_ranks_split_the_records(records):
    path, rows = records
    pipe = mp.Pipeline(source=mp.loaders.tfrecord(path), decode={"image": mp.decoders.image()},
                       augment=[mp.augment.RandomResizedCrop(24), mp.augment.HorizontalFlip()], batch_size=2, seed=3)
    inline = list(pipe.loader(shuffle=True))
    in_workers = list(pipe.loader(shuffle=True, num_workers=2))
    assert len(inline) == len(in_workers) == 3
    for a, b in zip(inline, in_workers):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])
    ranks = [[int(i) for b in pipe.loader(shuffle=True, rank=r, world_size=2) for i in b["index"]] for r in (0, 1)]
    assert sorted(ranks[0] + ranks[1]) == list(range(len(rows))) and not set(ranks[0]) & set(ranks[1])
