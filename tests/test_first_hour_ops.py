"""The first hour's mistakes from other libraries' habits (issue 28): torchvision's Compose or its
transforms given as ops are refused naming torchvision and this library's replacement, and a
loader whose epoch has no batch says so instead of yielding nothing."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.errors import PipelineError
from tests.helpers import write_image_folder


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_image_folder(tmp_path_factory.mktemp("first-hour-ops"), 8, classes=2)


def pipeline(images: Path, augment: object, batch_size: int = 4) -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.folder(images), {"image": mp.decoders.image()}, augment,
                       batch_size=batch_size, device="cpu")


# -- torchvision habits --------------------------------------------------------------------------
def _compose(version: str):
    tv = pytest.importorskip("torchvision")
    import torch

    if version == "v2":
        T = tv.transforms.v2
        return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToImage(),
                          T.ToDtype(torch.float32, scale=True), T.Normalize(A.IMAGENET_MEAN, A.IMAGENET_STD)])
    T = tv.transforms
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(A.IMAGENET_MEAN, A.IMAGENET_STD)])


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_torchvision_compose_names_torchvision_and_each_replacement(images: Path, version: str) -> None:
    with pytest.raises(PipelineError) as caught:
        pipeline(images, _compose(version))
    text = str(caught.value)
    assert "torchvision's Compose" in text and "plain list" in text, text
    assert "RandomResizedCrop -> mediapipe.augment.RandomResizedCrop" in text, text
    assert "RandomHorizontalFlip -> mediapipe.augment.HorizontalFlip" in text, text
    assert "Normalize -> mediapipe.augment.Normalize" in text, text
    leave_out = "ToImage -> nothing" if version == "v2" else "ToTensor -> nothing"
    assert leave_out in text and "not iterable" not in text, text


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_torchvision_op_in_the_list_names_torchvision_and_its_replacement(images: Path, version: str) -> None:
    tv = pytest.importorskip("torchvision")
    T = tv.transforms.v2 if version == "v2" else tv.transforms
    for op, replacement in ((T.RandomResizedCrop(224), "mediapipe.augment.RandomResizedCrop"),
                            (T.RandomHorizontalFlip(), "mediapipe.augment.HorizontalFlip"),
                            (T.CenterCrop(224), "mediapipe.augment.CenterCrop")):
        with pytest.raises(PipelineError) as caught:
            pipeline(images, [A.Resize(256), op])
        text = str(caught.value)
        assert text.startswith("augment[1] is ") and "not an op" in text, text
        assert f"torchvision's {type(op).__name__}" in text and f"use {replacement} instead" in text, text


def test_a_torchvision_transform_without_a_counterpart_says_so(images: Path) -> None:
    tv = pytest.importorskip("torchvision")
    op = tv.transforms.v2.FiveCrop(100)
    with pytest.raises(PipelineError) as caught:
        pipeline(images, [op])
    text = str(caught.value)
    assert "torchvision's FiveCrop" in text, text
    if hasattr(A, "FiveCrop"):  # a later op of the same name is the replacement
        assert "use mediapipe.augment.FiveCrop instead" in text, text
    else:
        assert "which has no counterpart here: see docs/api.md" in text, text


def test_torchvision_given_as_the_whole_augment_or_inside_a_sequential(images: Path) -> None:
    tv = pytest.importorskip("torchvision")
    import torch

    with pytest.raises(PipelineError, match=r"augment is torchvision's RandomHorizontalFlip.*"
                                            r"RandomHorizontalFlip -> mediapipe.augment.HorizontalFlip"):
        pipeline(images, tv.transforms.v2.RandomHorizontalFlip())
    with pytest.raises(PipelineError, match=r"augment\[0\] is .*torchvision's RandomResizedCrop; use "
                                            r"mediapipe.augment.RandomResizedCrop instead"):
        pipeline(images, torch.nn.Sequential(tv.transforms.v2.RandomResizedCrop(224)))
    with pytest.raises(PipelineError, match=r"augment\[0\] is .*torchvision's ToImage; leave it out"):
        pipeline(images, [tv.transforms.v2.ToImage()])


def test_anything_else_that_is_not_an_op_keeps_the_plain_message(images: Path) -> None:
    with pytest.raises(PipelineError, match=r"augment\[0\] is 'flip', not an op$"):
        pipeline(images, ["flip"])
    assert len(pipeline(images, [A.Resize(64), A.CenterCrop(64)]).augment) == 2  # real ops still pass


# -- an epoch without a batch -------------------------------------------------------------------
def _no_batch_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, UserWarning) and "no batch" in str(w.message)]


@pytest.mark.parametrize("arguments", [{"drop_last": True}, {"last_batch": "drop"}])
def test_a_torch_loader_whose_epoch_has_no_batch_warns_with_the_numbers(images: Path, arguments: dict) -> None:
    pipe = pipeline(images, [A.Resize(64), A.CenterCrop(64)], batch_size=256)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        loader = pipe.loader(num_workers=0, **arguments)
    assert len(loader) == 0
    messages = _no_batch_warnings(record)
    assert len(messages) == 1, [str(w.message) for w in record]
    text = messages[0]
    for part in ("8 samples", "batch_size=256", "1 rank", "last_batch='drop'", "last_batch='partial'",
                 "batch_size <= 8"):
        assert part in text, (part, text)
    assert [w.filename for w in record if "no batch" in str(w.message)] == [__file__]  # the caller's line


def test_the_warning_counts_ranks_and_stays_quiet_where_batches_exist(images: Path) -> None:
    pipe = pipeline(images, [A.Resize(64), A.CenterCrop(64)], batch_size=4)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        loader = pipe.loader(num_workers=0, last_batch="drop", rank=0, world_size=4)  # 2 samples a rank
    assert len(loader) == 0
    text = _no_batch_warnings(record)[0]
    assert "8 samples" in text and "4 ranks" in text and "2 per rank" in text and "batch_size <= 2" in text, text
    with pytest.warns(UserWarning, match=r"8 samples over 16 ranks: 0 per rank.*or fewer ranks than samples"):
        pipe.loader(num_workers=0, last_batch="drop", rank=3, world_size=16)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert len(pipe.loader(num_workers=0, last_batch="drop")) == 2
        assert len(pipeline(images, [], batch_size=256).loader(num_workers=0)) == 1  # partial: one short batch
    assert not _no_batch_warnings(record)


def test_a_dali_loader_whose_epoch_has_no_batch_warns_too(images: Path) -> None:
    pytest.importorskip("nvidia.dali")
    pipe = pipeline(images, [A.Resize(64), A.CenterCrop(64)], batch_size=256)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        loader = pipe.loader(backend="dali", num_workers=1, drop_last=True)
    assert len(loader) == 0
    text = _no_batch_warnings(record)[0]
    assert "8 samples" in text and "batch_size=256" in text and "last_batch='drop'" in text, text
