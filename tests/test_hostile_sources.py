"""Hostile review of the dataset sources (Hugging Face, Parquet, TFRecord, RecordIO, labels):

- a Hub snapshot's splits are told apart exactly: an older ``push_to_hub``'s shard names with a
  hash (``train_clean-00000-of-00001-<hash>.parquet``) are split ``train_clean``, never ``train``;
  ``validation_matched.parquet`` and ``validation_mismatched.parquet`` are two splits; an old
  ``refs/convert/parquet`` layout (``plain_text/imdb-train.parquet``) names its splits; one split in
  the folders of several configs is refused rather than merged; ``mediapipe convert --split``;
- a ``ClassLabel``'s -1 (no label) or a label outside the named classes is refused naming the row,
  never delivered as a class (``classes[-1]`` would name the last class);
- a streamed ``IterableDataset`` is refused saying why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import mediapipe as mp
from mediapipe.errors import SourceError
from mediapipe.synthetic import jpeg_bytes, photo_like

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _table(first: int, count: int, labels: list[int] | None = None) -> pa.Table:
    images = [jpeg_bytes(photo_like(16, 16 + 2 * i, seed=first + i)) for i in range(count)]
    labels = labels if labels is not None else [(first + i) % 3 for i in range(count)]
    return pa.table({"image": pa.array(images, pa.binary()), "label": pa.array(labels, pa.int64()),
                     "caption": pa.array([f"row {first + i}" for i in range(count)])})


def _captions(source) -> list[str]:
    return [source.ref(i).fields["caption"] for i in range(len(source))]


def _write(root: Path, files: dict[str, int]) -> dict[str, list[str]]:
    """Each relative path with that many rows (captions numbered across files); returns each
    file's captions."""
    out, first = {}, 0
    for name, count in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_table(first, count), path)
        out[name] = [f"row {first + i}" for i in range(count)]
        first += count
    return out


# -- splits ------------------------------------------------------------------------------------------
def test_hashed_shard_names_of_an_older_push_to_hub_keep_their_split_names(tmp_path):
    written = _write(tmp_path, {"data/train-00000-of-00001-5d2ab2b2b4f5c0b5.parquet": 3,
                                "data/train_clean-00000-of-00001-9f8e7d6c5b4a3921.parquet": 2})
    with pytest.raises(SourceError, match=r"splits \['train', 'train_clean'\]"):
        mp.loaders.huggingface(tmp_path)
    with pytest.raises(SourceError, match="split"):
        mp.loaders.parquet(tmp_path / "data")
    for split, name in (("train", "data/train-00000-of-00001-5d2ab2b2b4f5c0b5.parquet"),
                        ("train_clean", "data/train_clean-00000-of-00001-9f8e7d6c5b4a3921.parquet")):
        assert _captions(mp.loaders.huggingface(tmp_path, split=split)) == written[name]


def test_a_split_word_with_more_to_its_name_is_its_own_split(tmp_path):
    written = _write(tmp_path, {"validation_matched.parquet": 2, "validation_mismatched.parquet": 3})
    with pytest.raises(SourceError, match=r"splits \['validation_matched', 'validation_mismatched'\]"):
        mp.loaders.huggingface(tmp_path)
    with pytest.raises(SourceError, match="no split 'validation'"):
        mp.loaders.huggingface(tmp_path, split="validation")
    assert _captions(mp.loaders.huggingface(tmp_path, split="validation_mismatched")) == \
        written["validation_mismatched.parquet"]
    # a split word and a number is the word's split: numbered files of one split are read together
    numbered = _write(tmp_path / "numbered", {"train_0.parquet": 2, "train_1.parquet": 2, "test.parquet": 1})
    assert _captions(mp.loaders.huggingface(tmp_path / "numbered", split="train")) == \
        numbered["train_0.parquet"] + numbered["train_1.parquet"]


def test_an_old_convert_layout_names_its_splits_after_the_dataset_name(tmp_path):
    written = _write(tmp_path, {"plain_text/imdb-train.parquet": 3, "plain_text/imdb-test.parquet": 2})
    with pytest.raises(SourceError, match=r"splits \['imdb-test', 'imdb-train'\]"):
        mp.loaders.huggingface(tmp_path)
    assert _captions(mp.loaders.huggingface(tmp_path, split="imdb-test")) == written["plain_text/imdb-test.parquet"]


@pytest.mark.parametrize("layout", ["{config}/train/0000.parquet", "{config}/train-00000-of-00001.parquet"])
def test_one_split_in_the_folders_of_several_configs_is_not_merged(tmp_path, layout):
    written = _write(tmp_path, {layout.format(config="en"): 2, layout.format(config="fr"): 3})
    for split in (None, "train"):
        with pytest.raises(SourceError, match=r"split 'train' is in several folders \['en', 'fr'\]"):
            mp.loaders.huggingface(tmp_path, split=split)
    assert _captions(mp.loaders.huggingface(tmp_path / "fr", split="train")) == written[layout.format(config="fr")]
    # a split's own sub-folders (hive partitions) are one split
    hive = _write(tmp_path / "hive", {"train/year=2020/a.parquet": 2, "train/year=2021/b.parquet": 1,
                                      "test/year=2020/c.parquet": 1})
    assert _captions(mp.loaders.huggingface(tmp_path / "hive", split="train")) == \
        hive["train/year=2020/a.parquet"] + hive["train/year=2021/b.parquet"]


def test_convert_takes_a_split(tmp_path):
    from mediapipe.cli import main

    written = _write(tmp_path / "snap", {"data/train-00000-of-00001-abcdef0123456789.parquet": 3,
                                         "data/test-00000-of-00001-0123456789abcdef.parquet": 2})
    assert main(["convert", str(tmp_path / "snap"), str(tmp_path / "all"), "--no-progress"]) == 2
    assert main(["convert", str(tmp_path / "snap"), str(tmp_path / "test"), "--split", "test", "--no-progress"]) == 0
    out = mp.loaders.shards(tmp_path / "test")
    assert sorted(_captions(out)) == written["data/test-00000-of-00001-0123456789abcdef.parquet"]
    assert main(["convert", str(tmp_path / "snap"), str(tmp_path / "none"), "--split", "valid", "--no-progress"]) == 2
    # a DatasetDict saved to disk, one split of it
    ds = datasets.Dataset(_table(0, 4))
    datasets.DatasetDict({"train": ds, "test": ds.select([2, 3])}).save_to_disk(str(tmp_path / "dict"))
    assert main(["convert", str(tmp_path / "dict"), str(tmp_path / "dtest"), "--split", "test", "--no-progress"]) == 0
    assert sorted(_captions(mp.loaders.shards(tmp_path / "dtest"))) == ["row 2", "row 3"]


# -- class labels outside the classes ----------------------------------------------------------------
def test_a_class_label_of_minus_one_is_refused_naming_the_row(tmp_path):
    features = datasets.Features({"image": datasets.Value("binary"), "label": datasets.ClassLabel(names=["a", "b"]),
                                  "caption": datasets.Value("string")})
    ds = datasets.Dataset.from_dict(_table(0, 4, labels=[0, -1, 1, -1]).to_pydict(), features=features)
    ds.save_to_disk(str(tmp_path / "saved"))
    ds.to_parquet(str(tmp_path / "labels.parquet"))
    for source in (mp.loaders.huggingface(tmp_path / "saved"), mp.loaders.huggingface(tmp_path / "labels.parquet"),
                   mp.loaders.huggingface(datasets.load_from_disk(str(tmp_path / "saved")))):
        assert source.classes == ["a", "b"]
        assert [source.ref(i).label for i in (0, 2)] == [0, 1]
        for row in (1, 3):
            with pytest.raises(SourceError, match=rf"row {row}'?: label -1 is not one of the 2 classes.*missing label"):
                source.ref(row)
        loader = mp.Pipeline(source, {"image": mp.decoders.image()}, [mp.augment.Resize((8, 8))], batch_size=2,
                             on_error="skip", device="cpu").loader(num_workers=0, shuffle=False)
        assert {int(x) for b in loader for x in b["label"]} <= {0, 1}
        assert sorted(int(f.split(": row ")[1][0]) for f in loader.stats.failed) == [1, 3]
    pq.write_table(_table(0, 3, labels=[2, 0, 1]), tmp_path / "plain.parquet")  # no ClassLabel: classes= names them
    assert mp.loaders.parquet(tmp_path / "plain.parquet").ref(0).label == 2
    with pytest.raises(SourceError, match="plain.parquet: row 0'?: label 2 is not one of the 2 classes"):
        mp.loaders.parquet(tmp_path / "plain.parquet", classes=["a", "b"]).ref(0)


def test_a_tfrecord_label_outside_its_named_classes_is_refused(tmp_path):
    tfrecord = pytest.importorskip("tfrecord")
    path = tmp_path / "imagenet.tfrecord"
    writer = tfrecord.TFRecordWriter(str(path))
    for label in (1, 2, 3):  # a label map numbered from 1, with names for 3 classes
        writer.write({"image/encoded": (jpeg_bytes(photo_like(16, 16, seed=label)), "byte"),
                      "image/class/label": (label, "int")})
    writer.close()
    source = mp.loaders.tfrecord(path, classes=["x", "y", "z"])
    assert [source.ref(i).label for i in (0, 1)] == [1, 2]
    with pytest.raises(SourceError, match=r"record 2: image/class/label'?: label 3 is not one of the 3 classes"):
        source.ref(2)
    assert mp.loaders.tfrecord(path).ref(2).label == 3  # no classes named: any whole number


def test_a_streamed_dataset_is_refused_saying_why(tmp_path):
    ds = datasets.Dataset(_table(0, 3))
    for streamed in (ds.to_iterable_dataset(), datasets.IterableDatasetDict({"train": ds.to_iterable_dataset()})):
        with pytest.raises(SourceError, match="streamed dataset has no random access"):
            mp.loaders.huggingface(streamed)
    with pytest.raises(TypeError, match="expected a path"):
        mp.loaders.huggingface(42)
