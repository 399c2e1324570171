"""Hostile pass over the training-recipe ops (issue 26): the in-place writes of the batch stage
(`stages.scratch`), the policies on odd inputs, composition, the repeated-augmentation sampler."""

from __future__ import annotations

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.stages import scratch


def _pipeline(image_folder, ops, device: str = "cpu") -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image("pillow")}, ops,
                       batch_size=4, seed=3, device=device)


def _batches(pipe: mp.Pipeline, **kwargs) -> list[dict[str, torch.Tensor]]:
    return [{k: v.clone() for k, v in b.items() if isinstance(v, torch.Tensor)} for b in pipe.loader(**kwargs)]


def _copying(monkeypatch) -> None:
    """No batch op writes in place: every kernel copies first (the values in-place writes must give)."""
    monkeypatch.setattr(scratch, "writable", lambda x: False)


# -- in-place writes ---------------------------------------------------------------------------------
def test_augmix_chains_start_from_the_image_when_the_batch_is_writable(image_folder, monkeypatch):
    """Each AugMix chain starts from the op's input: a chain must not write into it, though an
    earlier op made it for this batch (chain 2 started from chain 1's result)."""
    ops = [A.Resize((32, 40)), A.Normalize(), A.AugMix()]
    got = _batches(_pipeline(image_folder, ops))
    _copying(monkeypatch)
    expected = _batches(_pipeline(image_folder, ops))
    assert len(got) == len(expected) == 6
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(got, expected))


@pytest.mark.parametrize("op", [A.RandomErasing(p=0.5, out="changed"), A.TrivialAugmentWide(out="changed"),
                                A.RandomInvert(p=0.5, out="changed"), A.RandomPerspective(p=0.5, out="changed"),
                                A.RandomPhotometricDistort(out="changed")],
                         ids=lambda op: type(op).__name__)
def test_an_op_writing_a_new_field_leaves_its_source_field(image_folder, op):
    """``out=`` keeps the input field: the op's kernel must not write the result into it, though
    an earlier op (Normalize) made it for this batch."""
    before = [A.Resize((32, 40)), A.Normalize()]
    plain = _batches(_pipeline(image_folder, before))
    got = _batches(_pipeline(image_folder, [*before, op]))
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(plain, got))
    assert any(not torch.equal(b["image"], b["changed"]) for b in got)


# -- odd inputs ----------------------------------------------------------------------------------------
def _drawn(op: A.Op, x: torch.Tensor) -> dict:
    from mediapipe.rng import SampleRNG
    from mediapipe.stages.collate import stack_params

    meta = {"size": tuple(x.shape[-2:]), "shape": tuple(x.shape[1:])}
    return stack_params([op.sample_params(SampleRNG(0, 0, i, 2), meta) for i in range(x.shape[0])])


@pytest.mark.parametrize("channels", [2, 4])
@pytest.mark.parametrize("op", [A.ColorJitter(0.4, 0.4, 0.4, 0.1), A.RandomGrayscale(p=1.0),
                                A.RandomPhotometricDistort(p=1.0), A.TrivialAugmentWide(), A.AugMix(), A.Fog()],
                         ids=lambda op: type(op).__name__)
def test_colour_ops_on_neither_grey_nor_rgb_images_say_why(op, channels):
    """torchvision refuses them too ("permitted channel values are 1 or 3"); here the error said
    'too many values to unpack (expected 3)'."""
    x = torch.randint(0, 256, (8, channels, 16, 16), dtype=torch.uint8)
    with pytest.raises(ValueError, match=rf"{channels} channels.*1 \(grey\) or 3 \(RGB\)"):
        for _ in range(4):  # TrivialAugmentWide needs a draw of Color or Contrast
            op.apply(x, _drawn(op, x))
            x = x.roll(1, 0)


# -- the meta device -----------------------------------------------------------------------------------
META_OPS = [A.RandomGrayscale(p=0.5), A.Gamma(), A.Fog(), A.Vignette(p=0.5), A.GridMask(), A.FishEye(),
            A.SaltAndPepperNoise(), A.Pixelate(),
            A.RandomChoice([A.RandomInvert(p=1.0), A.RandomErasing(p=1.0)], p=(0.3, 0.7)),
            A.RandomApply([A.Gamma(), A.Vignette()], p=0.3), A.RandomOrder([A.Gamma(), A.RandomInvert(p=1.0)]),
            A.MixUp(num_classes=3), A.CutMix(num_classes=3),
            A.RandomChoice([A.MixUp(num_classes=3), A.CutMix(num_classes=3)])]


@pytest.mark.parametrize("op", META_OPS, ids=lambda op: type(op).__name__)
def test_recipe_ops_run_on_the_meta_device_with_the_cpus_shapes(image_folder, op):
    """Issue 26: the batches on the meta device are the CPU's, in shapes and dtypes (a data-dependent
    branch, a read of the draws or of the labels has no data there)."""
    ops = [A.Resize((32, 40)), op]
    cpu = next(iter(_pipeline(image_folder, ops).loader(num_workers=0)))
    meta = next(iter(_pipeline(image_folder, ops, device="meta").loader(num_workers=0)))
    for name in ("image", "label"):
        assert meta[name].device.type == "meta"
        assert (meta[name].shape, meta[name].dtype) == (cpu[name].shape, cpu[name].dtype), name


# -- torchvision's arguments -----------------------------------------------------------------------------
def test_torchvisions_enums_are_taken_as_their_names():
    """torchvision's recipe passes ``interpolation=InterpolationMode.BILINEAR`` and
    ``AutoAugmentPolicy(...)``: they were refused ('expected a string'); they are their values."""
    tv = pytest.importorskip("torchvision.transforms.v2")
    from torchvision.transforms import InterpolationMode

    from mediapipe.augment.base import op_from_config

    assert A.AutoAugment(tv.AutoAugmentPolicy.SVHN) == A.AutoAugment("svhn")
    assert A.TrivialAugmentWide(interpolation=InterpolationMode.BILINEAR) == A.TrivialAugmentWide(interpolation="bilinear")
    op = A.RandAugment(num_ops=2, magnitude=9, interpolation=InterpolationMode.NEAREST)
    assert op.interpolation == "nearest" and op_from_config(op.to_config()) == op
    with pytest.raises(ValueError, match="lanczos"):
        A.TrivialAugmentWide(interpolation=InterpolationMode.LANCZOS)


# -- memory freed while an op runs -------------------------------------------------------------------------
def test_a_memory_freed_while_an_op_runs_is_not_writable_at_its_reused_address():
    """The writable memories were known by address only: a composite replaced the batch, the old
    one was freed, and the copy of a group it then took (at the freed address) was taken for the
    batch's own: the inner op wrote into it and returned it, and the composite, seeing its own
    tensor back, dropped the result (RandomOrder's erasing lost, batches differing run to run)."""
    t = torch.zeros(4, 3, 32, 40)
    key = scratch.storage_key(t)
    data = {"image": t}
    with scratch.owned_by_stage({key}, data):
        del t, data["image"]
        allocated = [torch.empty(4, 3, 32, 40) for _ in range(4)]
        assert not any(scratch.writable(a) for a in allocated)


def test_composites_give_the_same_batches_run_after_run(image_folder):
    ops = [A.RandomResizedCrop(32, scale=(0.3, 1.0)),
           A.RandomApply([A.ColorJitter(brightness=0.4, contrast=0.4), A.GaussianBlur(3)], p=0.5),
           A.RandomOrder([A.HorizontalFlip(), A.RandomGrayscale(p=0.5), A.RandomErasing(p=0.5)]),
           A.RandomChoice([A.MixUp(num_classes=3), A.CutMix(num_classes=3)])]
    pipe = _pipeline(image_folder, ops)
    first = _batches(pipe, num_workers=0)
    for _ in range(2):
        assert all(torch.equal(a["image"], b["image"]) for a, b in zip(first, _batches(pipe, num_workers=0)))
