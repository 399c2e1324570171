"""Two processes writing the bench's Hugging Face copy of one folder at once (a test run and a
`mediapipe bench` sharing the user cache) both get it: each writes a temporary file of its own
and the rename is atomic. The second writer is simulated in-process: it runs while the first is
writing, as another process with another pid."""

from __future__ import annotations

import pytest

from tests.helpers import write_image_folder

datasets = pytest.importorskip("datasets")


def test_a_second_writer_finishing_first_does_not_break_the_first(tmp_path, monkeypatch):
    from mediapipe.bench import hf

    data = write_image_folder(tmp_path / "images", 4, scale=0.2)
    write = datasets.Dataset.to_parquet
    inside: list[str] = []
    monkeypatch.setattr(hf.os, "getpid", lambda: 202 if inside else 101)  # the second writer's pid differs

    def to_parquet(self, path, *args, **kwargs):
        out = write(self, path, *args, **kwargs)
        if not inside:  # the other process writes and renames while this one is between its two steps
            inside.append(path)
            hf.parquet_copy(data)
        return out

    monkeypatch.setattr(datasets.Dataset, "to_parquet", to_parquet)
    out = hf.parquet_copy(data)
    assert (out / "data" / "train-00000-of-00001.parquet").is_file()
    assert not list((out / "data").glob(".*partial"))
