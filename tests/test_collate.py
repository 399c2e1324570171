"""Collate keeps every field of a batch: a field the first sample lacks is not dropped, and a
tensor or number missing from one sample is an error naming it, never a zero that passes for data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import mediapipe as mp
from mediapipe.errors import PipelineError
from mediapipe.stages.collate import collate


def test_a_text_field_absent_from_the_first_sample_reaches_the_batch() -> None:
    samples = [{"image": torch.zeros(3, 2, 2)}, {"image": torch.ones(3, 2, 2), "text": "a cat"}]
    batch = collate(samples, {})
    assert batch["text"] == [None, "a cat"]


@pytest.mark.parametrize("value", [torch.ones(2), 3, 0.5])
@pytest.mark.parametrize("first_has_it", [True, False])
def test_a_tensor_or_number_missing_from_one_sample_is_named(value, first_has_it: bool) -> None:
    samples = [{"image": torch.zeros(3, 2, 2)} for _ in range(3)]
    for i in ((0, 2) if first_has_it else (1, 2)):
        samples[i]["extra"] = value
    lacking = 1 if first_has_it else 0
    with pytest.raises(PipelineError, match=rf"field 'extra' is missing from sample\(s\) \[{100 + lacking}\]"):
        collate(samples, {}, indices=[100, 101, 102])


def test_a_failed_sample_is_not_a_missing_field() -> None:
    samples = [{"image": torch.ones(3, 2, 2), "weight": 2.0}, None]  # on_error="replace"
    batch = collate(samples, {})
    assert batch["weight"].tolist() == [2.0, 0.0] and batch["image"][1].sum() == 0


def test_a_manifest_whose_later_rows_have_a_caption_delivers_it(image_folder: Path, tmp_path: Path) -> None:
    files = sorted(image_folder.rglob("*.jpg"))[:4]
    path = tmp_path / "m.jsonl"
    rows = [{"path": str(p), "label": 0} | ({"caption": f"photo {i}"} if i else {}) for i, p in enumerate(files)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from mediapipe import augment as A

    pipe = mp.Pipeline(source=mp.loaders.manifest(path), decode={"image": mp.decoders.image()},
                       augment=[A.Resize((16, 16))], batch_size=4)
    batch = next(iter(pipe.loader(num_workers=0, shuffle=False)))
    assert batch["caption"] == [None, "photo 1", "photo 2", "photo 3"]
