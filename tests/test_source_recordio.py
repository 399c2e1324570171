"""MXNet RecordIO source: files built to the im2rec layout by dmlc's writing rules (a payload holding
the magic number at an aligned position is split in parts); DALI's readers.mxnet as the oracle."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

import mediapipe as mp
from mediapipe.errors import SourceError
from mediapipe.loaders.sources.recordio import IR_HEADER
from mediapipe.synthetic import jpeg_bytes, photo_like
from tests.helpers import dmlc_write_record, make_rec, write_rec


@pytest.fixture()
def rec(tmp_path: Path) -> tuple[Path, list]:
    return make_rec(tmp_path)


def test_reads_im2rec_records_with_labels_ids_and_multi_part_payloads(rec):
    path, items = rec
    raw = path.read_bytes()
    assert struct.pack("<I", (1 << 29) | 8) in raw  # record 2 was written in parts
    source = mp.loaders.recordio(path, classes=["a", "b", "c"])
    assert len(source) == len(items) and source.classes == ["a", "b", "c"]
    for i, (label, ident, image) in enumerate(items):
        ref = source.ref(i)
        assert ref.blobs["image"].read() == image
        assert ref.label == int(label) and ref.fields["id"] == ident


def test_dali_readers_mxnet_reads_the_same_images_and_labels(tmp_path):
    dali = pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn

    path, items = make_rec(tmp_path, split=False)  # DALI's reader takes single-part records only
    source = mp.loaders.recordio(path)

    @dali.pipeline_def(batch_size=len(items), num_threads=1, device_id=None)
    def pipe():
        images, labels = fn.readers.mxnet(path=[str(path)], index_path=[str(path.with_suffix(".idx"))],
                                          random_shuffle=False)
        return images, labels

    p = pipe()
    p.build()
    images, labels = p.run()
    for i in range(len(items)):
        assert bytes(np.array(images[i])) == source.ref(i).blobs["image"].read()
        assert float(np.array(labels[i]).reshape(-1)[0]) == source.ref(i).label


def test_label_arrays_become_a_tensor_and_a_missing_idx_is_built(tmp_path):
    image = jpeg_bytes(photo_like(32, 32, seed=3))
    path = tmp_path / "multi.rec"
    write_rec(path, [([1.0, 0.0, 1.0], 7, image), ([0.0, 1.0, 0.0], 8, image)])
    path.with_suffix(".idx").unlink()
    source = mp.loaders.recordio(path)
    assert source.ref(1).fields["labels"].tolist() == [0.0, 1.0, 0.0] and source.ref(1).label is None
    assert Path(str(path) + ".idx").read_text() == f"0\t0\n1\t{8 + 24 + 12 + len(image) + (-len(image) % 4)}\n"
    pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image()}, batch_size=2, seed=0)
    batch = next(iter(pipe.loader(shuffle=False)))
    assert batch["labels"].shape == (2, 3) and batch["image"].shape == (2, 3, 32, 32)


def test_wrong_lengths_bad_magic_and_indices_past_the_end_are_named(rec, tmp_path):
    path, items = rec
    idx = path.with_suffix(".idx")
    offsets = [int(line.split("\t")[1]) for line in idx.read_text().splitlines()]
    data = bytearray(path.read_bytes())
    data[offsets[1] + 4:offsets[1] + 8] = struct.pack("<I", (1 << 29) - 1)  # a length past the next record
    data[offsets[3]:offsets[3] + 4] = b"\0\0\0\0"
    path.write_bytes(bytes(data))
    source = mp.loaders.recordio(path)
    with pytest.raises(SourceError, match=r"record 1.*wrong length.*536870911"):
        source.ref(1)
    with pytest.raises(SourceError, match=r"record 3.*bad magic"):
        source.ref(3)
    assert source.ref(0).blobs["image"].read() == items[0][2]
    bad = tmp_path / "bad.idx"
    bad.write_text(f"0\t0\n1\t{len(data) + 100}\n")
    with pytest.raises(SourceError, match=r"bad.idx:2.*outside"):
        mp.loaders.recordio(path, index_paths=[bad])


def test_a_truncated_rec_names_its_last_record(rec):
    path, items = rec
    path.write_bytes(path.read_bytes()[:-30])
    source = mp.loaders.recordio(path)
    with pytest.raises(SourceError, match=rf"record {len(items) - 1}.*wrong length"):
        source.ref(len(items) - 1)
    path.with_suffix(".idx").unlink()
    with pytest.raises(SourceError, match=rf"record {len(items) - 1}.*truncated"):
        mp.loaders.recordio(path)


def test_a_label_count_past_the_record_is_refused(tmp_path):
    path = tmp_path / "bad.rec"
    payload = IR_HEADER.pack(2**31, 0.0, 1, 0) + b"\xff\xd8\xff" + b"\0" * 40  # flag says 2^31 labels
    with open(path, "wb") as f:
        dmlc_write_record(f, payload)
    with pytest.raises(SourceError, match=r"record 0.*2147483648 labels"):
        mp.loaders.recordio(path).ref(0)
