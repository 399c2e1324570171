"""Affine warp ops (batch stage): random rotations and affine transforms, one inverse matrix per
sample moving every spatial field, through `mediapipe.augment.functional.spatial.affine`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mediapipe.augment.base import Op, Params, Stage, check_range
from mediapipe.augment.functional import geometry as F
from mediapipe.augment.functional import spatial as S
from mediapipe.augment.geometry import Canvas, Fill, _check_fill, _meta
from mediapipe.fields import FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta


def _degrees(op: Op, value: float | tuple[float, float], name: str) -> tuple[float, float]:
    if isinstance(value, (int, float)):
        if not value >= 0:
            raise ValueError(f"{type(op).__name__}({name}={value}): a single number must be non-negative "
                             "(the range is (-v, v))")
        return (-float(value), float(value))
    pair = tuple(float(v) for v in value)
    if len(pair) != 2 or not pair[0] <= pair[1]:
        raise ValueError(f"{type(op).__name__}({name}={value!r}): expected a number or (low, high) with low <= high")
    return pair


def _check_center(op: Op, center: tuple[float, float] | None) -> None:
    if center is not None and len(center) != 2:
        raise ValueError(f"{type(op).__name__}(center={center!r}): expected (x, y) in pixels")


@dataclass(frozen=True)
class _Warp(Op):
    """Shared by the affine warps: one inverse matrix per sample, for every field it moves (masks
    nearest with fill 0, boxes through the forward matrix and clamped, keypoints moved)."""

    functional = S.affine

    def _check_warp_args(self) -> None:
        name = type(self).__name__
        if self.interpolation not in ("nearest", "bilinear"):
            raise ValueError(f"{name}(interpolation={self.interpolation!r}): expected 'nearest' or 'bilinear'")
        _check_center(self, self.center)
        _check_fill(self, self.fill)

    def center_offset(self, canvas_size: tuple[int, int]) -> tuple[float, float]:
        """torchvision's centre: (x, y) pixels from the top-left corner, re-expressed from the canvas centre."""
        if self.center is None:
            return (0.0, 0.0)
        height, width = canvas_size
        return (self.center[0] - width * 0.5, self.center[1] - height * 0.5)

    def inverse_matrices(self, params: Params, canvas_size: tuple[int, int]) -> torch.Tensor:
        """(B, 2, 3) inverse matrices (output pixel to input pixel, from the canvas centre) of stacked params."""
        raise NotImplementedError

    def output_size(self, matrix: torch.Tensor, canvas_size: tuple[int, int]) -> tuple[int, int] | None:
        """The output (H, W) for one sample's matrix: None keeps the canvas."""
        return None

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        canvas_size = canvas_size or tuple(x.shape[-2:])
        matrix = self.inverse_matrices(params, canvas_size)
        if field.spec.is_objects and x.shape[0] == 0:
            return x
        size = self.output_size(matrix, canvas_size)
        return S.affine(x, matrix, interpolation=self.interpolation, fill=self.fill, output_size=size,
                        **_meta(field, canvas_size))


@dataclass(frozen=True)
class RandomRotation(_Warp):
    """Rotate each sample by its own random angle, counter-clockwise (torchvision's ``RandomRotation``).

    Input: images (B, C, H, W), clips (B, T, C, H, W) turned as a whole, masks (nearest, fill 0),
    boxes (the box around each turned box, clamped to the canvas) and keypoints; uint8 or float.
    Output: same shape and dtype (uint8 is warped in float32 and rounded); with ``expand`` the
    output grows to hold the whole rotated image.
    Args:
        degrees: (low, high) in degrees, or a number d for (-d, d); 0 is the identity.
        interpolation: "nearest" (default) or "bilinear", for images.
        expand: grow the output to hold the rotated image. The shape then differs per sample,
            so the op runs in the sample stage and a later crop or resize must equalise sizes.
        center: (x, y) in pixels from the top-left corner; None for the image centre.
        fill: value of image pixels from outside the image: a number or one per channel; None lets
            bilinear samples at the border blend with zeros (torchvision's ``fill=None``).
    Stage: batch (one batched ``grid_sample`` with per-sample matrices); sample when ``expand``.
    """

    degrees: float | tuple[float, float] = 0.0
    interpolation: str = "nearest"
    expand: bool = False
    center: tuple[float, float] | None = None
    fill: Fill | None = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "degrees", _degrees(self, self.degrees, "degrees"))
        self._check_warp_args()

    def placement(self) -> Stage:
        return Stage.SAMPLE if self.expand else Stage.BATCH

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"angle": rng.uniform(*self.degrees)}

    def inverse_matrices(self, params: Params, canvas_size: tuple[int, int]) -> torch.Tensor:
        angle = params["angle"].reshape(-1)
        b = angle.shape[0]
        f64 = dict(dtype=torch.float64, device=angle.device)
        zeros = torch.zeros(b, 2, **f64)
        center = torch.tensor(self.center_offset(canvas_size), **f64).expand(b, 2)
        # torchvision's rotate passes -angle to the affine matrix (its two conventions differ)
        return F.affine_matrix(-angle, zeros, torch.ones(b, **f64), zeros, center)

    def output_size(self, matrix: torch.Tensor, canvas_size: tuple[int, int]) -> tuple[int, int] | None:
        if not self.expand:
            return None
        if matrix.shape[0] > 1 and not bool((matrix == matrix[:1]).all()):
            raise ValueError("RandomRotation(expand=True) runs per sample (the output size depends on the angle)")
        return F.rotate_output_size(matrix[0], *canvas_size)


@dataclass(frozen=True)
class RandomAffine(_Warp):
    """Random rotation, translation, scale and shear per sample, about the centre (torchvision's
    ``RandomAffine``, its ``_get_inverse_affine_matrix`` convention: positive angles turn clockwise).

    Input: images (B, C, H, W), clips (B, T, C, H, W), masks (nearest, fill 0), boxes (clamped)
    and keypoints; uint8 or float. Output: same shape and dtype.
    Args:
        degrees: rotation range in degrees, (low, high) or d for (-d, d); 0 is the identity.
        translate: (a, b) maximum shift as a fraction of the width and height, in [0, 1]; None for none.
            Shifts are drawn in (-a W, a W) and rounded to whole pixels, as torchvision does.
        scale: (low, high) zoom factor, 0 < low <= high; None keeps 1.
        shear: degrees: d for an x shear in (-d, d), (low, high) for x, or (xlo, xhi, ylo, yhi).
        interpolation: "nearest" (default) or "bilinear", for images.
        fill: value of image pixels from outside the image: a number or one per channel; None as in
            `RandomRotation`.
        center: (x, y) in pixels from the top-left corner; None for the image centre.
    Stage: batch (one batched ``grid_sample`` with per-sample matrices).
    """

    degrees: float | tuple[float, float] = 0.0
    translate: tuple[float, float] | None = None
    scale: tuple[float, float] | None = None
    shear: float | tuple[float, ...] | None = None
    interpolation: str = "nearest"
    fill: Fill | None = 0
    center: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "degrees", _degrees(self, self.degrees, "degrees"))
        if self.translate is not None:
            if not all(0.0 <= t <= 1.0 for t in self.translate):
                raise ValueError(f"RandomAffine(translate={self.translate!r}): expected (a, b) with 0 <= a, b <= 1")
        if self.scale is not None:
            check_range(self, "scale", self.scale, 0.0, strict_low=True)
        if self.shear is not None:
            shear = self.shear
            if isinstance(shear, (int, float)):
                shear = _degrees(self, shear, "shear")
            elif len(shear) == 4:
                shear = _degrees(self, shear[:2], "shear") + _degrees(self, shear[2:], "shear")
            elif len(shear) == 2:
                shear = _degrees(self, shear, "shear")
            else:
                raise ValueError(f"RandomAffine(shear={self.shear!r}): expected a number, 2 or 4 values in degrees")
            object.__setattr__(self, "shear", tuple(shear))
        self._check_warp_args()

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        height, width = meta["size"]
        angle = rng.uniform(*self.degrees)
        tx = ty = 0
        if self.translate is not None:
            max_dx, max_dy = self.translate[0] * width, self.translate[1] * height
            tx, ty = int(round(rng.uniform(-max_dx, max_dx))), int(round(rng.uniform(-max_dy, max_dy)))
        scale = rng.uniform(*self.scale) if self.scale is not None else 1.0
        shear_x = shear_y = 0.0
        if self.shear is not None:
            shear_x = rng.uniform(*self.shear[:2])
            if len(self.shear) == 4:
                shear_y = rng.uniform(*self.shear[2:])
        return {"angle": angle, "translate_x": tx, "translate_y": ty, "scale": scale,
                "shear_x": shear_x, "shear_y": shear_y}

    def inverse_matrices(self, params: Params, canvas_size: tuple[int, int]) -> torch.Tensor:
        angle = params["angle"].reshape(-1)
        b = angle.shape[0]
        center = torch.tensor(self.center_offset(canvas_size), dtype=torch.float64, device=angle.device)
        return F.affine_matrix(
            angle, torch.stack((params["translate_x"].reshape(-1), params["translate_y"].reshape(-1)), -1),
            params["scale"].reshape(-1), torch.stack((params["shear_x"].reshape(-1), params["shear_y"].reshape(-1)), -1),
            center.expand(b, 2),
        )
