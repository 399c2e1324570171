"""The auto-augment policies' op spaces and their batched kernels (torchvision v2's
``_auto_augment.py``): each sample has drawn, per slot, an op of the space (its position, or -1 for
none), a magnitude bin and a sign; `apply_slots` runs slot after slot, and within a slot each drawn
op once on the samples that drew it (``index_select`` / ``index_copy_`` with indices known on the
host), so a batch is a few batched kernels whatever its size. On a CUDA device the draws arrive
with the batch: reading which samples drew which op is one copy of them to the host per policy
and batch (`host_draws`), not one per sample.

A magnitude is torchvision's: ``float(magnitudes[bin])`` of its float32 ``linspace`` table (which for
AutoAugment and RandAugment's translations depends on the image's size), negated when the sample
drew the sign; each op then turns it into its argument as torchvision's
``_apply_image_or_video_transform`` does (shears: ``degrees(atan(m))`` about the top-left corner;
translations: ``int(m)`` pixels; enhancements: factor ``1 + m``; Posterize: ``int(m)`` bits;
Solarize: threshold ``m`` of the range). The geometric ops (shears, translations, rotations) warp
through `mediapipe.augment.functional.spatial.affine`, so masks (nearest, fill 0), boxes and
keypoints move with the image; the others change images and clips only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from mediapipe.augment.functional import auto_color as AC
from mediapipe.augment.functional import color as C
from mediapipe.augment.functional import geometry as G
from mediapipe.augment.functional import spatial as S
from mediapipe.fields import IMAGE, MASK, RASTER, VIDEO
from mediapipe.stages import memory, scratch

Magnitudes = Callable[[int, int, int], torch.Tensor]  # (num_bins, height, width) -> torchvision's table


@dataclass(frozen=True)
class SpaceOp:
    """One op of a policy's space: its torchvision name, its magnitude table (None: it takes none)
    and whether a sample draws the magnitude's sign."""

    name: str
    magnitudes: Magnitudes | None = None
    signed: bool = False

    @property
    def geometric(self) -> bool:
        """Whether it moves pixels (and so masks, boxes and keypoints), rather than changing their values."""
        return self.name in GEOMETRIC_OPS


GEOMETRIC_OPS = frozenset({"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"})


def _linear(high: float) -> Magnitudes:
    return lambda num_bins, height, width: torch.linspace(0.0, high, num_bins)


def _posterize(top: int, span: int) -> Magnitudes:
    return lambda num_bins, height, width: (top - (torch.arange(num_bins) / ((num_bins - 1) / span))).round().int()


def _solarize(num_bins: int, height: int, width: int) -> torch.Tensor:
    return torch.linspace(1.0, 0.0, num_bins)


def _unsigned_ops(posterize: Magnitudes) -> tuple[SpaceOp, ...]:
    return (SpaceOp("Posterize", posterize), SpaceOp("Solarize", _solarize), SpaceOp("AutoContrast"),
            SpaceOp("Equalize"))


def _enhance(high: float) -> tuple[SpaceOp, ...]:
    return tuple(SpaceOp(name, _linear(high), True) for name in ("Brightness", "Color", "Contrast", "Sharpness"))


def _geometry(shear: float, translate_x: Magnitudes, translate_y: Magnitudes, rotate: float) -> tuple[SpaceOp, ...]:
    return (SpaceOp("ShearX", _linear(shear), True), SpaceOp("ShearY", _linear(shear), True),
            SpaceOp("TranslateX", translate_x, True), SpaceOp("TranslateY", translate_y, True),
            SpaceOp("Rotate", _linear(rotate), True))


def _translate_x(num_bins: int, height: int, width: int) -> torch.Tensor:
    return torch.linspace(0.0, 150.0 / 331.0 * width, num_bins)


def _translate_y(num_bins: int, height: int, width: int) -> torch.Tensor:
    return torch.linspace(0.0, 150.0 / 331.0 * height, num_bins)


_AUTO = (*_geometry(0.3, _translate_x, _translate_y, 30.0), *_enhance(0.9), *_unsigned_ops(_posterize(8, 4)))

# The spaces in torchvision's order (an op's position is what a sample draws).
SPACES: dict[str, tuple[SpaceOp, ...]] = {
    "AutoAugment": (*_AUTO, SpaceOp("Invert")),
    "RandAugment": (SpaceOp("Identity"), *_AUTO),
    "TrivialAugmentWide": (SpaceOp("Identity"),
                           *_geometry(0.99, _linear(32.0), _linear(32.0), 135.0), *_enhance(0.99),
                           *_unsigned_ops(_posterize(8, 6))),
    "AugMix-partial": (*_geometry(0.3, lambda n, h, w: torch.linspace(0.0, w / 3.0, n),
                                  lambda n, h, w: torch.linspace(0.0, h / 3.0, n), 30.0),
                       *_unsigned_ops(_posterize(4, 4))),
}
SPACES["AugMix"] = (*SPACES["AugMix-partial"], *_enhance(0.9))


@functools.lru_cache(maxsize=256)
def magnitude_table(op: SpaceOp, num_bins: int, height: int, width: int) -> torch.Tensor | None:
    """torchvision's magnitudes of ``op`` for ``num_bins`` bins on an image of (height, width), as
    float64 (the float32 values exactly), or None for an op without one."""
    if op.magnitudes is None:
        return None
    return op.magnitudes(num_bins, height, width).to(torch.float64)


def signed_magnitudes(op: SpaceOp, bins: torch.Tensor, signs: torch.Tensor, num_bins: int,
                      canvas: tuple[int, int]) -> torch.Tensor:
    """(G,) float64: each sample's magnitude, ``magnitudes[bin]`` times its sign (+1 or -1)."""
    table = magnitude_table(op, num_bins, *canvas)
    if table is None:
        return torch.zeros(bins.shape[0], dtype=torch.float64)
    return table.index_select(0, bins) * signs.to(torch.float64)


@dataclass(frozen=True)
class WarpSettings:
    """What the geometric ops of a policy need besides the magnitudes: the field's kind and its
    kernel's arguments, the canvas the draw was made on, the images' interpolation and fill."""

    kind: str
    canvas_size: tuple[int, int]
    interpolation: str = "nearest"
    fill: Any = None
    format: str | None = None


def _warp(x: torch.Tensor, settings: WarpSettings, angle: torch.Tensor | None = None,
          translate: torch.Tensor | None = None, shear: torch.Tensor | None = None, corner: bool = False
          ) -> torch.Tensor:
    """x (G, ...) through one affine matrix per sample (torchvision's ``affine``: angle in degrees,
    clockwise, translate in pixels, shear in degrees; about the top-left corner with ``corner``)."""
    g = x.shape[0]
    if settings.kind not in (IMAGE, VIDEO) and x.numel() == 0:
        return x
    f64 = dict(dtype=torch.float64)
    zeros2 = torch.zeros(g, 2, **f64)
    height, width = settings.canvas_size
    center = torch.tensor([-width * 0.5, -height * 0.5], **f64).expand(g, 2) if corner else zeros2
    matrix = G.affine_matrix(angle if angle is not None else torch.zeros(g, **f64),
                             translate if translate is not None else zeros2, torch.ones(g, **f64),
                             shear if shear is not None else zeros2, center)
    return S.affine(x, matrix, interpolation=settings.interpolation, fill=settings.fill, kind=settings.kind,
                    canvas_size=settings.canvas_size, format=settings.format)


def _translate(x: torch.Tensor, shift: torch.Tensor, settings: WarpSettings) -> torch.Tensor:
    """A translation by whole pixels, ``shift`` (G, 2) as (x, y). On the CPU a uint8 image or clip, or a
    mask, is shifted by slicing, into its fill (0 for a mask, and for images with ``fill=None``): the
    warp samples every pixel at an input pixel's centre there, so it picks the same pixels, and the
    nearest or bilinear value of uint8 rounds to that pixel's. Elsewhere (a device, float images,
    boxes and keypoints) the warp itself."""
    if x.device.type != "cpu" or x.dtype != torch.uint8 and settings.kind != MASK or settings.kind not in RASTER:
        return _warp(x, settings, translate=shift)
    fill = 0 if settings.kind == MASK or settings.fill is None else settings.fill
    if settings.kind != MASK:
        S.check_fill(fill, x)
    values = torch.as_tensor(fill, dtype=torch.float32).round().to(x.dtype).reshape(-1, 1, 1)
    out = torch.empty_like(x)
    out.copy_(values.expand_as(out) if values.numel() > 1 else values.reshape(()).expand_as(out))
    height, width = x.shape[-2:]
    for i, (dx, dy) in enumerate(shift.to(torch.int64).tolist()):  # a piece of a few samples on the CPU
        if abs(dx) < width and abs(dy) < height:
            out[i, ..., max(dy, 0): height + min(dy, 0), max(dx, 0): width + min(dx, 0)] = \
                x[i, ..., max(-dy, 0): height + min(-dy, 0), max(-dx, 0): width + min(-dx, 0)]
    return out


def _axis(values: torch.Tensor, axis: int) -> torch.Tensor:
    """(G,) values as (G, 2) with the other axis 0: (x, y) pairs of a shear or a translation."""
    out = torch.zeros(values.shape[0], 2, dtype=torch.float64)
    out[:, axis] = values
    return out


def _shear_degrees(m: torch.Tensor) -> torch.Tensor:
    """torchvision's ``math.degrees(math.atan(m))``, in Python's math for the same last bit: once per
    distinct magnitude (a few bins), not per sample."""
    values, which = m.unique(return_inverse=True)
    degrees = torch.tensor([math.degrees(math.atan(v)) for v in values.tolist()], dtype=torch.float64)
    return degrees.index_select(0, which.reshape(-1))


def _blend(x: torch.Tensor, other: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """torchvision's ``_blend``: ``x * f + other * (1 - f)`` with f and 1 - f computed in float64
    and each cast to float32 (torch casts a Python number to the tensor's dtype)."""
    ratio = AC.per_sample(factor.to(torch.float32), x)
    alpha = AC.per_sample((1.0 - factor).to(torch.float32), x)
    out = torch.addcmul(C._float(x) * ratio, other, alpha)
    return C._back(out.clamp_(0, AC.max_value(x)), x)


def _brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    out = C._float(x) * AC.per_sample(factor.to(torch.float32), x)
    return C._back(out.clamp_(0, AC.max_value(x)), x)


def _saturation(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    if x.shape[-3] == 1:
        return x
    return _blend(x, C.grayscale(x, floor=True), factor)


def _contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    gray = C.grayscale(x, floor=True) if x.shape[-3] == 3 else C._float(x)
    return _blend(x, gray.mean(dim=(-3, -2, -1), keepdim=True), factor)


def _solarize_threshold(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return AC.solarize(x, AC.max_value(x) * m)


Kernel = Callable[[torch.Tensor, torch.Tensor, WarpSettings], torch.Tensor]

# name -> kernel(group, signed magnitudes (G,) float64 on the host, settings)
KERNELS: dict[str, Kernel] = {
    "Identity": lambda x, m, s: x,
    "ShearX": lambda x, m, s: _warp(x, s, shear=_axis(_shear_degrees(m), 0), corner=True),
    "ShearY": lambda x, m, s: _warp(x, s, shear=_axis(_shear_degrees(m), 1), corner=True),
    "TranslateX": lambda x, m, s: _translate(x, _axis(m.trunc(), 0), s),
    "TranslateY": lambda x, m, s: _translate(x, _axis(m.trunc(), 1), s),
    "Rotate": lambda x, m, s: _warp(x, s, angle=-m),  # torchvision's rotate turns counter-clockwise
    "Brightness": lambda x, m, s: _brightness(x, 1.0 + m),
    "Color": lambda x, m, s: _saturation(x, 1.0 + m),
    "Contrast": lambda x, m, s: _contrast(x, 1.0 + m),
    "Sharpness": lambda x, m, s: AC.adjust_sharpness(x, 1.0 + m),
    "Posterize": lambda x, m, s: AC.posterize(x, m.trunc().to(torch.int64)),
    "Solarize": lambda x, m, s: _solarize_threshold(x, m),
    "AutoContrast": lambda x, m, s: AC.autocontrast(x),
    "Equalize": lambda x, m, s: AC.equalize(x),
    "Invert": lambda x, m, s: AC.invert(x),
}


def acts_on(op: SpaceOp, kind: str) -> bool:
    """Whether ``op`` changes a field of ``kind``: every op changes images and clips, the geometric
    ones also move masks, boxes and keypoints; Identity changes nothing."""
    return op.name != "Identity" and (kind in (IMAGE, VIDEO) or op.geometric)


def host_draws(*params: torch.Tensor) -> list[torch.Tensor]:
    """The drawn op, bin and sign tensors on the host as int64 (B, S): one copy for all of them
    when they arrive on a device."""
    stacked = torch.stack([(p if p.ndim > 1 else p.reshape(-1, 1)).to(torch.int64) for p in params])
    return list(stacked.to("cpu").unbind(0))


def _run(kernel: Kernel, m: torch.Tensor, settings: WarpSettings, picks: torch.Tensor, group: torch.Tensor
         ) -> torch.Tensor:
    return kernel(group, m.index_select(0, picks), settings)


def apply_slot(x: torch.Tensor, ops: torch.Tensor, bins: torch.Tensor, signs: torch.Tensor,
               space: tuple[SpaceOp, ...], num_bins: int, settings: WarpSettings) -> torch.Tensor:
    """One slot: each op drawn there once, on the samples (rows) that drew it (`AC.apply_rows`: in
    cache-sized pieces on the CPU). ``ops``, ``bins``, ``signs``: (B,) int64 on the host; op -1 is none."""
    out, owned = x, False
    for op_id in ops.unique().tolist():
        if op_id < 0 or not acts_on(space[op_id], settings.kind):
            continue
        op = space[op_id]
        rows = (ops == op_id).nonzero().reshape(-1)
        m = signed_magnitudes(op, bins.index_select(0, rows), signs.index_select(0, rows), num_bins,
                              settings.canvas_size)
        out, owned = AC.apply_rows(out, rows, functools.partial(_run, KERNELS[op.name], m, settings), owned)
    return out


def apply_slots(x: torch.Tensor, ops: torch.Tensor, bins: torch.Tensor, signs: torch.Tensor,
                space: tuple[SpaceOp, ...], num_bins: int, settings: WarpSettings) -> torch.Tensor:
    """Each sample's drawn ops, slot after slot: ``ops``, ``bins``, ``signs`` (B, S), one row per
    sample (or per object row of boxes and keypoints)."""
    if x.device.type == "meta":  # shapes only: nothing to group on
        return torch.empty_like(x)
    ops, bins, signs = host_draws(ops, bins, signs)
    for slot in range(ops.shape[1]):
        x = apply_slot(x, ops[:, slot], bins[:, slot], signs[:, slot], space, num_bins, settings)
    return x


def augmix(x: torch.Tensor, ops: torch.Tensor, bins: torch.Tensor, signs: torch.Tensor, mix: torch.Tensor,
           weights: torch.Tensor, space: tuple[SpaceOp, ...], depth: int, settings: WarpSettings) -> torch.Tensor:
    """torchvision's AugMix on a batch: ``mix[:, 0] * x + sum_i mix[:, 1] * weights[:, i] * chain_i(x)``
    in float32, cast back to x's dtype (uint8 truncates). Chain i is slots ``i * depth`` to
    ``(i + 1) * depth`` of ``ops`` (-1 past a chain's own depth); each op runs on x's dtype, as
    torchvision's do. ``mix`` (B, 2), ``weights`` (B, width): the Dirichlet draws."""
    if x.device.type == "meta":
        return torch.empty_like(x)
    ops, bins, signs = host_draws(ops, bins, signs)
    shape = (-1, *(1,) * (x.ndim - 1))
    m = mix.to(x.device, torch.float32).reshape(x.shape[0], 2)
    combined = weights.to(x.device, torch.float32).reshape(x.shape[0], -1) * m[:, 1].reshape(x.shape[0], -1)
    out = m[:, 0].reshape(shape) * x
    for chain in range(combined.shape[1]):
        aug = x
        with scratch.read_only():  # every chain starts from x: none may write into it (`scratch`)
            for slot in range(chain * depth, (chain + 1) * depth):
                aug = apply_slot(aug, ops[:, slot], bins[:, slot], signs[:, slot], space, AUGMIX_BINS, settings)
        out.add_(combined[:, chain].reshape(shape) * aug)
    return memory.empty(x.shape, x.dtype, x.device).copy_(out)  # uint8 truncates, as .to(); shared in a worker


AUGMIX_BINS = 10  # torchvision's AugMix draws its magnitudes from 10 bins (its _PARAMETER_MAX)
