"""The per-kind table (`mediapipe.fields.KIND_SPECS`): every branch on a field's kind reads it."""

from __future__ import annotations

import pytest
import torch

from mediapipe import augment as A
from mediapipe.augment.functional.dispatch import Functional, register_kernel
from mediapipe.augment.functional.spatial import sampling
from mediapipe.fields import (
    COLLATES,
    FAMILIES,
    KIND_SPECS,
    KINDS,
    OBJECTS,
    RASTER,
    FieldType,
    KindSpec,
    pad_axis,
)


def test_every_kind_has_one_spec_in_the_order_of_kinds():
    assert tuple(KIND_SPECS) == KINDS
    for kind, spec in KIND_SPECS.items():
        assert isinstance(spec, KindSpec) and spec.kind == kind
        assert spec.family in FAMILIES
        assert spec.default_collate in spec.collates and set(spec.collates) <= set(COLLATES)


def test_the_kind_sets_are_the_families_of_the_table():
    assert RASTER == {k for k, s in KIND_SPECS.items() if s.family == "raster"} == {"image", "mask", "video"}
    assert OBJECTS == {k for k, s in KIND_SPECS.items() if s.family == "objects"} == {"boxes", "keypoints"}
    assert all(KIND_SPECS[k].has_canvas for k in RASTER)
    assert not any(KIND_SPECS[k].has_canvas for k in set(KINDS) - RASTER)


@pytest.mark.parametrize("kind", KINDS)
def test_a_field_type_batches_and_pads_as_its_kind_spec_says(kind):
    spec = KIND_SPECS[kind]
    assert FieldType(kind).batching == spec.default_collate
    assert pad_axis(kind) == spec.pad_axis
    for collate in COLLATES:
        if collate in spec.collates:
            assert FieldType(kind, collate=collate).batching == collate
        else:
            with pytest.raises(ValueError, match=f"collate={collate!r} for a {kind} field"):
                FieldType(kind, collate=collate)


def test_the_defaults_are_the_documented_ones():
    assert {k: s.default_collate for k, s in KIND_SPECS.items() if s.default_collate != "stack"} == {
        "boxes": "list", "keypoints": "list", "audio": "pad", "features": "pad"}
    assert {k for k, s in KIND_SPECS.items() if s.pad_axis == -1} == {"audio", "features"}
    assert {k for k, s in KIND_SPECS.items() if "pad" not in s.collates} == {"image", "mask", "video"}


def test_a_mask_is_resampled_as_its_spec_says_whatever_the_op_asks_for_images():
    assert KIND_SPECS["mask"].resampling == "nearest"
    assert KIND_SPECS["image"].resampling is None and KIND_SPECS["video"].resampling is None
    assert sampling("mask", "bicubic", True, 7) == ("nearest", False, 0)
    assert sampling("mask", "nearest-exact", True, 7) == ("nearest-exact", False, 0)
    assert sampling("image", "bicubic", True, 7) == ("bicubic", True, 7)


def test_only_kinds_whose_decoder_resamples_as_the_op_fuse_a_geometric_op():
    crop = A.RandomResizedCrop(8)
    for kind in ("image", "video", "mask", "boxes", "keypoints"):
        assert crop.fusable(FieldType(kind)) == KIND_SPECS[kind].decoder_fuses
    assert {k for k, s in KIND_SPECS.items() if s.decoder_fuses} == {"image", "video"}


def test_a_functional_hands_each_kind_the_arguments_its_spec_names():
    probe = Functional("probe_kernel_args")
    seen: dict[str, set[str]] = {}
    for kind in ("image", "mask", "boxes", "keypoints"):
        def kernel(x, *args, _kind=kind, **kwargs):
            seen[_kind] = set(kwargs)
            return x
        register_kernel(probe, kind)(kernel)
        probe(torch.zeros(1, 4), kind=kind, canvas_size=(4, 4), format="xyxy", fill=0)
    assert seen == {kind: {"fill", *KIND_SPECS[kind].kernel_args} for kind in seen}
    assert KIND_SPECS["boxes"].kernel_args == ("canvas_size", "format")
    assert KIND_SPECS["keypoints"].kernel_args == ("canvas_size",)
    assert KIND_SPECS["image"].kernel_args == ()
