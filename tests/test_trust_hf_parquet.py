"""Hugging Face and Parquet sources read exactly what the dataset holds, or refuse:

- a ``datasets.Dataset`` that is a view of its cache files (select, shard, a split without
  shuffle, a sliced ``load_dataset`` split, filter, shuffle, sort, removed or renamed columns,
  several cache files, ``map`` results) gives the rows and columns ``ds[i]`` gives;
- a Hub-style Parquet snapshot with several splits is refused without ``split=`` (naming the
  splits and how to pick one), by the source and by ``mediapipe convert``; ``split=`` works;
- a class label that is not an integer (1.7, NaN, a uint64 above int64) is a `SourceError`
  naming the file and the row, never truncated; convert reports such a row;
- a null number names its file, row and column; a null text is ``None`` in the batch's list.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mediapipe as mp
from mediapipe.dataset.convert import convert
from mediapipe.errors import SourceError
from mediapipe.loaders.sources.folder import source_from_config
from mediapipe.synthetic import jpeg_bytes, photo_like

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

CLASSES = ["cat", "dog", "fox"]
COUNT = 10


def _rows(count: int = COUNT) -> list[dict]:
    return [{"image": {"bytes": jpeg_bytes(photo_like(24 + 2 * i, 30, seed=i), quality=85), "path": None},
             "label": i % 3, "caption": f"photo {i}"} for i in range(count)]


def _features() -> datasets.Features:
    return datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=CLASSES),
                              "caption": datasets.Value("string")})


def _from_rows(rows: list[dict]) -> datasets.Dataset:
    return datasets.Dataset.from_dict({k: [r[k] for r in rows] for k in rows[0]}, features=_features())


@pytest.fixture()
def saved(tmp_path: Path) -> datasets.Dataset:
    """A 10-row image dataset backed by its cache file (save_to_disk, then load_from_disk)."""
    _from_rows(_rows()).save_to_disk(str(tmp_path / "saved"))
    return datasets.load_from_disk(str(tmp_path / "saved"))


def _expected(ds: datasets.Dataset) -> list[dict]:
    """What ``ds[i]`` holds, raw (image bytes rather than a decoded picture)."""
    return [ds.with_format("arrow")[i].to_pylist()[0] for i in range(len(ds))]


def _assert_reads_like(source, ds: datasets.Dataset, fields: dict[str, str] | None = None) -> None:
    """``source`` gives ``ds``'s rows in order, and the columns it holds (``fields``: batch field ->
    dataset column; default every column of ``ds``)."""
    fields = fields or {c: c for c in ds.column_names}
    expected = _expected(ds)
    assert len(source) == len(ds)
    for i, row in enumerate(expected):
        ref = source.ref(i)
        got = dict(ref.fields)
        if ref.label is not None:
            got["label"] = ref.label
        for name, blob in ref.blobs.items():
            got[name] = blob.read()
        want = {field: row[column]["bytes"] if isinstance(row[column], dict) else row[column]
                for field, column in fields.items()}
        assert got == want, f"row {i}"


VIEWS = {
    "select a range": lambda ds: ds.select(range(3, 6)),
    "a contiguous shard": lambda ds: ds.shard(2, 1, contiguous=True),
    "a split without shuffle": lambda ds: ds.train_test_split(test_size=0.3, shuffle=False)["test"],
    "select rows in any order": lambda ds: ds.select([7, 2, 2, 5]),
    "filter": lambda ds: ds.filter(lambda r: r["label"] == 1),
    "shuffle": lambda ds: ds.shuffle(seed=3),
    "sort": lambda ds: ds.sort("caption", reverse=True),
    "flatten_indices": lambda ds: ds.shuffle(seed=1).flatten_indices(),
    "a slice of a shuffle": lambda ds: ds.shuffle(seed=2).select(range(2, 7)),
    "remove_columns": lambda ds: ds.remove_columns(["caption"]),
    "select_columns": lambda ds: ds.select_columns(["image", "label"]),
    "rename_column": lambda ds: ds.rename_column("caption", "text"),
    "rename then slice": lambda ds: ds.rename_column("label", "y").select(range(4, 9)),
    "map": lambda ds: ds.map(lambda r: {"caption": r["caption"] + "!"}),
    "cast a label to float": lambda ds: ds.cast_column("label", datasets.Value("float32")),
    "cast image decode=False": lambda ds: ds.cast_column("image", datasets.Image(decode=False)),
    "concatenate slices": lambda ds: datasets.concatenate_datasets([ds.select(range(6, 9)), ds.select(range(2))]),
    "concatenate a shuffle": lambda ds: datasets.concatenate_datasets([ds.shuffle(seed=4), ds.select(range(3))]),
}


@pytest.mark.parametrize("view", list(VIEWS))
def test_a_dataset_view_reads_exactly_its_rows_and_columns(saved, view):
    ds = VIEWS[view](saved)
    source = mp.loaders.huggingface(ds)
    _assert_reads_like(source, ds)
    again = source_from_config(source.to_config())  # what a worker or a saved config opens
    _assert_reads_like(again, ds)


def test_a_removed_column_is_not_read_and_a_renamed_one_is_read_by_its_new_name(saved):
    removed = mp.loaders.huggingface(saved.remove_columns(["caption"]))
    assert "caption" not in removed.ref(0).fields
    with pytest.raises(SourceError, match="no column 'caption'"):
        mp.loaders.huggingface(saved.remove_columns(["caption"]), columns={"caption": "caption"})
    renamed = saved.rename_column("caption", "text")
    source = mp.loaders.huggingface(renamed, columns={"text": "text"})
    assert [source.ref(i).fields["text"] for i in range(COUNT)] == [f"photo {i}" for i in range(COUNT)]
    with pytest.raises(SourceError, match="no column 'caption'"):
        mp.loaders.huggingface(renamed, columns={"caption": "caption"})
    relabelled = mp.loaders.huggingface(saved.rename_column("label", "y").select(range(2, 5)),
                                        columns={"image": "image", "label": "y"})
    assert [relabelled.ref(i).label for i in range(3)] == [2, 0, 1] and relabelled.classes == CLASSES


def test_a_dataset_of_several_cache_files_and_its_views(tmp_path):
    _from_rows(_rows()).save_to_disk(str(tmp_path / "sharded"), num_shards=3)
    ds = datasets.load_from_disk(str(tmp_path / "sharded"))
    assert len(ds.cache_files) == 3
    for view in (ds, ds.select(range(2, 8)), ds.shuffle(seed=5), ds.select(range(5, 9)).rename_column("caption", "t")):
        _assert_reads_like(mp.loaders.huggingface(view), view)


def test_a_sliced_load_dataset_split_reads_its_rows_only(tmp_path):
    pq.write_table(_from_rows(_rows()).data.table, tmp_path / "train.parquet")
    ds = datasets.load_dataset("parquet", data_files={"train": str(tmp_path / "train.parquet")}, split="train[2:5]",
                               cache_dir=str(tmp_path / "cache"))
    assert len(ds) == 3
    _assert_reads_like(mp.loaders.huggingface(ds), ds)


def test_a_pipeline_over_a_held_out_split_sees_only_that_split(saved):
    test = saved.train_test_split(test_size=0.3, shuffle=False)["test"]
    pipe = mp.Pipeline(source=mp.loaders.huggingface(test), decode={"image": mp.decoders.image(backend="pillow")},
                       augment=[mp.augment.Resize((16, 16))], batch_size=8, seed=0)
    captions = [c for batch in pipe.loader(num_workers=2, shuffle=False) for c in batch["caption"]]
    assert captions == ["photo 7", "photo 8", "photo 9"]


def test_columns_a_dataset_holds_in_memory_or_as_another_table_are_refused_by_name(saved):
    added = saved.add_column("score", [float(i) for i in range(COUNT)])
    with pytest.raises(SourceError, match="'score'.*in memory"):
        mp.loaders.huggingface(added)
    _assert_reads_like(mp.loaders.huggingface(added, columns={"image": "image", "label": "label"}), added,
                       {"image": "image", "label": "label"})
    with pytest.raises(SourceError, match="in memory"):
        mp.loaders.huggingface(_from_rows(_rows(3)))
    with pytest.raises(SourceError, match="flatten"):
        mp.loaders.huggingface(saved.flatten())
    with pytest.raises(SourceError, match="rows 10 to 11 .*in memory"):
        mp.loaders.huggingface(datasets.concatenate_datasets([saved, _from_rows(_rows(2))]))


def test_a_cast_the_cache_file_does_not_hold_is_refused_for_that_column(saved):
    schema = saved.data.schema
    narrower = pa.schema([f.with_type(pa.int32()) if f.name == "label" else f for f in schema])
    cast = datasets.Dataset(saved.data.cast(narrower))  # recorded as a replay, not written to a file
    with pytest.raises(SourceError, match="'label'.*int32.*int64"):
        mp.loaders.huggingface(cast)
    _assert_reads_like(mp.loaders.huggingface(cast, columns={"caption": "caption"}), cast, {"caption": "caption"})


def test_a_dataset_dict_object_needs_a_split_and_a_format_limits_the_default_columns(saved):
    splits = datasets.DatasetDict({"train": saved, "test": saved.select(range(8, 10))})
    with pytest.raises(SourceError, match=r"splits \['train', 'test'\]: pass split="):
        mp.loaders.huggingface(splits)
    _assert_reads_like(mp.loaders.huggingface(splits, split="test"), splits["test"])
    shown = saved.with_format("numpy", columns=["label", "caption"])
    assert sorted(shown[0]) == ["caption", "label"]
    _assert_reads_like(mp.loaders.huggingface(shown), shown, {"label": "label", "caption": "caption"})


# -- Hub-style Parquet snapshots ----------------------------------------------------------------
def _write_snapshot(root: Path, layout: str) -> dict[str, list[str]]:
    """A Hub snapshot of 6 train and 3 test rows, in ``data/<split>-NNNNN-of-NNNNN.parquet`` or in
    the ``default/<split>/NNNN.parquet`` layout; returns each split's captions."""
    table = _from_rows(_rows(9)).data.table
    parts = {"train": [table.slice(0, 4), table.slice(4, 2)], "test": [table.slice(6, 3)]}
    for split, tables in parts.items():
        for n, part in enumerate(tables):
            if layout == "data":
                path = root / "data" / f"{split}-{n:05d}-of-{len(tables):05d}.parquet"
            else:
                path = root / "default" / split / f"{n:04d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(part, path)
    (root / "README.md").write_text("---\nlicense: mit\n---\n")
    return {split: [c for t in tables for c in t.column("caption").to_pylist()] for split, tables in parts.items()}


@pytest.mark.parametrize("layout", ["data", "default"])
def test_a_snapshot_with_several_splits_needs_split(tmp_path, layout):
    captions = _write_snapshot(tmp_path / "snap", layout)
    with pytest.raises(SourceError, match=r"split.*'test'.*'train'.*split="):
        mp.loaders.huggingface(tmp_path / "snap")
    for split, want in captions.items():
        source = mp.loaders.huggingface(tmp_path / "snap", split=split)
        assert [source.ref(i).fields["caption"] for i in range(len(source))] == want
    with pytest.raises(SourceError, match="no split 'validation'.*'test'.*'train'"):
        mp.loaders.huggingface(tmp_path / "snap", split="validation")
    folder = tmp_path / "snap" / ("data" if layout == "data" else "default")
    with pytest.raises(SourceError, match="split"):
        mp.loaders.parquet(folder)  # a folder of several splits, through the Parquet source itself


def test_a_split_name_is_not_a_prefix_of_another(tmp_path):
    table = _from_rows(_rows(4)).data.table
    (tmp_path / "data").mkdir()
    pq.write_table(table.slice(0, 3), tmp_path / "data" / "train-00000-of-00001.parquet")
    pq.write_table(table.slice(3, 1), tmp_path / "data" / "train.clean-00000-of-00001.parquet")
    assert len(mp.loaders.huggingface(tmp_path, split="train")) == 3
    assert len(mp.loaders.huggingface(tmp_path, split="train.clean")) == 1


def test_convert_refuses_a_snapshot_of_several_splits_and_converts_one(tmp_path):
    from mediapipe.cli import main

    captions = _write_snapshot(tmp_path / "snap", "data")
    for whole in (tmp_path / "snap", tmp_path / "snap" / "data"):
        with pytest.raises(SourceError, match=r"splits \['test', 'train'\]"):
            convert(whole, tmp_path / "all")
    assert main(["convert", str(tmp_path / "snap"), str(tmp_path / "all"), "--no-progress"]) == 2
    assert main(["convert", str(tmp_path / "snap" / "data" / "train-*.parquet"), str(tmp_path / "glob"),
                 "--no-progress"]) == 0
    result = convert(mp.loaders.huggingface(tmp_path / "snap", split="test"), tmp_path / "test")
    for out, want in ((tmp_path / "glob", captions["train"]), (tmp_path / "test", captions["test"])):
        source = mp.loaders.shards(out)
        assert sorted(source.ref(i).fields["caption"] for i in range(len(source))) == sorted(want)
    assert result.num_samples == 3
    _write_snapshot(tmp_path / "snap2", "default")
    assert main(["convert", str(tmp_path / "snap2" / "default" / "train"), str(tmp_path / "folder"),
                 "--no-progress"]) == 0
    assert len(mp.loaders.shards(tmp_path / "folder")) == 6


# -- class labels ---------------------------------------------------------------------------------
def _label_table(labels: pa.Array, count: int | None = None) -> pa.Table:
    count = len(labels) if count is None else count
    images = [jpeg_bytes(photo_like(20, 20 + 2 * i, seed=i)) for i in range(count)]
    return pa.table({"image": pa.array(images, pa.binary()), "label": labels})


LABELS = {
    "float": (pa.array([0.0, 1.7, 2.99, -0.5, 2.0], pa.float64()), {0: 0, 4: 2}, [1, 2, 3]),
    "nan": (pa.array([1.0, float("nan"), 0.0], pa.float32()), {0: 1, 2: 0}, [1]),
    "uint64": (pa.array([1, 2**63 + 5, 2], pa.uint64()), {0: 1, 2: 2}, [1]),
    "null": (pa.array([1, None, 2], pa.int64()), {0: 1, 2: 2}, [1]),
}


@pytest.mark.parametrize("kind", list(LABELS))
def test_a_label_that_is_not_an_integer_class_is_refused_naming_file_and_row(tmp_path, kind):
    labels, good, bad = LABELS[kind]
    pq.write_table(_label_table(labels), tmp_path / "labels.parquet")
    datasets.Dataset(_label_table(labels)).save_to_disk(str(tmp_path / "saved"))
    for source in (mp.loaders.parquet(tmp_path / "labels.parquet"), mp.loaders.huggingface(tmp_path / "saved")):
        assert {i: source.ref(i).label for i in good} == good
        assert all(type(source.ref(i).label) is int for i in good)
        for i in bad:
            with pytest.raises(SourceError, match=rf"\.(parquet|arrow): row {i}.*label"):
                source.ref(i)
        pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image(backend="pillow")},
                           augment=[mp.augment.Resize((8, 8))], batch_size=8, seed=0, on_error="skip")
        loader = pipe.loader(shuffle=False)
        batch = next(iter(loader))  # each refused row's slot holds a good row, label and all
        for slot, index in enumerate(batch["index"].tolist()):
            assert batch["label"][slot].item() == good[index]
        assert sorted(int(f.split(": row ")[1][0]) for f in loader.stats.failed) == bad


def test_convert_reports_a_float_label_and_converts_the_integer_ones(tmp_path):
    pq.write_table(_label_table(LABELS["float"][0]), tmp_path / "labels.parquet")
    result = convert(tmp_path / "labels.parquet", tmp_path / "out")
    assert sorted(f["reason"].split("labels.parquet: row ")[1][:1] for f in result.failures) == ["1", "2", "3"]
    assert all("not an integer class" in f["reason"] for f in result.failures)
    source = mp.loaders.shards(tmp_path / "out")
    assert sorted(source.ref(i).label for i in range(len(source))) == [0, 2]


# -- null numbers and texts -------------------------------------------------------------------------
def _nulls_table() -> pa.Table:
    images = [jpeg_bytes(photo_like(20, 20, seed=i)) for i in range(4)]
    return pa.table({"image": pa.array(images, pa.binary()), "score": pa.array([0.5, 1.5, None, 3.5]),
                     "caption": pa.array(["a", None, "c", None])})


def test_a_null_number_names_its_file_row_and_column(tmp_path):
    pq.write_table(_nulls_table(), tmp_path / "nulls.parquet")
    datasets.Dataset(_nulls_table()).save_to_disk(str(tmp_path / "saved"))
    for source in (mp.loaders.parquet(tmp_path / "nulls.parquet"), mp.loaders.huggingface(tmp_path / "saved")):
        assert source.ref(3).fields["score"] == 3.5
        with pytest.raises(SourceError, match=r"\.(parquet|arrow): row 2.*'score'.*null"):
            source.ref(2)


def test_a_null_text_is_none_in_the_batch_list(tmp_path):
    pq.write_table(_nulls_table(), tmp_path / "nulls.parquet")
    datasets.Dataset(_nulls_table()).save_to_disk(str(tmp_path / "saved"))
    for source in (mp.loaders.parquet(tmp_path / "nulls.parquet", columns={"image": "image", "caption": "caption"}),
                   mp.loaders.huggingface(tmp_path / "saved", columns={"image": "image", "caption": "caption"})):
        assert [source.ref(i).fields["caption"] for i in range(4)] == ["a", None, "c", None]
        pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image(backend="pillow")}, batch_size=1, seed=0)
        assert [b["caption"] for b in pipe.loader(shuffle=False)] == [["a"], [None], ["c"], [None]]
        tokens = mp.loaders.tokenize(source, lambda s: [ord(c) for c in s], field="caption")
        assert tokens.ref(0).fields["caption_ids"].tolist() == [97]
        with pytest.raises(SourceError, match="'caption' is null"):
            tokens.ref(1)


def test_the_dataset_config_keeps_its_rows_compact(saved):
    config = json.loads(json.dumps(mp.loaders.huggingface(saved.select(range(2, 9))).to_config()))
    assert config["rows"] == [[2, 9]] and source_from_config(config).locate(0)[1] == 2
    order = [2, 2, *range(4, 10)]  # runs where they are shorter than the rows
    config = json.loads(json.dumps(mp.loaders.huggingface(saved.select(order)).to_config()))
    assert config["rows"] == [[2, 3], [2, 3], [4, 10]]
    scattered = json.loads(json.dumps(mp.loaders.huggingface(saved.select([9, 0, 4, 1])).to_config()))
    assert scattered["rows"] == [9, 0, 4, 1]
    assert [source_from_config(scattered).locate(i)[1] for i in range(4)] == [9, 0, 4, 1]
