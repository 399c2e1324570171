"""Batch ops write in place only what an earlier batch op made for the batch (`stages.scratch`):
never the collated batch, never a memory two fields share; the values are those of the copy."""

from __future__ import annotations

import numpy as np
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.functional import color as F
from mediapipe.augment.functional import erase as FE
from mediapipe.stages import scratch
from mediapipe.stages.batch_stage import run_batch_ops
from mediapipe.synthetic import photo_like


def _pipeline(image_folder, ops) -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image("pillow")}, ops,
                       batch_size=4, seed=0, device="cpu")


def _batch() -> torch.Tensor:
    return torch.stack([torch.from_numpy(photo_like(32, 40, seed=s)).permute(2, 0, 1) for s in range(4)]).contiguous()


def _boxes() -> dict[str, torch.Tensor]:
    """Boxes for samples 0 and 2; none (zero size) for 1 and 3."""
    return {"top": torch.tensor([2, 0, 5, 0]), "left": torch.tensor([3, 0, 1, 0]),
            "height": torch.tensor([10, 0, 7, 0]), "width": torch.tensor([12, 0, 9, 0])}


def test_erasing_writes_into_what_normalize_made_and_equals_the_copy(image_folder, monkeypatch):
    made = []
    normalize = F.normalize

    def recording(*args, **kwargs):
        made.append(normalize(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(F, "normalize", recording)
    pipe = _pipeline(image_folder, [A.Resize((32, 40)), A.Normalize(), A.RandomErasing(p=1.0, value=0.5)])
    x = _batch()
    kept = x.clone()
    out = run_batch_ops(pipe.plan, {"image": x, "label": torch.zeros(4, dtype=torch.int64)}, {1: {}, 2: _boxes()})
    assert torch.equal(x, kept)  # the collated batch is read, never written
    assert out["image"].data_ptr() == made[0].data_ptr()  # erased in Normalize's output, no copy of it
    b = _boxes()
    expected = FE.erase(normalize(kept, torch.tensor(A.Normalize().mean), torch.tensor(A.Normalize().std)),
                       b["top"], b["left"], b["height"], b["width"], 0.5)
    assert torch.equal(out["image"], expected)


def test_the_collated_batch_is_copied_before_an_op_changes_some_samples(image_folder):
    pipe = _pipeline(image_folder, [A.Resize((32, 40)), A.RandomErasing(p=1.0)])
    x = _batch()
    kept = x.clone()
    out = run_batch_ops(pipe.plan, {"image": x, "label": torch.zeros(4, dtype=torch.int64)}, {1: _boxes()})
    assert torch.equal(x, kept) and out["image"].data_ptr() != x.data_ptr()
    assert not torch.equal(out["image"], kept) and torch.equal(out["image"][1], kept[1])


def test_auto_augment_writes_its_samples_into_a_batch_the_stage_owns(image_folder):
    pipe = _pipeline(image_folder, [A.Resize((32, 40)), A.HorizontalFlip(p=1.0), A.TrivialAugmentWide()])
    x = _batch()
    flipped = x.flip(-1)
    ops = torch.tensor([[4], [0], [12], [0]])  # TranslateY, Identity, Posterize, Identity
    params = {1: {"flip": torch.ones(4, dtype=torch.bool)},
              2: {"ops": ops, "bins": torch.tensor([[20], [0], [25], [0]]), "signs": torch.tensor([[-1], [1], [1], [1]])}}
    out = run_batch_ops(pipe.plan, {"image": x, "label": torch.zeros(4, dtype=torch.int64)}, params)
    from mediapipe.augment.functional import auto_augment as AA
    settings = AA.WarpSettings("image", (32, 40))
    expected = AA.apply_slots(flipped, ops, params[2]["bins"], params[2]["signs"], AA.SPACES["TrivialAugmentWide"], 31,
                              settings)
    assert torch.equal(out["image"], expected) and torch.equal(out["image"][1], flipped[1])


def test_a_memory_two_fields_share_is_not_writable():
    t = torch.zeros(2, 3, 4, 4)
    key = scratch.storage_key(t)
    with scratch.owned_by_stage({key}, {"image": t, "copy": t[:, :1]}):
        assert not scratch.writable(t)
    with scratch.owned_by_stage({key}, {"image": t, "label": torch.zeros(2)}):
        assert scratch.writable(t) and scratch.writable(t[1:])
    with scratch.owned_by_stage(set(), {"image": t}):
        assert not scratch.writable(t)
    assert not scratch.writable(t)  # outside an op of the batch stage


def test_batches_are_the_same_through_workers(image_folder):
    """The in-place writes happen inside workers too, into shared buffers: same batches."""
    ops = [A.RandomResizedCrop(32), A.HorizontalFlip(), A.TrivialAugmentWide(), A.Normalize(),
           A.RandomErasing(p=0.5)]
    pipe = _pipeline(image_folder, ops)
    inline = [b["image"].clone() for b in pipe.loader(num_workers=0)]
    workers = [b["image"].clone() for b in pipe.loader(num_workers=2)]
    assert len(inline) == len(workers) == 6
    assert all(torch.equal(a, b) for a, b in zip(inline, workers))
    assert np.isfinite(torch.stack(inline).numpy()).all()
