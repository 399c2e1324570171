"""A pipeline spec round-trips through plain dicts, JSON and YAML and gives the same batches."""

from __future__ import annotations

import json

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A


@pytest.fixture
def pipe(image_folder) -> mp.Pipeline:
    return mp.Pipeline(
        source=mp.loaders.folder(image_folder),
        decode={"image": mp.decoders.image(exif_transpose=True)},
        augment=[A.RandomResizedCrop(32, scale=(0.3, 1.0)), A.HorizontalFlip(p=0.3),
                 A.Normalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))],
        batch_size=6, seed=11, device="cpu", on_error="skip", max_pixels=10**8,
    )


def first_batches(pipe: mp.Pipeline, n: int = 2) -> list[dict]:
    it = iter(pipe.loader())
    return [next(it) for _ in range(n)]


def test_from_config_of_to_config_gives_the_same_batches(pipe):
    config = pipe.to_config()
    json.dumps(config)  # plain data only
    again = mp.Pipeline.from_config(config)
    assert again.to_config() == config
    for a, b in zip(first_batches(pipe), first_batches(again)):
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_config_files(pipe, tmp_path, suffix):
    path = tmp_path / f"pipe{suffix}"
    pipe.save_config(path)
    again = mp.Pipeline.from_config(path)
    assert again.to_config() == pipe.to_config()
    assert torch.equal(first_batches(pipe, 1)[0]["image"], first_batches(again, 1)[0]["image"])


def test_unknown_op_in_config_is_named(pipe):
    config = pipe.to_config()
    config["augment"].append({"op": "NoSuchOp"})
    with pytest.raises(ValueError, match="NoSuchOp"):
        mp.Pipeline.from_config(config)
