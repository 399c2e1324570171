"""ToDtype float -> uint8 against torchvision's ``to_dtype`` on values off the uint8 grid."""

from __future__ import annotations

import pytest
import torch

from mediapipe import augment as A

TF = pytest.importorskip("torchvision.transforms.v2.functional")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_float_to_uint8_truncates_as_torchvision(dtype):
    x = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)).to(dtype)
    x[0, 0, 0, :4] = torch.tensor([0.0, 1.0, 0.5, 254.5 / 255])
    out = A.ToDtype("uint8").apply(x, {})
    assert out.dtype == torch.uint8
    expected = TF.to_dtype(x, torch.uint8, scale=True)
    # in float16 255.999 rounds to 256, so torchvision's 1.0 wraps to 0; it saturates here
    top = x.float() * float(torch.tensor(255.999, dtype=dtype)) >= 256
    assert torch.equal(out[~top], expected[~top]) and bool((out[top] == 255).all())
    # rounding would differ on about a quarter of the values: truncation is what is matched
    assert (out != x.double().mul(255).round().to(torch.uint8)).float().mean() > 0.1


def test_float_outside_the_unit_range_saturates():
    x = torch.tensor([-0.5, -1e-4, 1.0 + 1e-4, 2.0, 7.3]).reshape(1, 1, 1, 5)
    assert A.ToDtype("uint8").apply(x, {}).flatten().tolist() == [0, 0, 255, 255, 255]
