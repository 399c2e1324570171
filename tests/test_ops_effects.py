"""The rocAL / DALI effects against their definitions, on photographic-looking images, uint8 and float.

Where DALI has the operator its CPU operator is the oracle (``device_id=None``): grid_mask given
the same per-sample arguments, exactly; the noises, which draw their own noise inside DALI, at
their deterministic limits and in distribution. Elsewhere the formula of rpp's kernel is written
out in numpy here (not a call into the kernel); the random positions and noise come from the
counter-based draws (`counter_uniform`), tested on their own. uint8 results are exact; float
results within 1e-6 (torch's and numpy's float32 powers and exponentials may differ in the last bit).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.base import op_from_config
from mediapipe.augment.functional import effects as F
from mediapipe.errors import PipelineError
from mediapipe.fields import FieldType, boxes, keypoints
from mediapipe.rng import SampleRNG
from mediapipe.stages.collate import stack_params
from mediapipe.synthetic import photo_like
from tests.helpers import assert_same, collect

BATCH = 6


def images(n: int = BATCH, height: int = 40, width: int = 56, seed: int = 0) -> torch.Tensor:
    return torch.stack([torch.from_numpy(photo_like(height, width, seed + i)).permute(2, 0, 1) for i in range(n)])


def as_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x if dtype == torch.uint8 else x.to(dtype) / 255


def draw(op: A.Op, x: torch.Tensor, op_index: int = 3) -> tuple[list[dict], dict]:
    meta = {"size": tuple(x.shape[-2:]), "shape": tuple(x.shape[1:])}
    drawn = [op.sample_params(SampleRNG(0, 0, i, op_index), meta) for i in range(x.shape[0])]
    return drawn, stack_params(drawn)


def check(out: torch.Tensor, ref: np.ndarray, like: torch.Tensor) -> None:
    assert out.shape == like.shape and out.dtype == like.dtype
    if like.is_floating_point():
        np.testing.assert_allclose(out.numpy(), ref, atol=1e-6, rtol=0)
    else:
        diff = np.abs(out.numpy().astype(np.int32) - ref.astype(np.int32))
        assert diff.max() == 0, f"{(diff > 0).sum()} pixels differ, by up to {diff.max()}"


def finish(y: np.ndarray, like: torch.Tensor, rounding=np.rint) -> np.ndarray:
    """float32 levels back to the input's dtype: uint8 rounded and saturated, float clamped."""
    if like.is_floating_point():
        return np.clip(y, 0, 1).astype(np.float32)
    return np.clip(rounding(y), 0, 255).astype(np.uint8)


def f32(x: torch.Tensor) -> np.ndarray:
    return x.numpy().astype(np.float32)


DTYPES = [torch.uint8, torch.float32]


# -- the counter-based draws ----------------------------------------------------------------------
def test_counter_uniform_is_uniform_keyed_and_independent_of_the_batch() -> None:
    keys = torch.tensor([0, 1, 2, 2**62 + 7])
    u = F.counter_uniform(keys, (50_000,), "cpu")
    assert u.dtype == torch.float64 and 0 < u.min() and u.max() < 1
    counts = torch.histc(u, bins=20, min=0, max=1)  # chi-square over 20 bins, each sample
    for row in u:
        c = torch.histc(row, bins=20, min=0, max=1)
        chi2 = (((c - 2500) ** 2) / 2500).sum().item()
        assert chi2 < 60, chi2  # 19 degrees of freedom: p < 1e-5 beyond 50
    assert counts.sum() == u.numel()
    # samples, streams and neighbouring keys are unrelated; a sample's draws do not depend on its batch
    corr = torch.corrcoef(u)
    assert (corr - torch.eye(4, dtype=corr.dtype)).abs().max() < 0.03
    other = F.counter_uniform(keys, (50_000,), "cpu", stream=1)
    assert torch.corrcoef(torch.stack([u[0], other[0]]))[0, 1].abs() < 0.03
    assert torch.equal(F.counter_uniform(keys[2:3], (50_000,), "cpu")[0], u[2])
    assert torch.equal(F.counter_uniform(keys, (10, 5_000), "cpu").reshape(4, -1), u)


# -- colour -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_gamma_is_rpps_table(dtype) -> None:
    x = as_dtype(images(), dtype)
    op = A.Gamma()
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    for i in range(BATCH):
        g = float(params["gamma"][i])  # the float32 value the kernel saw
        if dtype == torch.uint8:
            table = np.clip(np.trunc((np.arange(256) / 255.0) ** g * 255.0), 0, 255).astype(np.uint8)
            ref = table[x[i].numpy()]
        else:
            ref = np.clip(f32(x[i]), 0, 1) ** np.float32(g)
        check(out[i], ref, x[i])
    assert len({round(d["gamma"], 3) for d in drawn}) == BATCH and all(0.3 <= d["gamma"] <= 7 for d in drawn)


@pytest.mark.parametrize("dtype", DTYPES)
def test_color_temperature_moves_red_and_blue(dtype) -> None:
    x = as_dtype(images(), dtype)
    op = A.ColorTemperature(adjustment=(-80, 80))
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    scale = 255.0 if dtype == torch.uint8 else 1.0
    for i, d in enumerate(drawn):
        a = d["adjustment"] / 255.0 * scale
        assert isinstance(d["adjustment"], int) and -80 <= d["adjustment"] <= 80
        ref = f32(x[i]) + np.array([a, 0, -a], np.float32)[:, None, None]
        check(out[i], finish(ref, x[i]), x[i])
    with pytest.raises(ValueError, match="3 channels"):
        op.apply(x[:, :1], params)


@pytest.mark.parametrize("dtype", DTYPES)
def test_vignette_is_rpps_gaussian_gain(dtype) -> None:
    x = as_dtype(images(height=41, width=56), dtype)
    op = A.Vignette(intensity=(0.5, 6.0))
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    height, width = x.shape[-2:]
    hh, hw = height // 2, width // 2
    ii, jj = np.mgrid[0:height, 0:width]
    for i in range(BATCH):
        m = -0.25 * float(params["intensity"][i]) / max(hh, hw) ** 2
        gain = (np.exp(m * (ii - hh) ** 2) * np.exp(m * (jj - hw) ** 2)).astype(np.float32)
        check(out[i], finish(f32(x[i]) * gain, x[i]), x[i])
    assert torch.equal(out[:, :, hh, hw], x[:, :, hh, hw])  # the centre pixel keeps its value


# -- lens warps --------------------------------------------------------------------------------------
def fisheye_reference(img: np.ndarray) -> np.ndarray:
    """rpp's legacy fisheye, pixel by pixel (C, H, W)."""
    _, height, width = img.shape
    out = np.zeros_like(img)
    for i in range(height):
        for j in range(width):
            nx, ny = 2.0 * j / width - 1.0, 2.0 * i / height - 1.0
            d = math.sqrt(nx * nx + ny * ny)
            if d > 1.0:
                continue
            bent = (d + (1.0 - math.sqrt(1.0 - d * d))) / 2.0
            r = bent / d if d > 0 else 0.0
            sx, sy = math.trunc((r * nx + 1.0) * width / 2.0), math.trunc((r * ny + 1.0) * height / 2.0)
            if 0 <= sx < width and 0 <= sy < height:
                out[:, i, j] = img[:, sy, sx]
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_fisheye_is_rpps_map_and_moves_masks_with_the_image(dtype) -> None:
    x = as_dtype(images(3, 33, 48), dtype)
    mask = (x[:, :1] > x[:, :1].float().mean()).to(torch.uint8)
    op = A.FishEye(keys=("image", "mask"))
    _, params = draw(op, x)
    data = {"image": x, "mask": mask}
    op.bind({"image": FieldType("image"), "mask": FieldType("mask")}).apply_fields(data, params)
    for i in range(3):
        check(data["image"][i], fisheye_reference(x[i].numpy()), x[i])
        assert np.array_equal(data["mask"][i].numpy(), fisheye_reference(mask[i].numpy()))


def lens_reference(img: np.ndarray, k: dict, focal: float, nearest: bool = False) -> np.ndarray:
    """rpp's lens-correction remap (OpenCV's model), then its bilinear taps (C, H, W)."""
    _, height, width = img.shape
    f = focal * max(height, width)
    cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
    ii, jj = np.mgrid[0:height, 0:width].astype(np.float64)
    x, y = (jj - cx) / f, (ii - cy) / f
    r2 = x * x + y * y
    radial = r2 * (k["k1"] + r2 * (k["k2"] + r2 * k["k3"]))
    col = jj + f * (x * radial + 2.0 * k["p1"] * x * y + k["p2"] * (r2 + 2.0 * x * x))
    row = ii + f * (y * radial + k["p1"] * (r2 + 2.0 * y * y) + 2.0 * k["p2"] * x * y)
    inside = (np.floor(col) >= 0) & (np.floor(col) <= width - 1) & (np.floor(row) >= 0) & (np.floor(row) <= height - 1)
    if nearest:
        ys = np.clip(np.floor(row + 0.5), 0, height - 1).astype(int)
        xs = np.clip(np.floor(col + 0.5), 0, width - 1).astype(int)
        return img[:, ys, xs] * inside
    y0, x0 = np.clip(np.floor(row), 0, height - 1), np.clip(np.floor(col), 0, width - 1)
    wy, wx = (row - y0).astype(np.float32), (col - x0).astype(np.float32)
    y0, x0 = y0.astype(int), x0.astype(int)
    y1, x1 = np.minimum(y0 + 1, height - 1), np.minimum(x0 + 1, width - 1)
    src = img.astype(np.float32)
    out = (src[:, y0, x0] * ((1 - wy) * (1 - wx)) + src[:, y0, x1] * ((1 - wy) * wx)
           + src[:, y1, x0] * (wy * (1 - wx)) + src[:, y1, x1] * (wy * wx))
    return out * inside


@pytest.mark.parametrize("dtype", DTYPES)
def test_lens_correction_is_rpps_remap(dtype) -> None:
    x = as_dtype(images(4, 36, 50), dtype)
    mask = (x[:, 1:2] > x[:, 1:2].float().mean()).to(torch.uint8)
    # rpp's test camera's coefficients, drawn around
    op = A.LensCorrection(k1=(-0.35, 0.3), k2=(0.0, 0.12), k3=(0.0, 0.05), p1=(-0.002, 0.002), p2=(-0.01, 0.01),
                          keys=("image", "mask"))
    drawn, params = draw(op, x)
    data = {"image": x, "mask": mask}
    op.bind({"image": FieldType("image"), "mask": FieldType("mask")}).apply_fields(data, params)
    for i in range(4):
        k = {name: float(params[name][i]) for name in ("k1", "k2", "k3", "p1", "p2")}
        check(data["image"][i], finish(lens_reference(x[i].numpy(), k, op.focal), x[i]), x[i])
        assert np.array_equal(data["mask"][i].numpy(), lens_reference(mask[i].numpy(), k, op.focal, nearest=True))
    assert (data["image"] == 0).all(dim=1).any()  # some samples sample from outside the image
    identity = A.LensCorrection(k1=0.0)
    assert torch.equal(identity.apply(x, draw(identity, x)[1]), x)


@pytest.mark.parametrize("op", [A.FishEye(), A.LensCorrection()])
@pytest.mark.parametrize("kind", [boxes("xyxy"), keypoints()])
def test_the_lens_warps_refuse_boxes_and_keypoints_by_name(op, kind) -> None:
    with pytest.raises(PipelineError, match=rf"{type(op).__name__} cannot transform field 'objects'.*bends straight"):
        op.bind({"image": FieldType("image"), "objects": kind})
    assert op.bind({"image": FieldType("image"), "mask": FieldType("mask")}).inputs == ("image", "mask")


# -- weather -------------------------------------------------------------------------------------------
def fog_texture_reference(grids: np.ndarray, height: int, width: int) -> np.ndarray:
    out, start = np.zeros((height, width)), 0
    for cells, weight in ((3, 0.5), (6, 0.3), (12, 0.2)):
        n = cells + 1
        g = grids[start : start + n * n].reshape(n, n)
        start += n * n

        def axis(size, cells=cells):
            pos = np.arange(size) * (cells / max(size - 1, 1))
            low = np.minimum(np.floor(pos), cells - 1).astype(int)
            return low, low + 1, pos - low

        y0, y1, wy = axis(height)
        x0, x1, wx = axis(width)
        rows = g[y0] * (1 - wy)[:, None] + g[y1] * wy[:, None]
        out += weight * (rows[:, x0] * (1 - wx) + rows[:, x1] * wx)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_fog_is_rpps_blend_over_its_texture(dtype) -> None:
    x = as_dtype(images(), dtype)
    op = A.Fog()
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    scale = 255.0 if dtype == torch.uint8 else 1.0
    for i, d in enumerate(drawn):
        t = fog_texture_reference(d["grids"], *x.shape[-2:])
        assert 0 <= t.min() and t.max() <= 1 and t.std() > 0.05  # a smooth texture, not a constant
        alpha = np.clip(0.5 * t + float(params["intensity"][i]), 0, 1).astype(np.float32)
        colour = (scale * (0.75 + 0.25 * t)).astype(np.float32)
        g = np.float32(params["gray"][i])
        img = f32(x[i])
        luma = img[0] * np.float32(0.299) + img[1] * np.float32(0.587) + img[2] * np.float32(0.114)
        greyed = img * (np.float32(1) - g) + luma[None] * g
        check(out[i], finish(greyed * (np.float32(1) - alpha) + colour * alpha, x[i]), x[i])


def rain_reference(img: np.ndarray, key: int, alpha: float, percentage: float, drop_width: int, length: int,
                   slant: float) -> np.ndarray:
    _, height, width = img.shape
    n = int(percentage * 0.004 * height * width)
    s = math.sin(slant) * length
    x_high, y_high = max(int(width - s - 1), 0) + 1, max(height - length - 1, 0) + 1
    keys = torch.tensor([key])
    x0 = np.floor(F.counter_uniform(keys, (n,), "cpu", stream=1)[0].numpy() * x_high).astype(int)
    y0 = np.floor(F.counter_uniform(keys, (n,), "cpu", stream=2)[0].numpy() * y_high).astype(int)
    layer = np.zeros((height, width), np.float32)
    for a, b in zip(x0, y0):
        for j in range(length):
            col, row = math.trunc(a + j * s / length), b + j
            for k in range(drop_width):
                if 0 <= col + k < width and row < height:
                    layer[row, col + k] = 200.0
    src = img.astype(np.float32)
    if img.dtype != np.uint8:
        layer /= 255.0
    return src + (layer[None] - src) * np.float32(alpha)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("slant", [0.0, 0.4, -0.3])
def test_rain_is_rpps_layer_and_blend(dtype, slant) -> None:
    x = as_dtype(images(4, 48, 64), dtype)
    op = A.Rain(percentage=5.0, drop_width=2, drop_length=7, slant=slant)
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    for i, d in enumerate(drawn):
        ref = rain_reference(x[i].numpy(), d["key"], float(params["transparency"][i]), 5.0, 2, 7, slant)
        check(out[i], finish(ref, x[i]), x[i])


def snow_reference(img: np.ndarray, key: int, snow: float) -> np.ndarray:
    channels, height, width = img.shape
    n = int(snow / 100.0 * height * width * channels)
    keys = torch.tensor([key])
    rows = np.floor(F.counter_uniform(keys, (n,), "cpu", stream=1)[0].numpy() * height).astype(int)
    cols = np.floor(F.counter_uniform(keys, (n,), "cpu", stream=2)[0].numpy() * width).astype(int)
    flake = np.array(F.SNOW_FLAKE)
    out = img.astype(np.float64) * (255.0 if img.dtype != np.uint8 else 1.0)
    for r, c in zip(rows, cols):  # rpp's loop: one flake at a time, each addition saturated
        if r + 5 < height and c + 5 < width:
            out[:, r : r + 5, c : c + 5] = np.minimum(out[:, r : r + 5, c : c + 5] + flake, 255.0)
    return out.astype(np.float32) / (255.0 if img.dtype != np.uint8 else 1.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_snow_is_rpps_flakes(dtype) -> None:
    x = as_dtype(images(4, 40, 60), dtype)
    op = A.Snow(snow=(0.2, 0.8))
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    for i, d in enumerate(drawn):
        ref = snow_reference(x[i].numpy(), d["key"], float(params["snow"][i]))
        if dtype == torch.uint8:
            check(out[i], ref.astype(np.uint8), x[i])
        else:
            np.testing.assert_allclose(out[i].numpy(), np.clip(ref, 0, 1), atol=1e-6)
    assert (out.float() >= x.float()).all() and (out != x).any()


# -- pixelate ---------------------------------------------------------------------------------------------
def pixelate_reference(img: np.ndarray, percent: float) -> np.ndarray:
    """rpp's two resizes, literally: bilinear (half-pixel centres) down, rounded, nearest back."""
    _, height, width = img.shape
    sh, sw = max(1, math.trunc(height * (100 - percent) / 100)), max(1, math.trunc(width * (100 - percent) / 100))

    def taps(small, size):
        pos = np.maximum((np.arange(small) + 0.5) * size / small - 0.5, 0.0)
        low = np.minimum(np.floor(pos), size - 1).astype(int)
        return low, np.minimum(low + 1, size - 1), (pos - low).astype(np.float32)

    y0, y1, wy = taps(sh, height)
    x0, x1, wx = taps(sw, width)
    src = img.astype(np.float32)
    vertical = src[:, y0] * (1 - wy)[:, None] + src[:, y1] * wy[:, None]
    small = vertical[:, :, x0] * (1 - wx) + vertical[:, :, x1] * wx
    if img.dtype == np.uint8:
        small = np.clip(np.rint(small), 0, 255)
    ys = np.minimum((2 * np.arange(height) + 1) * sh // (2 * height), sh - 1)
    xs = np.minimum((2 * np.arange(width) + 1) * sw // (2 * width), sw - 1)
    return small[:, ys][:, :, xs]


@pytest.mark.parametrize("dtype", DTYPES)
def test_pixelate_is_rpps_two_resizes(dtype) -> None:
    x = as_dtype(images(5, 45, 62), dtype)
    op = A.Pixelate(percent=(20.0, 95.0))
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    for i in range(5):
        check(out[i], finish(pixelate_reference(x[i].numpy(), float(params["percent"][i])), x[i]), x[i])
    sizes = {(F.pixelate_size(params["percent"][i : i + 1], 45).item()) for i in range(5)}
    assert len(sizes) > 1  # reduced sizes differ between the samples of one batch
    assert torch.equal(A.Pixelate(percent=0.0).apply(x, draw(A.Pixelate(percent=0.0), x)[1]), x)


# -- noise ---------------------------------------------------------------------------------------------------
def dali_run(build, hwc: list[np.ndarray], **args: list[np.ndarray]) -> list[np.ndarray]:
    """``build(images, **args)`` on a DALI CPU pipeline (``device_id=None``); one array per sample each."""
    dali = pytest.importorskip("nvidia.dali")

    def constant(batch):
        return lambda: batch  # no parameter: DALI would pass the iteration number to one

    @dali.pipeline_def(batch_size=len(hwc), num_threads=1, device_id=None, seed=1)
    def pipe():
        x = dali.fn.external_source(source=constant(hwc), batch=True, layout="HWC")
        nodes = {k: dali.fn.external_source(source=constant(v), batch=True) for k, v in args.items()}
        return build(dali.fn, x, **nodes)

    p = pipe()
    p.build()
    (out,) = p.run()
    return [np.array(out[i]) for i in range(len(hwc))]


def hwc(x: torch.Tensor) -> list[np.ndarray]:
    return [np.ascontiguousarray(s.permute(1, 2, 0).numpy()) for s in x]


def chw(outputs: list[np.ndarray]) -> torch.Tensor:
    return torch.stack([torch.from_numpy(o).permute(2, 0, 1) for o in outputs])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("per_channel", [False, True])
def test_salt_and_pepper_formula(dtype, per_channel) -> None:
    x = as_dtype(images(), dtype)
    op = A.SaltAndPepperNoise(prob=(0.05, 0.4), salt_vs_pepper=(0.2, 0.8), salt=0.9, pepper=0.1,
                              per_channel=per_channel)
    drawn, params = draw(op, x)
    out = op.apply(x, params)
    salt, pepper = (np.uint8(230), np.uint8(26)) if dtype == torch.uint8 else (np.float32(0.9), np.float32(0.1))
    for i, d in enumerate(drawn):
        shape = (3, 40, 56) if per_channel else (1, 40, 56)
        n = F.counter_uniform(torch.tensor([d["key"]]), shape, "cpu")[0].numpy()
        prob, svp = float(params["prob"][i]), float(params["salt_vs_pepper"][i])
        ref = np.where(n < prob * svp, salt, np.where(n < prob, pepper, x[i].numpy()))
        check(out[i], ref.astype(x[i].numpy().dtype), x[i])
        hit = (out[i] != x[i]).float().mean().item()
        assert abs(hit - prob) < 0.1


def test_salt_and_pepper_matches_dali() -> None:
    x = images().clamp(1, 254)  # no pixel is salt or pepper already: a hit always shows
    frames = hwc(x)
    ours = A.SaltAndPepperNoise(prob=1.0, salt_vs_pepper=1.0)
    everything_salt = dali_run(lambda fn, img: fn.noise.salt_and_pepper(img, prob=1.0, salt_vs_pepper=1.0), frames)
    assert torch.equal(ours.apply(x, draw(ours, x)[1]), chw(everything_salt)) and chw(everything_salt).eq(255).all()
    ours = A.SaltAndPepperNoise(prob=1.0, salt_vs_pepper=0.0)
    everything_pepper = dali_run(lambda fn, img: fn.noise.salt_and_pepper(img, prob=1.0, salt_vs_pepper=0.0), frames)
    assert torch.equal(ours.apply(x, draw(ours, x)[1]), chw(everything_pepper)) and chw(everything_pepper).eq(0).all()
    # in between, the same law: a pixel's channels are hit together, salt and pepper in proportion
    for per_channel in (False, True):
        op = A.SaltAndPepperNoise(prob=0.3, salt_vs_pepper=0.25, per_channel=per_channel)
        mine = op.apply(x, draw(op, x)[1])
        dali = chw(dali_run(lambda fn, img, pc=per_channel: fn.noise.salt_and_pepper(
            img, prob=0.3, salt_vs_pepper=0.25, per_channel=pc), frames))
        for out in (mine, dali):
            hit = out != x
            n = hit.numel() if per_channel else hit[:, 0].numel()
            rate = (hit.float().mean() if per_channel else hit.any(1).float().mean()).item()
            assert abs(rate - 0.3) < 5 * math.sqrt(0.3 * 0.7 / n), rate
            salted = (out[hit] == 255).float().mean().item()
            assert abs(salted - 0.25) < 0.03, salted
            together = (hit.all(1) | ~hit.any(1)).float().mean().item()
            assert (together == 1.0) != per_channel


def test_shot_noise_is_the_poisson_inverse_cdf_of_its_draws() -> None:
    stats = pytest.importorskip("scipy.stats")
    x = images(4)
    for dtype, factor in [(torch.uint8, (1.0, 40.0)), (torch.uint8, (0.2, 0.9)), (torch.float32, (0.5, 40.0))]:
        xs = as_dtype(x, dtype)  # uint8 below a factor of 1 walks each pixel's CDF, as float does
        op = A.ShotNoise(factor=factor)
        drawn, params = draw(op, xs)
        out = op.apply(xs, params)
        for i, d in enumerate(drawn):
            u = F.counter_uniform(torch.tensor([d["key"]]), tuple(x.shape[1:]), "cpu")[0].numpy()
            f = np.float32(params["factor"][i])
            k = stats.poisson.ppf(u, x[i].numpy().astype(np.float64) / float(f))
            levels = k.astype(np.float32) * f
            ref = np.floor(levels + np.float32(0.5)) if dtype == torch.uint8 else levels / np.float32(255.0)
            check(out[i], finish(ref, xs[i], rounding=np.trunc), xs[i])
    zero = A.ShotNoise(factor=0.0)
    assert torch.equal(zero.apply(x, draw(zero, x)[1]), x)


def test_shot_noise_matches_dali_in_distribution() -> None:
    levels = [0, 3, 40, 128, 250]
    flat = torch.stack([torch.full((3, 64, 64), v, dtype=torch.uint8) for v in levels])
    for factor in (0.0, 2.5, 20.0):
        op = A.ShotNoise(factor=factor)
        mine = op.apply(flat, draw(op, flat)[1])
        dali = chw(dali_run(lambda fn, img, f=factor: fn.noise.shot(img, factor=f), hwc(flat)))
        for i, v in enumerate(levels):
            a, b = mine[i].double(), dali[i].double()
            if factor == 0.0:  # the identity, as DALI's documentation says (its 2.4 CPU operator gives 0)
                assert torch.equal(mine[i], flat[i])
                continue
            sd = math.sqrt(max(v * factor, 1.0) / a.numel())
            assert abs(a.mean() - b.mean()) < 6 * sd, (factor, v, a.mean(), b.mean())
            if 0 < v < 200:  # no saturation: the variance of k * factor is v * factor
                assert abs(a.var() / b.var() - 1) < 0.15, (factor, v, a.var(), b.var())
            support = set(torch.unique(a).tolist()) | set(torch.unique(b).tolist())
            assert all(abs(s / factor - round(s / factor)) * factor <= 0.5 + 1e-6 or s == 255 for s in support)


# -- grid mask ----------------------------------------------------------------------------------------------
def grid_keep_reference(height: int, width: int, tile: int, ratio: float, angle: float, sx: float, sy: float):
    dx, dy = np.float32(math.cos(angle) / tile), np.float32(math.sin(angle) / tile)
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    fx = xs * dx - ys * dy - np.float32(sx) / np.float32(tile)
    fy = xs * dy + ys * dx - np.float32(sy) / np.float32(tile)
    return ((fx - np.floor(fx)) >= np.float32(ratio)) | ((fy - np.floor(fy)) >= np.float32(ratio))


GRID = A.GridMask(tile=(8, 30), ratio=(0.2, 0.8), angle=(-3.0, 3.0), shift_x=(-20.0, 20.0), shift_y=(0.0, 15.0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_grid_mask_formula(dtype) -> None:
    x = as_dtype(images(), dtype)
    drawn, params = draw(GRID, x)
    out = GRID.apply(x, params)
    for i, d in enumerate(drawn):
        keep = grid_keep_reference(40, 56, d["tile"], float(params["ratio"][i]), float(params["angle"][i]),
                                   float(params["shift_x"][i]), float(params["shift_y"][i]))
        check(out[i], x[i].numpy() * keep, x[i])
        assert 0.05 < 1 - keep.mean() < 0.95


def test_grid_mask_matches_dali() -> None:
    x = images()
    drawn, _ = draw(GRID, x)
    ours = GRID.apply(x, stack_params(drawn))
    args = {name: [np.array(d[name], np.int32 if name == "tile" else np.float32) for d in drawn]
            for name in ("tile", "ratio", "angle", "shift_x", "shift_y")}
    dali = chw(dali_run(lambda fn, img, **a: fn.grid_mask(img, **a), hwc(x), **args))
    assert torch.equal(ours, dali)


# -- every op: p, clips, lists, config ----------------------------------------------------------------
ALL = [A.Gamma(), A.ColorTemperature(), A.Vignette(), A.FishEye(), A.LensCorrection(), A.Fog(), A.Rain(),
       A.Snow(), A.Pixelate(percent=(30.0, 80.0)), A.SaltAndPepperNoise(), A.ShotNoise(), A.GridMask(tile=12)]
NAMES = [type(op).__name__ for op in ALL]


@pytest.mark.parametrize("op", ALL, ids=NAMES)
def test_p_transforms_the_drawn_samples_only(op) -> None:
    x = images(8)
    full = op.apply(x, draw(op, x)[1])
    assert not torch.equal(full, x)
    some = op_from_config({**op.to_config(), "p": 0.5})
    drawn, params = draw(some, x)
    on = [d["on"] for d in drawn]
    assert any(on) and not all(on)
    out = some.apply(x, params)
    ref = op.apply(x, {**params, "on": torch.ones(8, dtype=torch.bool)})
    for i, hit in enumerate(on):
        assert torch.equal(out[i], ref[i] if hit else x[i])
    never = op_from_config({**op.to_config(), "p": 0.0})
    assert torch.equal(never.apply(x, draw(never, x)[1]), x)


@pytest.mark.parametrize("op", ALL, ids=NAMES)
def test_one_draw_per_clip_and_one_sample_alone(op) -> None:
    clips = torch.stack([images(3, 24, 32, seed=10 * b) for b in range(3)])  # (B, T, C, H, W)
    drawn, params = draw(op, clips)
    out = op.apply(clips, params)
    assert out.shape == clips.shape and out.dtype == clips.dtype
    for b, d in enumerate(drawn):
        assert torch.equal(op.apply(clips[b], d), out[b])  # one sample, plain params: the same
    if "key" not in drawn[0] or isinstance(op, (A.Rain, A.Snow)):  # a layer drawn once for every frame
        for t in range(3):
            assert torch.equal(out[:, t], op.apply(clips[:, t].contiguous(), params))
    images_of_two_sizes = [images(1, 30, 40)[0], images(1, 36, 28, seed=5)[0]]
    listed = op.apply(images_of_two_sizes, stack_params([op.sample_params(SampleRNG(0, 0, i, 1),
                                                                           {"size": tuple(s.shape[-2:])})
                                                          for i, s in enumerate(images_of_two_sizes)]))
    assert [tuple(s.shape) for s in listed] == [(3, 30, 40), (3, 36, 28)]


@pytest.mark.parametrize("op", [
    A.Gamma(gamma=(0.5, 2.0), p=0.3), A.ColorTemperature(adjustment=20), A.Vignette(intensity=3.0),
    A.FishEye(p=0.5), A.LensCorrection(k1=-0.2, k2=(0.0, 0.1), focal=0.5), A.Fog(intensity=0.3, gray=(0.0, 0.5)),
    A.Rain(percentage=3.0, drop_width=2, drop_length=9, slant=0.2, transparency=0.4), A.Snow(snow=0.4),
    A.Pixelate(percent=(10.0, 60.0)), A.SaltAndPepperNoise(prob=0.1, per_channel=True, salt=0.8),
    A.ShotNoise(factor=(1.0, 5.0)), A.GridMask(tile=(20, 40), ratio=0.4, angle=(0.0, 1.0), shift_x=3.0),
], ids=NAMES)
def test_config_round_trip(op) -> None:
    assert op_from_config(op.to_config()) == op


@pytest.mark.parametrize(("make", "match"), [
    (lambda: A.Gamma(gamma=0.0), "gamma"),
    (lambda: A.Gamma(gamma=(2.0, 1.0)), "gamma"),
    (lambda: A.ColorTemperature(adjustment=(-300, 0)), "adjustment"),
    (lambda: A.Vignette(intensity=-1.0), "intensity"),
    (lambda: A.LensCorrection(focal=0.0), "focal"),
    (lambda: A.Fog(gray=1.5), "gray"),
    (lambda: A.Rain(drop_width=0), "drop_width"),
    (lambda: A.Rain(transparency=(0.5, 1.2)), "transparency"),
    (lambda: A.Snow(snow=-0.1), "snow"),
    (lambda: A.Pixelate(percent=100.0), "percent"),
    (lambda: A.SaltAndPepperNoise(prob=1.5), "prob"),
    (lambda: A.SaltAndPepperNoise(salt=2.0), "salt"),
    (lambda: A.ShotNoise(factor=-1.0), "factor"),
    (lambda: A.GridMask(tile=0), "tile"),
    (lambda: A.GridMask(ratio=(0.2, 1.1)), "ratio"),
    (lambda: A.FishEye(p=1.5), "p=1.5"),
])
def test_argument_validation_names_the_op_and_the_argument(make, match) -> None:
    with pytest.raises(ValueError, match=match):
        make()


# -- in a pipeline: workers, where the batch stage runs, DALI --------------------------------------------
def effects_pipeline(root, dtype: str) -> mp.Pipeline:
    ops = [op_from_config({**op.to_config(), "p": 0.7}) for op in ALL]
    head = [A.RandomResizedCrop(40)] + ([A.ToDtype("float32")] if dtype == "float32" else [])
    return mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image()}, head + ops, batch_size=6,
                       seed=3, device="cpu")


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_the_same_batches_with_0_or_2_workers_and_the_batch_stage_anywhere(image_folder, dtype) -> None:
    pipe = effects_pipeline(image_folder, dtype)
    inline = collect(pipe.loader(num_workers=0))
    assert len(inline) == 4 and inline[0]["image"].dtype == getattr(torch, dtype)
    assert_same(inline, collect(pipe.loader(num_workers=2)))  # the batch stage in the workers
    if dtype == "uint8":
        assert_same(inline, collect(pipe.loader(num_workers=2, batch_ops_in_workers=False)))


def test_dali_lowers_grid_mask_with_the_keyed_draws(image_folder) -> None:
    pytest.importorskip("nvidia.dali")
    grid = A.GridMask(tile=(12, 40), ratio=(0.3, 0.7), angle=(-1.0, 1.0), shift_x=(0.0, 9.0), p=0.8)
    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()},
                       [A.Resize(96), A.CenterCrop(80), A.HorizontalFlip(), grid], batch_size=8, seed=2,
                       device="cpu")
    a, b = next(iter(pipe.loader(backend="dali", rng="keyed"))), next(iter(pipe.loader(backend="torch")))
    zeroed_a, zeroed_b = (a["image"] == 0).all(1), (b["image"] == 0).all(1)
    assert zeroed_b.any() and (zeroed_a == zeroed_b).float().mean() > 0.999  # the same squares, flipped first
    diff = (a["image"].float() - b["image"].float()).abs()
    assert diff.max() <= 3 and diff.mean() < 0.5  # DALI's decode and resize round differently


def test_dali_refuses_the_noises_and_names_the_effects_it_has_no_operator_for(image_folder) -> None:
    pytest.importorskip("nvidia.dali")
    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()},
                       [A.Resize(64), A.SaltAndPepperNoise(), A.ShotNoise(), A.Fog(), A.FishEye()], device="cpu")
    with pytest.raises(PipelineError) as info:
        pipe.loader(backend="dali")
    message = str(info.value)
    assert "augment[1] SaltAndPepperNoise(DALI's noise.salt_and_pepper draws its own noise" in message
    assert "augment[2] ShotNoise(DALI's noise.shot draws its own noise" in message
    assert "augment[3] Fog" in message and "augment[4] FishEye" in message
