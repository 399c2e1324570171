"""The recipes' geometric warps with torchvision v2's names and semantics: ``RandomPerspective``
and ``ElasticTransform`` (batch stage), moving images, videos, masks (nearest, fill 0), boxes and
keypoints with one draw per sample, through `mediapipe.augment.functional.perspective` and
`mediapipe.augment.functional.elastic`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mediapipe.augment.base import Canvas, Op, Params, Stage, check_probability, is_single
from mediapipe.augment.functional import elastic as E
from mediapipe.augment.functional import perspective as P
from mediapipe.augment.functional.selected import take, where_selected
from mediapipe.augment.geometry import Fill, _check_fill, _meta
from mediapipe.fields import IMAGE, VIDEO, FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta


def _check_warp_interpolation(op: Op) -> None:
    if op.interpolation not in P.WARP_INTERPOLATIONS:
        raise ValueError(f"{type(op).__name__}(interpolation={op.interpolation!r}): expected one of "
                         f"{P.WARP_INTERPOLATIONS} (torchvision's tensor warps)")


def perspective_endpoints(rng: SampleRNG, height: int, width: int, distortion_scale: float) -> list[list[int]]:
    """The four moved corners (top-left, top-right, bottom-right, bottom-left) as torchvision's
    ``RandomPerspective.make_params`` draws them: each within ``distortion_scale`` of half the
    side of its own corner, x then y, in that order."""
    bound_h = int(distortion_scale * (height // 2)) + 1
    bound_w = int(distortion_scale * (width // 2)) + 1
    low_x, high_x = (0, bound_w), (width - bound_w, width)
    low_y, high_y = (0, bound_h), (height - bound_h, height)
    return [[rng.integers(*xs), rng.integers(*ys)] for xs, ys in
            ((low_x, low_y), (high_x, low_y), (high_x, high_y), (low_x, high_y))]


@dataclass(frozen=True)
class RandomPerspective(Op):
    """Warp each sample by its own random perspective with probability ``p`` (torchvision's
    ``RandomPerspective``: the four corners each move inwards by up to ``distortion_scale`` of
    half the side, the coefficients solved as torchvision solves them).

    Input: images (B, C, H, W), clips (B, T, C, H, W) warped as a whole, masks (nearest, fill 0),
    boxes (the box holding each box's four moved corners, clamped to the canvas, as torchvision
    moves them) and keypoints; uint8 or float. Output: same shape and dtype (uint8 is warped in
    float32 and rounded).
    Args:
        distortion_scale: in [0, 1]; 0 is the identity, 1 lets a corner reach the middle of its sides.
        p: probability per sample; 0 never warps, 1 always.
        interpolation: "bilinear" (default) or "nearest", for images.
        fill: value of image pixels from outside the image: a number or one per channel, blended by
            the interpolated mask as torchvision does; None reads zeros there.
    Stage: batch (one batched ``grid_sample`` with per-sample homographies; on the CPU only the
    samples drawn to warp are computed).
    """

    distortion_scale: float = 0.5
    p: float = 0.5
    interpolation: str = "bilinear"
    fill: Fill | None = 0
    functional = P.perspective

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.distortion_scale <= 1.0:
            raise ValueError(f"RandomPerspective(distortion_scale={self.distortion_scale}): expected 0 <= "
                             "distortion_scale <= 1")
        check_probability(self, self.p)
        _check_warp_interpolation(self)
        _check_fill(self, self.fill)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        apply = rng.random() < self.p  # torchvision's _RandomApplyTransform draws this first
        start = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
        end = perspective_endpoints(rng, height, width, self.distortion_scale)
        return {"apply": apply, "coefficients": tuple(P.perspective_coefficients(start, end))}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        coefficients, apply = params["coefficients"], params["apply"]
        meta = _meta(field, canvas_size or tuple(x.shape[-2:]))
        if field.spec.is_objects:
            if x.shape[0] == 0:
                return x
            moved = P.perspective(x, coefficients, **meta)
            return torch.where(apply.to(x.device).reshape(-1, *(1,) * (x.ndim - 1)), moved, x)
        return where_selected(x, apply, lambda t, index: P.perspective(
            t, take(coefficients, index), interpolation=self.interpolation, fill=self.fill, **meta))


def per_pixel_placement(op: Op) -> Stage:
    """Where an op that draws a value per pixel runs: once per batch, unless its images batch as a
    list (of several sizes), whose draws cannot be stacked: then per sample, each on its own size."""
    listed = any(t.kind in (IMAGE, VIDEO) and t.batching == "list" for t in op.binding.types)
    return Stage.SAMPLE if listed else Stage.BATCH


def _pair(op: Op, name: str, value: float | tuple[float, float]) -> tuple[float, float]:
    pair = (float(value), float(value)) if isinstance(value, (int, float)) else tuple(float(v) for v in value)
    if len(pair) != 2:
        raise ValueError(f"{type(op).__name__}({name}={value!r}): expected a number or two (x, y)")
    return pair


@dataclass(frozen=True)
class ElasticTransform(Op):
    """Displace each sample's pixels by its own smooth random field (torchvision's
    ``ElasticTransform``): uniform noise in [-1, 1] per pixel and axis, blurred by a Gaussian of
    std ``sigma``, scaled by ``alpha`` pixels, added to the sampling grid.

    Input: images (B, C, H, W), clips (B, T, C, H, W) with one field per clip, masks (nearest,
    fill 0), boxes and keypoints (torchvision's approximation: moved back by the displacement at
    their pixel, boxes clamped to the canvas); uint8 or float. Output: same shape and dtype.
    Args:
        alpha: strength in pixels, a number or (x, y); 0 is the identity.
        sigma: smoothness (the blur's std in pixels), a number or (x, y); both 0 leaves the noise
            unblurred. The blur has int(8 sigma + 1) taps (odd), so images must be larger than half
            of that on each side.
        interpolation: "bilinear" (default) or "nearest", for images.
        fill: value of image pixels from outside the image: a number or one per channel; None reads zeros.
    Stage: batch (the fields blurred in one convolution, one batched ``grid_sample``). The noise,
    (2, H, W) float32 per sample, is drawn on the host from the keyed generator, so a sample's
    field is the same on every device and with any number of workers. Images batched as a list
    (of several sizes) are warped per sample in the workers instead.
    """

    alpha: float | tuple[float, float] = 50.0
    sigma: float | tuple[float, float] = 5.0
    interpolation: str = "bilinear"
    fill: Fill | None = 0
    functional = E.elastic

    def __post_init__(self) -> None:
        super().__post_init__()
        alpha, sigma = _pair(self, "alpha", self.alpha), _pair(self, "sigma", self.sigma)
        if min(alpha) < 0:
            raise ValueError(f"ElasticTransform(alpha={self.alpha!r}): expected values >= 0")
        if min(sigma) < 0 or (min(sigma) == 0 < max(sigma)):
            raise ValueError(f"ElasticTransform(sigma={self.sigma!r}): expected both > 0, or both 0 for no blur "
                             "(torchvision blurs each axis with both values)")
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "sigma", sigma)
        _check_warp_interpolation(self)
        _check_fill(self, self.fill)

    def placement(self) -> Stage:
        return per_pixel_placement(self)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        if max(self.sigma) > 0:
            half = max(E.blur_taps(s) for s in self.sigma) // 2
            if min(height, width) <= half:
                raise ValueError(f"ElasticTransform(sigma={self.sigma}): its blur reflects {half} pixels at each "
                                 f"border, more than the {height}x{width} image has; use a smaller sigma or a "
                                 "larger image")
        return {"noise": rng.numpy().random((2, height, width), dtype=np.float32)}

    def field(self, noise: torch.Tensor) -> torch.Tensor:
        """(B, H, W, 2) displacement fields from the drawn noise (B, 2, H, W)."""
        return E.displacement(noise, self.alpha, self.sigma)

    def apply_fields(self, data: dict[str, Any], params: Params, only: Any = None, canvas_size: Canvas = None) -> None:
        """Every input field moved by one field per sample, made once for all of them."""
        if not is_single(params) and "noise" in params:
            params = {"field": self.field(params["noise"])}
        super().apply_fields(data, params, only, canvas_size)

    def apply(self, x: Any, params: Params, field: FieldType | str | None = None, canvas_size: Canvas = None,
              lengths: torch.Tensor | None = None) -> Any:
        ftype = FieldType(field or self.primary_kind()) if not isinstance(field, FieldType) else field
        if not ftype.spec.is_objects:
            return super().apply(x, params, ftype, canvas_size, lengths)
        # boxes and keypoints: each row reads its own sample's field, made once (never copied per row)
        if is_single(params):
            fields, samples = self.field(torch.as_tensor(np.asarray(params["noise"]))[None]), 0
        else:
            fields = params["field"] if "field" in params else self.field(params["noise"])
            samples = torch.arange(fields.shape[0])
        return _ElasticRows(fields=fields).apply(x, {"sample": samples}, ftype, canvas_size, lengths)

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        fields = params["field"] if "field" in params else self.field(params["noise"])
        return E.elastic(x, fields, interpolation=self.interpolation, fill=self.fill,
                         **_meta(field, canvas_size or tuple(x.shape[-2:])))


@dataclass(frozen=True)
class _ElasticRows(Op):
    """Boxes or keypoints of an `ElasticTransform` draw: the base op's row handling (one sample, a
    list or a padded batch) with row r reading field ``sample[r]`` of the batch's ``fields``."""

    fields: Any = None
    functional = E.elastic

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return E.elastic(x, self.fields, params["sample"], **_meta(field, canvas_size or tuple(self.fields.shape[1:3])))
