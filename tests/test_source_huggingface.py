"""Hugging Face datasets and Parquet: datasets written by `datasets` itself (Dataset.from_dict with
Image()/Audio()/ClassLabel features, save_to_disk, to_parquet); the row-group window sampler;
garbage bytes, path-only values, truncated files and non-UTF-8 text."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe.errors import DecodeError, SourceError
from mediapipe.synthetic import jpeg_bytes, photo_like

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

CLASSES = ["cat", "dog", "fox"]
COUNT = 12


@pytest.fixture(scope="module")
def hf_images(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """An image dataset written by `datasets`: save_to_disk (a DatasetDict) and to_parquet in row
    groups of 4."""
    root = tmp_path_factory.mktemp("hf")
    rows = [{"image": {"bytes": jpeg_bytes(photo_like(40 + 2 * i, 52, seed=i), quality=90), "path": f"{i}.jpg"},
             "label": i % 3, "caption": f"photo number {i} — ünïcode"} for i in range(COUNT)]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=CLASSES),
                                  "caption": datasets.Value("string")})
    ds = datasets.Dataset.from_dict({k: [r[k] for r in rows] for k in rows[0]}, features=features)
    datasets.DatasetDict({"train": ds, "test": ds.select(range(3)).flatten_indices()}).save_to_disk(root / "saved")
    (root / "parquet" / "data").mkdir(parents=True)
    pq.write_table(ds.data.table, root / "parquet" / "data" / "train-00000-of-00001.parquet", row_group_size=4)
    ds.to_parquet(str(root / "plain.parquet"))
    return root, rows


def test_save_to_disk_reads_the_bytes_labels_classes_and_captions(hf_images):
    root, rows = hf_images
    source = mp.loaders.huggingface(root / "saved", split="train")
    assert type(source).__name__ == "ArrowSource"
    assert len(source) == COUNT and source.classes == CLASSES
    for i, row in enumerate(rows):
        ref = source.ref(i)
        assert ref.blobs["image"].read() == row["image"]["bytes"]
        assert ref.label == row["label"] and ref.fields["caption"] == row["caption"]
    assert len(mp.loaders.huggingface(root / "saved", split="test")) == 3
    with pytest.raises(SourceError, match="pass split="):
        mp.loaders.huggingface(root / "saved")
    with pytest.raises(SourceError, match="nothing is downloaded"):
        mp.loaders.huggingface("imagenet-1k-that-is-not-here")


def test_parquet_files_and_a_dataset_object_read_the_same_samples(hf_images):
    root, rows = hf_images
    for source in (mp.loaders.huggingface(root / "parquet", split="train"), mp.loaders.parquet(root / "plain.parquet"),
                   mp.loaders.huggingface(datasets.load_from_disk(str(root / "saved" / "train")))):
        assert len(source) == COUNT and source.classes == CLASSES
        for i in (0, 5, 11):
            ref = source.ref(i)
            assert ref.blobs["image"].read() == rows[i]["image"]["bytes"]
            assert (ref.label, ref.fields["caption"]) == (rows[i]["label"], rows[i]["caption"])
    assert mp.loaders.huggingface(root / "parquet").row_groups().tolist() == [0] * 4 + [1] * 4 + [2] * 4


def test_a_pipeline_decodes_hf_images_like_pillow(hf_images):
    from PIL import Image

    root, rows = hf_images
    source = mp.loaders.huggingface(root / "saved", split="train", columns={"image": "image", "label": "label"})
    pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image(backend="pillow")}, batch_size=1, seed=0)
    sample = pipe.dataset()[3]
    expected = np.asarray(Image.open(io.BytesIO(rows[3]["image"]["bytes"])).convert("RGB"))
    assert torch.equal(sample["image"], torch.from_numpy(expected).permute(2, 0, 1))
    assert "caption" not in sample and sample["label"] == rows[3]["label"]


def test_audio_features_written_by_datasets(tmp_path):
    sf = pytest.importorskip("soundfile")
    waves = []
    for i in range(3):
        t = np.arange(1600 + 400 * i) / 16000
        x = (0.3 * np.sin(2 * np.pi * (220 + 50 * i) * t)).astype(np.float32)
        buf = io.BytesIO()
        sf.write(buf, x, 16000, format="FLAC")
        waves.append((buf.getvalue(), x))
    ds = datasets.Dataset.from_dict(
        {"audio": [{"bytes": b, "path": f"{i}.flac"} for i, (b, _) in enumerate(waves)],
         "text": ["one", "two", "three"], "duration": [len(x) / 16000 for _, x in waves]},
        features=datasets.Features({"audio": datasets.Audio(), "text": datasets.Value("string"),
                                    "duration": datasets.Value("float64")}))
    ds.save_to_disk(str(tmp_path / "speech"))
    source = mp.loaders.huggingface(tmp_path / "speech")
    assert [source.meta(i)["duration"] for i in range(3)] == [0.1, 0.125, 0.15]  # no file opened
    pipe = mp.Pipeline(source=source, decode={"audio": mp.decoders.audio(sample_rate=16000)}, batch_size=3, seed=0)
    batch = next(iter(pipe.loader(shuffle=False)))
    assert batch["text"] == ["one", "two", "three"]
    for i, (_, x) in enumerate(waves):
        n = int(batch["audio_lengths"][i])
        assert n == len(x)
        np.testing.assert_allclose(batch["audio"][i, 0, :n].numpy(), x, atol=1e-4)


def test_the_window_sampler_stays_within_its_row_groups_covers_the_epoch_and_resumes(hf_images):
    root, _ = hf_images
    source = mp.loaders.huggingface(root / "parquet", split="train")
    groups = source.row_groups()
    sampler = source.window_sampler(batch_size=2, window=2, seed=7)
    order = sampler.order()
    assert sorted(order.tolist()) == list(range(COUNT))
    for w in range(0, COUNT, 8):  # each window of 2 row groups (8 samples) holds only those row groups
        assert len(set(groups[order[w:w + 8]].tolist())) <= 2
    assert not np.array_equal(order, np.arange(COUNT))
    ranks = [source.window_sampler(batch_size=2, window=2, seed=7, rank=r, world_size=2) for r in (0, 1)]
    parts = [np.concatenate([b.indices for b in s.batches()]) for s in ranks]
    assert sorted(np.concatenate(parts).tolist()) == list(range(COUNT))
    pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image()},
                       augment=[mp.augment.Resize((16, 16))], batch_size=2, seed=7)
    full = [b["index"].tolist() for b in pipe.loader(sampler=source.window_sampler(2, window=2, seed=7))]
    loader = pipe.loader(sampler=source.window_sampler(2, window=2, seed=7))
    it = iter(loader)
    for _ in range(2):
        next(it)
    state = loader.state_dict()
    it.close()
    again = pipe.loader(sampler=source.window_sampler(2, window=2, seed=7))
    again.load_state_dict(state)
    assert [b["index"].tolist() for b in again] == full[2:]
    with pytest.raises(ValueError, match="window"):
        source.window_sampler(2, window=3, seed=7).load_state_dict(state["sampler"])


def test_garbage_in_the_bytes_column_is_a_decode_error_naming_the_row(tmp_path):
    table = pa.table({"image": pa.array([jpeg_bytes(photo_like(32, 32, 0)), b"\x00garbage" * 50], pa.binary()),
                      "label": [0, 1]})
    pq.write_table(table, tmp_path / "bad.parquet")
    pipe = mp.Pipeline(source=mp.loaders.parquet(tmp_path / "bad.parquet"), decode={"image": mp.decoders.image()},
                       batch_size=1, seed=0)
    assert pipe.dataset()[0]["image"].shape == (3, 32, 32)
    with pytest.raises(DecodeError, match=r"bad.parquet: row 1: image"):
        pipe.dataset()[1]


def test_path_only_values_need_a_media_root_and_stay_inside_it(tmp_path):
    (tmp_path / "media").mkdir()
    image = jpeg_bytes(photo_like(32, 32, 0))
    (tmp_path / "media" / "a.jpg").write_bytes(image)
    (tmp_path / "secret.jpg").write_bytes(image)
    struct = pa.array([{"bytes": None, "path": "a.jpg"}, {"bytes": None, "path": "../secret.jpg"},
                       {"bytes": None, "path": None}], pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"image": struct}), tmp_path / "paths.parquet")
    source = mp.loaders.parquet(tmp_path / "paths.parquet")
    with pytest.raises(SourceError, match="media_root"):
        source.ref(0).blobs["image"].read()
    rooted = mp.loaders.parquet(tmp_path / "paths.parquet", media_root=tmp_path / "media")
    assert rooted.ref(0).blobs["image"].read() == image
    with pytest.raises(SourceError, match=r"row 1.*leaves media_root"):
        rooted.ref(1).blobs["image"].read()
    with pytest.raises(SourceError, match=r"row 2.*neither bytes nor a path"):
        rooted.ref(2).blobs["image"].read()


def test_truncated_files_and_non_utf8_text_are_named(hf_images, tmp_path):
    root, _ = hf_images
    data = (root / "plain.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match=r"cut.parquet.*not a readable Parquet file"):
        mp.loaders.parquet(tmp_path / "cut.parquet")
    arrow = next((root / "saved" / "train").glob("*.arrow"))
    (tmp_path / "cut").mkdir()
    for name in ("state.json", "dataset_info.json"):
        (tmp_path / "cut" / name).write_bytes((root / "saved" / "train" / name).read_bytes())
    (tmp_path / "cut" / arrow.name).write_bytes(arrow.read_bytes()[:5000])
    with pytest.raises(SourceError, match="not a readable Arrow stream"):
        mp.loaders.huggingface(tmp_path / "cut")
    # a string column holding bytes that are not UTF-8 (written as binary, then relabelled as string)
    raw = pa.array([b"fine", b"\xff\xfebad"], pa.binary())
    text = pa.Array.from_buffers(pa.string(), 2, raw.buffers())
    pq.write_table(pa.table({"image": pa.array([b"x", b"y"], pa.binary()), "text": text}), tmp_path / "t.parquet")
    source = mp.loaders.parquet(tmp_path / "t.parquet")
    assert source.ref(0).fields["text"] == "fine"
    with pytest.raises(SourceError, match=r"t.parquet: row 1.*not UTF-8"):
        source.ref(1)


def test_the_row_group_cache_reads_each_row_group_once_and_stays_bounded(hf_images):
    from mediapipe.loaders.sources.parquet import ROW_GROUPS

    root, _ = hf_images
    source = mp.loaders.parquet(root / "parquet", columns={"image": "image"}, cache_bytes=1)
    ROW_GROUPS._reset()  # as in a new worker process
    before = ROW_GROUPS.reads
    for i in range(COUNT):  # in order: one read per row group even with a tiny cache
        source.ref(i).blobs["image"].read()
    assert ROW_GROUPS.reads - before == 3
    assert len(ROW_GROUPS._chunks) == 1  # the bound: only the last row group is kept


def test_a_state_json_naming_a_file_outside_its_folder_is_refused(hf_images, tmp_path):
    import json
    import shutil

    root, _ = hf_images
    shutil.copytree(root / "saved" / "train", tmp_path / "ds")
    state = json.loads((tmp_path / "ds" / "state.json").read_text())
    state["_data_files"] = [{"filename": "../../../etc/passwd"}]
    (tmp_path / "ds" / "state.json").write_text(json.dumps(state))
    with pytest.raises(SourceError, match="not a file of this folder"):
        mp.loaders.huggingface(tmp_path / "ds")


def test_non_utf8_text_in_a_saved_arrow_file_is_named(tmp_path):
    raw = pa.array([b"fine", b"\xc3\x28 broken"], pa.binary())
    text = pa.Array.from_buffers(pa.string(), 2, raw.buffers())
    ds = datasets.Dataset(pa.table({"image": pa.array([b"x", b"y"], pa.binary()), "text": text}))
    ds.save_to_disk(str(tmp_path / "ds"))
    source = mp.loaders.huggingface(tmp_path / "ds")
    assert source.ref(0).fields["text"] == "fine"
    with pytest.raises(SourceError, match=r"row 1.*'text' is not UTF-8"):
        source.ref(1)
