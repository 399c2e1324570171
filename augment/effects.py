"""rocAL's and DALI's image effects as ops (batch stage): weather (Fog, Rain, Snow), lens (Vignette,
FishEye, LensCorrection), Pixelate, noise (SaltAndPepperNoise, ShotNoise), colour (Gamma,
ColorTemperature) and GridMask.

Each op follows one library's definition, named in its docstring: rocAL's effects are rpp's
kernels (``rppt_*``, or rpp's legacy host kernel where rocAL has no tensor one), the noises and
the grid mask are DALI's operators. Parameters are drawn per sample from the keyed RNG (a number
is that value, a (low, high) pair is drawn uniformly per sample); the per-pixel randomness is a
counter-based hash of a keyed draw, computed on the batch's device
(`mediapipe.augment.functional.effects.counter_uniform`). Every op takes ``p``, the probability
that a sample is transformed (rocAL and DALI transform every sample: ``p=1``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import torch

from mediapipe.augment.base import Op, Params, check_probability
from mediapipe.augment.functional import effects as F
from mediapipe.augment.functional import lens as L
from mediapipe.fields import BOXES, KEYPOINTS, FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

Canvas = tuple[int, int] | None
Number = float | tuple[float, float]

_INT64_MAX = (1 << 63) - 1
INF = float("inf")


class Domain(NamedTuple):
    """Where an argument drawn per sample may lie: [low, high], an end excluded when strict; an
    integer one is drawn from its range with both ends included."""

    low: float = -INF
    high: float = INF
    strict_low: bool = False
    strict_high: bool = False
    integer: bool = False


ANY = Domain()


def bounds(op: Op, name: str, domain: Domain = ANY) -> tuple[float, float]:
    """The (low, high) argument ``name`` draws from (a number: that value), checked against its
    domain; a ValueError names the op, the argument and the domain."""
    value = getattr(op, name)
    pair = (value, value) if isinstance(value, (int, float)) else tuple(value)
    if len(pair) != 2:
        raise ValueError(f"{type(op).__name__}({name}={value!r}): expected a number or (low, high)")
    a, b = pair
    d = domain
    ok = (a > d.low if d.strict_low else a >= d.low) and a <= b and (b < d.high if d.strict_high else b <= d.high)
    if not ok:
        left, right = "(" if d.strict_low else "[", ")" if d.strict_high else "]"
        raise ValueError(f"{type(op).__name__}({name}={value!r}): expected a number or (low, high) with "
                         f"low <= high, both in {left}{d.low}, {d.high}{right}")
    return a, b


@dataclass(frozen=True)
class _Effect(Op):
    """Shared by the effects: the arguments ``drawn`` per sample (checked against their domains
    when made), ``p``, a noise key for the ``keyed`` ones, and the kernel run on the samples
    drawn on only."""

    p: float = field(default=1.0, kw_only=True)

    drawn: ClassVar[dict[str, Domain]] = {}  # argument -> its domain, each drawn per sample
    keyed: ClassVar[bool] = False  # draws a key for its counter-based noise

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self, self.p)
        for name, domain in self.drawn.items():
            bounds(self, name, domain)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        params: Params = {"on": rng.bernoulli(self.p)}
        for name, domain in self.drawn.items():
            low, high = bounds(self, name, domain)
            params[name] = rng.integers(int(low), int(high) + 1) if domain.integer else rng.uniform(low, high)
        if self.keyed:
            params["key"] = rng.bits() & _INT64_MAX
        return params

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        """The kernel on a batch whose samples are all transformed."""
        raise NotImplementedError(type(self).__name__)

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        if x.device.type == "meta":  # shapes only: no flags to branch on
            return torch.empty_like(x)
        on = params["on"].to(x.device).reshape(-1)
        if bool(on.all()):
            return self.effect(x, params, field)
        chosen = on.nonzero().reshape(-1)
        if chosen.numel() == 0:
            return x
        some = {k: v.index_select(0, chosen.to(v.device)) if isinstance(v, torch.Tensor) and v.ndim else v
                for k, v in params.items()}
        return x.clone().index_copy_(0, chosen, self.effect(x.index_select(0, chosen), some, field).to(x.dtype))


UNIT = Domain(0.0, 1.0)
NON_NEGATIVE = Domain(0.0)


# -- colour ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gamma(_Effect):
    """Gamma correction per sample, rpp's ``gamma_correction`` (rocAL's ``gamma_correction``).

    Input: images (B, C, H, W) and clips (B, T, C, H, W), uint8 or float in [0, 1]; masks and
    boxes pass unchanged. Output: same shape and dtype. uint8 goes through rpp's table,
    trunc(255 (v / 255) ** gamma) per level (the power in float64, rpp's in float32); float
    input is clamp(x, 0, 1) ** gamma (rpp's float kernel looks the same table up at 255 x,
    truncated: this one keeps the values between levels).
    Args:
        gamma: > 0, a number or (low, high) drawn per sample; 1 is the identity, below 1 brightens.
            Default: rocAL's default range.
        p: probability that a sample is corrected.
    Stage: batch (one table lookup for the whole uint8 batch).
    """

    gamma: Number = (0.3, 7.0)

    drawn = {"gamma": Domain(0.0, strict_low=True)}

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        return F.gamma_correction(x, params["gamma"])


@dataclass(frozen=True)
class ColorTemperature(_Effect):
    """Warmer or cooler colours per sample, rpp's ``color_temperature`` (rocAL's ``color_temp``):
    red plus ``adjustment`` grey levels, blue minus it, green kept, saturated.

    Input: RGB images (B, 3, H, W) and clips (B, T, 3, H, W), uint8 or float in [0, 1] (where the
    adjustment is divided by 255). Output: same shape and dtype.
    Args:
        adjustment: grey levels, an int or (low, high) drawn per sample (ends included); positive
            is warmer, 0 the identity. Default: rocAL's default range.
        p: probability that a sample is adjusted.
    Stage: batch.
    """

    adjustment: int | tuple[int, int] = (-99, 99)

    drawn = {"adjustment": Domain(-255, 255, integer=True)}

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        return F.color_temperature(x, params["adjustment"])


# -- lens: vignette, fish-eye, lens correction -------------------------------------------------------


@dataclass(frozen=True)
class Vignette(_Effect):
    """Darker edges per sample, rpp's ``vignette`` (rocAL's ``vignette``): each pixel times
    exp(-intensity (di^2 + dj^2) / (4 r^2)), (di, dj) its offset from pixel (H // 2, W // 2) and
    r = max(H // 2, W // 2); rounded to even for uint8.

    Input: images (B, C, H, W) and clips (B, T, C, H, W), uint8 or float in [0, 1]. Output: same.
    Args:
        intensity: >= 0, a number or (low, high) drawn per sample; 0 is the identity. rocAL's
            default range (40, 60) is its older kernel's standard deviation in pixels and darkens
            all but the centre with this one; the default here reaches rpp's test value, 6.
        p: probability that a sample is darkened.
    Stage: batch (one gain map per sample, one multiply).
    """

    intensity: Number = (1.0, 6.0)

    drawn = {"intensity": NON_NEGATIVE}

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        return F.vignette(x, params["intensity"])


@dataclass(frozen=True)
class _LensWarp(_Effect):
    """A warp that bends straight lines: images, clips and masks (nearest, fill 0) move; boxes and
    keypoints are refused by name (the warp has no point mapping here)."""

    def kinds(self) -> frozenset[str]:
        return self.functional.kinds | {BOXES, KEYPOINTS}

    def refuses(self, field_type: FieldType) -> str | None:
        if field_type.kind in (BOXES, KEYPOINTS):
            return (f"{type(self).__name__} bends straight lines, and boxes and keypoints have no mapping "
                    "through it here; name the fields it moves with keys= (an image and its masks) and "
                    "drop the boxes and keypoints, or move them with an affine op instead")
        return super().refuses(field_type)


@dataclass(frozen=True)
class FishEye(_LensWarp):
    """A fish-eye lens, rpp's ``fisheye`` (rocAL's ``fish_eye``, rpp's legacy host kernel): output
    pixel (i, j) at n = (2 j / W - 1, 2 i / H - 1) with d = |n| <= 1 takes the input pixel at
    trunc((n d' / d + 1) (W, H) / 2), d' = (d + 1 - sqrt(1 - d^2)) / 2; pixels outside the
    disc, and sources outside the image, are 0.

    Input: images (B, C, H, W), clips (B, T, C, H, W) and masks (the same whole pixels), any
    dtype. Boxes and keypoints are refused. Output: same shape and dtype.
    Args:
        p: probability that a sample is warped (the warp itself has no parameter, as rocAL's).
    Stage: batch (one map for the canvas, one gather).
    """

    functional = L.fisheye

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        return L.fisheye(x, kind=field.kind)


@dataclass(frozen=True)
class LensCorrection(_LensWarp):
    """Radial and tangential lens distortion per sample, rpp's ``lens_correction`` (rocAL's
    ``lens_correction``; OpenCV's undistortion model, with its remap).

    The camera has fx = fy = ``focal`` * max(H, W) and its centre at ((W - 1) / 2, (H - 1) / 2);
    output pixel (i, j), at x = (j - cx) / fx, y = (i - cy) / fy, r2 = x^2 + y^2 and
    kr = 1 + k1 r2 + k2 r2^2 + k3 r2^3, reads the input at column
    fx (x kr + 2 p1 x y + p2 (r2 + 2 x^2)) + cx and row fy (y kr + p1 (r2 + 2 y^2) + 2 p2 x y) + cy,
    bilinearly (uint8 rounded to even), 0 where floor(row) or floor(column) leaves the image
    (rpp's rule; rpp also takes its last row's and column's neighbour from the one before).
    Input: images (B, C, H, W), clips (B, T, C, H, W) and masks (nearest: the pixel at the
    rounded coordinates), uint8 or float. Boxes and keypoints are refused. Output: same.
    Args:
        k1, k2, k3: radial coefficients, p1, p2: tangential ones; each a number or (low, high)
            drawn per sample; all 0 is the identity. rocAL takes one camera matrix and set of
            coefficients per batch.
        focal: the focal length as a fraction of the longer side, > 0 (rpp's test camera: 534
            pixels for a 640-wide image, 0.83).
        p: probability that a sample is warped.
    Stage: batch (per-sample coordinate maps, one gather per tap).
    """

    k1: Number = (-0.3, 0.3)
    k2: Number = 0.0
    k3: Number = 0.0
    p1: Number = 0.0
    p2: Number = 0.0
    focal: float = 0.83

    functional = L.lens_correction
    drawn = {name: ANY for name in ("k1", "k2", "k3", "p1", "p2")}

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.focal > 0:
            raise ValueError(f"LensCorrection(focal={self.focal!r}): expected a focal length > 0 "
                             "(a fraction of the longer side)")

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        coefficients = [params[name] for name in self.drawn]
        return L.lens_correction(x, *coefficients, kind=field.kind, focal=self.focal)


# -- weather: fog, rain, snow ------------------------------------------------------------------------


@dataclass(frozen=True)
class Fog(_Effect):
    """Fog per sample, rpp's ``fog`` formula (rocAL's ``fog``): the image blended towards its luma
    (0.299 R + 0.587 G + 0.114 B) by ``gray``, then towards the fog's grey by
    alpha = clamp(a + intensity, 0, 1), rounded to even.

    rpp crops its fog masks (alpha a and the fog's grey) from a fixed texture it ships at a random
    offset; that texture is not reproduced: here each sample draws its own, a smooth value-noise
    t in [0, 1] (three octaves of corner-aligned bilinear grids, drawn from the keyed RNG), with
    a = 0.5 t and the fog's grey 255 (0.75 + 0.25 t).
    Input: images (B, C, H, W) and clips (B, T, C, H, W; one texture for every frame), uint8 or
    float in [0, 1]. Output: same shape and dtype.
    Args:
        intensity: in [0, 1], a number or (low, high) drawn per sample; added to the alpha mask.
        gray: in [0, 1], a number or (low, high) drawn per sample; 0 keeps the colours.
            Defaults: rocAL's default ranges.
        p: probability that a sample is fogged.
    Stage: batch.
    """

    intensity: Number = (0.1, 0.5)
    gray: Number = (0.2, 0.8)

    drawn = {"intensity": UNIT, "gray": UNIT}

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {**super().sample_params(rng, meta), "grids": rng.numpy().random(sum(F.fog_grid_sizes()))}

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        return F.fog(x, params["intensity"], params["gray"], params["grids"])


@dataclass(frozen=True)
class Rain(_Effect):
    """Rain per sample, rpp's ``rain`` (rocAL's ``rain``): every pixel becomes x + (L - x) alpha,
    L the rain layer, 200 grey levels on the drops and 0 elsewhere, so the whole image darkens by
    (1 - alpha) as in rpp; uint8 rounded to even.

    The layer has trunc(percentage * 0.004 * H * W) drops; drop i starts at a column in
    [0, trunc(W - s - 1)] and a row in [0, H - L - 1] (s = sin(slant) drop_length), and pixel j of
    its ``drop_length`` is drop_width pixels from column trunc(x0 + j s / drop_length) on row
    y0 + j, cut at the image's edges (rpp draws the rows from the columns' range and lets a wide
    drop run into the next row). rpp draws one layer per batch from std::random_device; here each
    sample draws its own from the keyed RNG.
    Input: images (B, C, H, W) and clips (B, T, C, H, W; one layer for every frame), uint8 or float
    in [0, 1]. Output: same shape and dtype.
    Args:
        percentage: >= 0, rocAL's ``rain``; drop_width, drop_length: pixels >= 1 (rocAL's
            ``rain_width``, ``rain_height``); slant: radians (rocAL's ``rain_slant_angle``).
            Defaults: rpp's test values.
        transparency: alpha in [0, 1], a number or (low, high) drawn per sample (rocAL's
            ``rain_transparency``; default: its default range).
        p: probability that a sample is rained on.
    Stage: batch (one scatter for every drop of the batch).
    """

    percentage: float = 7.0
    drop_width: int = 1
    drop_length: int = 6
    slant: float = 0.0
    transparency: Number = (0.2, 0.3)

    drawn = {"transparency": UNIT}
    keyed = True

    def __post_init__(self) -> None:
        super().__post_init__()
        bounds(self, "percentage", NON_NEGATIVE)
        bounds(self, "drop_width", Domain(1))
        bounds(self, "drop_length", Domain(1))

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        return F.rain(x, params["transparency"], params["key"], self.percentage, self.drop_width,
                      self.drop_length, self.slant)


@dataclass(frozen=True)
class Snow(_Effect):
    """Snow per sample, rpp's ``snow`` (rocAL's ``snow``; rpp's legacy host kernel): trunc(snow / 100
    * H * W * C) flakes, each at a uniform top-left pixel, add rpp's 5x5 flake (255 at its centre)
    to every channel where the flake fits (row + 5 < H, column + 5 < W), saturated. rpp draws
    the pixels with rand(); here each sample draws its own from the keyed RNG.

    Input: images (B, C, H, W) and clips (B, T, C, H, W; the same flakes on every frame), uint8
    or float in [0, 1] (the flake's levels / 255). Output: same shape and dtype.
    Args:
        snow: >= 0, a number or (low, high) drawn per sample. Default: rocAL's default range.
        p: probability that a sample is snowed on.
    Stage: batch (one scatter-add for every flake of the batch).
    """

    snow: Number = (0.1, 0.8)

    drawn = {"snow": NON_NEGATIVE}
    keyed = True

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        return F.snow(x, params["snow"], params["key"])


# -- pixelate, noise, grid mask ------------------------------------------------------------------------


@dataclass(frozen=True)
class Pixelate(_Effect):
    """Blocky pixels per sample, rpp's ``pixelate`` (rocAL's ``pixelate``): a bilinear resize (half-pixel
    centres, not antialiased; uint8 rounded to even) to trunc(side * (100 - percent) / 100) per
    side (at least 1), then rpp's nearest resize back (output pixel d takes reduced pixel
    floor((2 d + 1) small / (2 side))).

    Input: images (B, C, H, W) and clips (B, T, C, H, W), uint8 or float in [0, 1]. Output: same.
    Args:
        percent: in [0, 100), a number or (low, high) drawn per sample; 0 is the identity.
            Default: rocAL's ``pixelate_percent``.
        p: probability that a sample is pixelated.
    Stage: batch (each sample's reduced size in the gather indices: samples of any sizes in one pass).
    """

    percent: Number = 50.0

    drawn = {"percent": Domain(0.0, 100.0, strict_high=True)}

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        return F.pixelate(x, params["percent"])


@dataclass(frozen=True)
class SaltAndPepperNoise(_Effect):
    """Salt-and-pepper noise per sample, DALI's ``noise.salt_and_pepper``: each pixel (each element
    with ``per_channel``) draws n uniform in (0, 1); n < prob * salt_vs_pepper makes it ``salt``,
    else n < prob makes it ``pepper``, else it stays.

    Input: images (B, C, H, W) and clips (B, T, C, H, W; noise on every frame), uint8 or float in
    [0, 1]. Output: same shape and dtype.
    Args:
        prob: in [0, 1], the probability that a pixel is corrupted; salt_vs_pepper: in [0, 1],
            that a corrupted one is salt; each a number or (low, high) drawn per sample.
        salt, pepper: in [0, 1] of full scale (uint8: rounded to levels; DALI's defaults for uint8,
            white and black; DALI's float pepper is -1, here 0, the image's range).
        per_channel: noise drawn per channel (some channels of a pixel hit), as DALI's option.
        p: probability that a sample gets noise.
    Stage: batch (counter-based noise on the batch's device).
    """

    prob: Number = 0.05
    salt_vs_pepper: Number = 0.5
    salt: float = 1.0
    pepper: float = 0.0
    per_channel: bool = False

    drawn = {"prob": UNIT, "salt_vs_pepper": UNIT}
    keyed = True

    def __post_init__(self) -> None:
        super().__post_init__()
        bounds(self, "salt", UNIT)
        bounds(self, "pepper", UNIT)

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        return F.salt_and_pepper(x, params["prob"], params["salt_vs_pepper"], params["key"], self.salt,
                                 self.pepper, self.per_channel)


@dataclass(frozen=True)
class ShotNoise(_Effect):
    """Shot (Poisson) noise per sample, DALI's ``noise.shot``: each element v (grey levels) becomes
    k * factor, k ~ Poisson(max(0, v) / factor), rounded half up and saturated; a sensor where
    each photon adds ``factor`` levels: the larger the factor, the noisier.

    Input: images (B, C, H, W) and clips (B, T, C, H, W), uint8 or float in [0, 1] (taken as
    255 x levels, and back, clamped to [0, 1]). Output: same shape and dtype.
    Args:
        factor: >= 0 grey levels, a number or (low, high) drawn per sample; 0 is the identity, as
            DALI's documentation says (DALI 2.4's CPU operator gives 0 there). Default: DALI's.
        p: probability that a sample gets noise.
    Stage: batch (counter-based uniforms through the exact Poisson inverse CDF, on the device).
    """

    factor: Number = 20.0

    drawn = {"factor": NON_NEGATIVE}
    keyed = True

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        return F.shot_noise(x, params["factor"], params["key"])


@dataclass(frozen=True)
class GridMask(_Effect):
    """GridMask (Chen et al. 2020) per sample, DALI's ``grid_mask``: black squares of side
    ratio * tile repeating every ``tile`` pixels, the grid turned by ``angle`` about the top-left
    corner and shifted after the turn. With dx = cos(angle) / tile, dy = sin(angle) / tile
    (float32), pixel (x, y) is zeroed where frac(x dx - y dy - shift_x / tile) < ratio and
    frac(x dy + y dx - shift_y / tile) < ratio.

    Input: images (B, C, H, W) and clips (B, T, C, H, W; one grid for every frame), any dtype.
    Masks and boxes pass unchanged. Output: same shape and dtype.
    Args:
        tile: pixels >= 1, an int or (low, high) drawn per sample (ends included).
        ratio: in [0, 1], black square side / tile; 0 keeps everything.
        angle: radians (DALI's unit); shift_x, shift_y: pixels. Each a number or (low, high)
            drawn per sample. Defaults: DALI's.
        p: probability that a sample is masked.
    Stage: batch.
    """

    tile: int | tuple[int, int] = 100
    ratio: Number = 0.5
    angle: Number = 0.0
    shift_x: Number = 0.0
    shift_y: Number = 0.0

    drawn = {"tile": Domain(1, integer=True), "ratio": UNIT, "angle": ANY, "shift_x": ANY, "shift_y": ANY}

    def effect(self, x: torch.Tensor, params: Params, field: FieldType) -> torch.Tensor:
        return F.grid_mask(x, params["tile"], params["ratio"], params["angle"], params["shift_x"],
                           params["shift_y"])


__all__ = ["ColorTemperature", "FishEye", "Fog", "Gamma", "GridMask", "LensCorrection", "Pixelate", "Rain",
           "SaltAndPepperNoise", "ShotNoise", "Snow", "Vignette"]
