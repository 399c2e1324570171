"""Our batched kernels against DALI's CPU operators where the two share a definition.

Each test runs a DALI CPU pipeline (``device_id=None``) over HWC uint8 images fed by
``fn.external_source``, with the per-sample parameters our op drew passed as argument inputs.
Tolerances: flips and erasing exact; uint8 results within 1 grey level (DALI rounds to nearest
where torchvision, and so our ops, truncate); float results within 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mediapipe import augment as A
from mediapipe.rng import SampleRNG
from mediapipe.stages.collate import stack_params
from mediapipe.synthetic import photo_like

dali = pytest.importorskip("nvidia.dali")
from nvidia.dali import fn, pipeline_def, types  # noqa: E402

BATCH = 4


def hwc_images(height: int = 40, width: int = 56) -> list[np.ndarray]:
    return [photo_like(height, width, 100 + i) for i in range(BATCH)]


def chw(images: list[np.ndarray]) -> torch.Tensor:
    return torch.stack([torch.from_numpy(a).permute(2, 0, 1) for a in images])


def draw(op: A.Op, x: torch.Tensor, op_index: int = 4) -> tuple[list[dict], dict]:
    meta = {"size": tuple(x.shape[-2:]), "shape": tuple(x.shape[1:])}
    drawn = [op.sample_params(SampleRNG(0, 0, i, op_index), meta) for i in range(x.shape[0])]
    return drawn, stack_params(drawn)


def run_dali(build, images: list[np.ndarray], **args: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``build(images_node, **arg_nodes)`` once on a CPU pipeline; each arg is one array per sample."""

    @pipeline_def(batch_size=BATCH, num_threads=1, device_id=None, seed=0)
    def pipe():
        x = fn.external_source(source=lambda: images, batch=True, layout="HWC")
        nodes = {k: fn.external_source(source=_constant(v), batch=True) for k, v in args.items()}
        return build(x, **nodes)

    p = pipe()
    p.build()
    (out,) = p.run()
    return [np.array(out[i]) for i in range(BATCH)]


def _constant(batch: list[np.ndarray]):
    return lambda: batch  # no parameters: DALI would pass the iteration number to one


def dali_chw(outputs: list[np.ndarray]) -> torch.Tensor:
    return torch.stack([torch.from_numpy(o).permute(2, 0, 1) for o in outputs])


def test_flip_matches_dali() -> None:
    images = hwc_images()
    x = chw(images)
    h_op, v_op = A.HorizontalFlip(p=0.5), A.VerticalFlip(p=0.5)
    h_drawn, h_params = draw(h_op, x)
    v_drawn, v_params = draw(v_op, x, op_index=7)
    flags = [(h["flip"], v["flip"]) for h, v in zip(h_drawn, v_drawn)]
    assert len(set(flags)) > 1, flags  # samples differ
    ours = v_op.apply(h_op.apply(x, h_params), v_params)
    out = run_dali(lambda img, h, v: fn.flip(img, horizontal=h, vertical=v), images,
                   h=[np.int32(d["flip"]) for d in h_drawn], v=[np.int32(d["flip"]) for d in v_drawn])
    assert torch.equal(ours, dali_chw(out))


def test_normalize_and_mirror_match_crop_mirror_normalize() -> None:
    images = hwc_images()
    x = chw(images)
    flip = A.HorizontalFlip(p=0.5)
    drawn, params = draw(flip, x)
    ours = A.Normalize().apply(flip.apply(x, params), {})
    out = run_dali(
        lambda img, m: fn.crop_mirror_normalize(
            img, mean=[255 * m for m in A.IMAGENET_MEAN], std=[255 * s for s in A.IMAGENET_STD],
            dtype=types.FLOAT, output_layout="CHW", mirror=m),
        images, m=[np.int32(d["flip"]) for d in drawn])
    torch.testing.assert_close(ours, torch.from_numpy(np.stack(out)), atol=1e-4, rtol=0)


def test_gaussian_blur_matches_dali() -> None:
    images = hwc_images()
    x = chw(images)
    op = A.GaussianBlur(7, sigma=(0.5, 2.5))
    _, params = draw(op, x)
    out = dali_chw(run_dali(lambda img, s: fn.gaussian_blur(img, window_size=7, sigma=s), images,
                            s=[np.float32(s) for s in params["sigma"].tolist()]))
    ours = op.apply(x, params)
    assert (ours.int() - out.int()).abs().max() <= 1
    assert (ours != out).float().mean() < 0.05  # a grey level off only where a .5 rounds the other way


def test_random_erasing_matches_dali_erase() -> None:
    images = hwc_images()
    x = chw(images)
    op = A.RandomErasing(p=1.0, value=0)
    drawn, params = draw(op, x)
    out = run_dali(lambda img, a, s: fn.erase(img, anchor=a, shape=s, axis_names="HW", fill_value=0), images,
                   a=[np.array([d["top"], d["left"]], np.float32) for d in drawn],
                   s=[np.array([d["height"], d["width"]], np.float32) for d in drawn])
    assert all(d["height"] > 0 for d in drawn)
    assert torch.equal(op.apply(x, params), dali_chw(out))


def test_brightness_matches_dali_brightness_contrast() -> None:
    images = hwc_images()
    x = chw(images)
    op = A.ColorJitter(brightness=0.5)
    _, params = draw(op, x)
    out = dali_chw(run_dali(lambda img, b: fn.brightness_contrast(img, brightness=b), images,
                            b=[np.float32(b) for b in params["brightness"].tolist()]))
    ours = op.apply(x, params)
    assert (ours.int() - out.int()).abs().max() <= 1  # DALI rounds, torchvision truncates


def test_rotation_matches_dali_rotate() -> None:
    # DALI's rotate and torchvision's share the convention (counter-clockwise degrees about the
    # centre, pixel centres at +0.5); with fill=None torchvision's border blends with zeros, as DALI's does
    images = hwc_images()
    x = chw(images)
    op = A.RandomRotation(120, interpolation="bilinear", fill=None)
    _, params = draw(op, x)
    out = dali_chw(run_dali(
        lambda img, a: fn.rotate(img, angle=a, keep_size=True, interp_type=types.INTERP_LINEAR, fill_value=0),
        images, a=[np.float32(a) for a in params["angle"].tolist()]))
    assert (op.apply(x, params).int() - out.int()).abs().max() <= 1


# -- the lowering table against every registered op ---------------------------------------------
class _Changed:
    """An argument value equal to nothing but itself: 'changed from its default'."""

    def __eq__(self, other: object) -> bool:
        return other is self

    __hash__ = object.__hash__


def test_every_argument_of_every_registered_op_is_consumed_or_named():
    # main: only the fields a lowering reads were checked to exist; an argument it ignored
    # (mask_keys, an audio op's keys=) was silently dropped
    from dataclasses import fields

    from mediapipe.augment.base import registered_ops
    from mediapipe.loaders.dali.lowering import LOWERINGS, changed_args, unconsumed

    ops = registered_ops()
    assert set(LOWERINGS) <= set(ops)
    for name, cls in ops.items():
        entry = LOWERINGS.get(name)
        args = [f.name for f in fields(cls)]
        if entry is not None:
            assert entry.consumes <= set(args), (name, sorted(entry.consumes - set(args)))
        defaults = object.__new__(cls)  # every argument at its default, without the op's checks
        for f in fields(cls):
            object.__setattr__(defaults, f.name, f.default)
        assert unconsumed(defaults) == [], name
        if name not in ("MixUp", "CutMix", "RandomChoice", "RandomApply", "RandomOrder"):  # no usable default
            assert changed_args(cls()) == [], name  # a default the op normalises (224 -> (224, 224)) is no change
        for arg in args:  # each argument changed alone
            op = object.__new__(cls)
            op.__dict__.update(defaults.__dict__, **{arg: _Changed()})
            expected = [] if entry is not None and arg in entry.consumes else [arg]
            assert unconsumed(op) == expected, (name, arg)
