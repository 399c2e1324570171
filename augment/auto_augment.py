"""The automatic augmentation policies, with torchvision v2's names, arguments, op spaces,
magnitudes, signs, interpolation and fill: AutoAugment, RandAugment, TrivialAugmentWide, AugMix.

Each sample draws its own op(s), magnitude bin and sign from the keyed RNG (`sample_params`), so a
sample gets the same augmentation whatever the workers, the device or the resume point; the batch
kernel (`mediapipe.augment.functional.auto_augment`) runs each drawn op once on the samples that
drew it. Unlike torchvision's, the geometric ops of the spaces move masks, boxes and keypoints with
the image (as RandomAffine does); AugMix, which blends several differently warped copies, refuses
them as torchvision does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mediapipe.augment.base import Op, Params, check_choice
from mediapipe.augment.functional import auto_augment as F
from mediapipe.augment.geometry import Fill, _check_fill
from mediapipe.fields import GEOMETRIC, IMAGE, VIDEO, FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta

Canvas = tuple[int, int] | None
INTERPOLATIONS = ("nearest", "bilinear")

# AutoAugment's sub-policies, torchvision's: ((op, probability, magnitude bin or None), twice).
SubPolicy = tuple[tuple[str, float, int | None], tuple[str, float, int | None]]
POLICIES: dict[str, tuple[SubPolicy, ...]] = {
    "imagenet": (
        (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)), (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, None)), (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
        (("Equalize", 0.0, None), ("Equalize", 0.8, None)), (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, None)), (("Color", 0.4, 0), ("Equalize", 0.6, None)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    ),
    "cifar10": (
        (("Invert", 0.1, None), ("Contrast", 0.2, 6)), (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
        (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)), (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)), (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
        (("Color", 0.4, 3), ("Brightness", 0.6, 7)), (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
        (("Equalize", 0.6, None), ("Equalize", 0.5, None)), (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
        (("Color", 0.7, 7), ("TranslateX", 0.5, 8)), (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
        (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)), (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
        (("Solarize", 0.5, 2), ("Invert", 0.0, None)), (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.2, None), ("Equalize", 0.6, None)), (("Color", 0.9, 9), ("Equalize", 0.6, None)),
        (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)), (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
        (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)), (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)), (("Equalize", 0.8, None), ("Invert", 0.1, None)),
        (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
    ),
    "svhn": (
        (("ShearX", 0.9, 4), ("Invert", 0.2, None)), (("ShearY", 0.9, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.6, None), ("Solarize", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)), (("ShearX", 0.9, 4), ("AutoContrast", 0.8, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.4, None)), (("ShearY", 0.9, 5), ("Solarize", 0.2, 6)),
        (("Invert", 0.9, None), ("AutoContrast", 0.8, None)), (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("Solarize", 0.3, 3)), (("ShearY", 0.8, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.9, None), ("TranslateY", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Contrast", 0.3, 3), ("Rotate", 0.8, 4)), (("Invert", 0.8, None), ("TranslateY", 0.0, 2)),
        (("ShearY", 0.7, 6), ("Solarize", 0.4, 8)), (("Invert", 0.6, None), ("Rotate", 0.8, 4)),
        (("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)), (("ShearX", 0.1, 6), ("Invert", 0.6, None)),
        (("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)), (("ShearY", 0.8, 4), ("Invert", 0.8, None)),
        (("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)), (("ShearY", 0.8, 5), ("AutoContrast", 0.7, None)),
        (("ShearX", 0.7, 2), ("Invert", 0.1, None)),
    ),
}


def draw_op(rng: SampleRNG, space: tuple[F.SpaceOp, ...], bins: int) -> tuple[int, int, int]:
    """(op position, bin, sign) uniform over the space and ``range(bins)``; the sign is -1 with
    probability one half for a signed op (torchvision's ``rand <= 0.5``), else +1."""
    op = rng.integers(0, len(space))
    return op, rng.integers(0, bins), _sign(rng, space[op])


def _sign(rng: SampleRNG, op: F.SpaceOp) -> int:
    return -1 if op.signed and op.magnitudes is not None and rng.random() <= 0.5 else 1


@dataclass(frozen=True)
class _Policy(Op):
    """Shared by the policies: images and clips get every drawn op, masks (nearest, fill 0), boxes
    and keypoints the geometric ones; ``interpolation`` and ``fill`` are the images' (a mask is
    always nearest with fill 0). Subclasses name their space and draw their slots."""

    accepts = GEOMETRIC
    space_name = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self, "interpolation", self.interpolation, INTERPOLATIONS)
        _check_fill(self, self.fill)

    @property
    def space(self) -> tuple[F.SpaceOp, ...]:
        return F.SPACES[self.space_name]

    def num_bins(self) -> int:
        """The bins of the magnitude tables the draws index."""
        return self.num_magnitude_bins

    def settings(self, x: torch.Tensor, field: FieldType, canvas_size: Canvas) -> F.WarpSettings:
        canvas = tuple(canvas_size) if canvas_size is not None else tuple(x.shape[-2:])
        return F.WarpSettings(field.kind, canvas, self.interpolation, self.fill, field.format)

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return F.apply_slots(x, params["ops"], params["bins"], params["signs"], self.space, self.num_bins(),
                             self.settings(x, field, canvas_size))


def _check_bins(op: Op, num_magnitude_bins: int) -> None:
    if num_magnitude_bins < 2:
        raise ValueError(f"{type(op).__name__}(num_magnitude_bins={num_magnitude_bins}): expected at least 2 "
                         "(torchvision's Posterize table divides by num_magnitude_bins - 1)")


@dataclass(frozen=True)
class AutoAugment(_Policy):
    """AutoAugment's learned policy (torchvision's ``AutoAugment``): each sample draws one of 25
    sub-policies, and each of its two ops applies with the op's probability, at its magnitude bin
    of 10, with a random sign where the op has one.

    Input: images (B, C, H, W) and clips (B, T, C, H, W, one draw per clip), uint8 or float; masks,
    boxes and keypoints move with the shears, translations and rotations. Output: same shape, dtype.
    Args:
        policy: "imagenet", "cifar10" or "svhn".
        interpolation: "nearest" (default) or "bilinear", for the images' warps.
        fill: value of image pixels from outside the image: a number, one per channel, or None (0).
    Stage: batch (each drawn op once on the samples that drew it).
    """

    policy: str = "imagenet"
    interpolation: str = "nearest"
    fill: Fill | None = None
    space_name = "AutoAugment"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self, "policy", self.policy, tuple(POLICIES))

    def num_bins(self) -> int:
        return 10

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        names = [op.name for op in self.space]
        policy = rng.integers(0, len(POLICIES[self.policy]))
        ops, bins, signs = [], [], []
        for name, probability, magnitude_bin in POLICIES[self.policy][policy]:
            op = names.index(name)
            applied = rng.random() <= probability
            ops.append(op if applied else -1)
            bins.append(magnitude_bin or 0)
            signs.append(_sign(rng, self.space[op]) if applied else 1)
        return {"policy": policy, "ops": tuple(ops), "bins": tuple(bins), "signs": tuple(signs)}


@dataclass(frozen=True)
class RandAugment(_Policy):
    """RandAugment (torchvision's ``RandAugment``): ``num_ops`` ops in a row, each drawn uniformly
    from 14 (Identity, shears, translations, rotation, brightness, colour, contrast, sharpness,
    posterize, solarize, autocontrast, equalize) at bin ``magnitude`` of ``num_magnitude_bins``,
    with a random sign where the op has one.

    Input: images (B, C, H, W) and clips (B, T, C, H, W, one draw per clip), uint8 or float; masks,
    boxes and keypoints move with the geometric ops. Output: same shape and dtype.
    Args:
        num_ops: ops per sample, >= 0.
        magnitude: the bin, 0 <= magnitude < num_magnitude_bins.
        num_magnitude_bins: >= 2.
        interpolation, fill: as in `AutoAugment`.
    Stage: batch.
    """

    num_ops: int = 2
    magnitude: int = 9
    num_magnitude_bins: int = 31
    interpolation: str = "nearest"
    fill: Fill | None = None
    space_name = "RandAugment"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_ops < 0:
            raise ValueError(f"RandAugment(num_ops={self.num_ops}): expected a number of ops >= 0")
        _check_bins(self, self.num_magnitude_bins)
        if not 0 <= self.magnitude < self.num_magnitude_bins:
            raise ValueError(f"RandAugment(magnitude={self.magnitude}): expected a bin in 0 .. "
                             f"num_magnitude_bins - 1 = {self.num_magnitude_bins - 1}")

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        ops, signs = [], []
        for _ in range(self.num_ops):
            op = rng.integers(0, len(self.space))
            ops.append(op)
            signs.append(_sign(rng, self.space[op]))
        return {"ops": tuple(ops), "bins": (self.magnitude,) * self.num_ops, "signs": tuple(signs)}


@dataclass(frozen=True)
class TrivialAugmentWide(_Policy):
    """TrivialAugment Wide (torchvision's ``TrivialAugmentWide``): one op per sample, drawn uniformly
    from 14 with its wide ranges, at a bin drawn uniformly from ``num_magnitude_bins``, with a
    random sign where the op has one.

    Input: images (B, C, H, W) and clips (B, T, C, H, W, one draw per clip), uint8 or float; masks,
    boxes and keypoints move with the geometric ops. Output: same shape and dtype.
    Args:
        num_magnitude_bins: >= 2.
        interpolation, fill: as in `AutoAugment`.
    Stage: batch.
    """

    num_magnitude_bins: int = 31
    interpolation: str = "nearest"
    fill: Fill | None = None
    space_name = "TrivialAugmentWide"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_bins(self, self.num_magnitude_bins)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        op, magnitude_bin, sign = draw_op(rng, self.space, self.num_magnitude_bins)
        return {"ops": (op,), "bins": (magnitude_bin,), "signs": (sign,)}


@dataclass(frozen=True)
class AugMix(_Policy):
    """AugMix (torchvision's ``AugMix``): ``mixture_width`` chains of 1 to 3 ops (or ``chain_depth``)
    drawn from the space at a bin below ``severity`` (of 10), blended with the image by Dirichlet
    weights: ``m0 * x + m1 * sum_i w_i * chain_i(x)``, (m0, m1) ~ Dirichlet(alpha, alpha) and
    w ~ Dirichlet(alpha, ..., alpha), all drawn per sample.

    Input: images (B, C, H, W) and clips (B, T, C, H, W, one draw per clip), uint8 or float; masks,
    boxes and keypoints are refused (a blend of warped copies has no single place for them; write
    the mix to a new field with ``out=`` to keep them with the original). Output: same shape, dtype.
    Args:
        severity: 1 to 10, the bins a chain's ops draw from.
        mixture_width: chains, >= 1.
        chain_depth: ops per chain; 0 or less for a depth drawn in 1 to 3 per chain (torchvision's -1).
        alpha: > 0, the Dirichlet concentration.
        all_ops: also brightness, colour, contrast and sharpness (else the 9 other ops only).
        interpolation: "bilinear" (default) or "nearest"; fill: as in `AutoAugment`.
    Stage: batch.
    """

    severity: int = 3
    mixture_width: int = 3
    chain_depth: int = -1
    alpha: float = 1.0
    all_ops: bool = True
    interpolation: str = "bilinear"
    fill: Fill | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.severity <= F.AUGMIX_BINS:
            raise ValueError(f"AugMix(severity={self.severity}): expected 1 <= severity <= {F.AUGMIX_BINS}")
        if self.mixture_width < 1:
            raise ValueError(f"AugMix(mixture_width={self.mixture_width}): expected at least one chain")
        if not self.alpha > 0:
            raise ValueError(f"AugMix(alpha={self.alpha}): expected a Dirichlet concentration > 0")

    @property
    def space_name(self) -> str:  # type: ignore[override]
        return "AugMix" if self.all_ops else "AugMix-partial"

    def num_bins(self) -> int:
        return F.AUGMIX_BINS

    @property
    def depth(self) -> int:
        """Slots per chain: ``chain_depth``, or 3 for a drawn depth (the slots past it are empty)."""
        return self.chain_depth if self.chain_depth > 0 else 3

    def refuses(self, field_type: FieldType) -> str | None:
        if field_type.kind in GEOMETRIC and field_type.kind not in (IMAGE, VIDEO):
            return ("AugMix blends several differently warped copies of the image: masks, boxes and keypoints "
                    "have no single place in the blend (torchvision refuses them too); write the mix to a new "
                    "field with out= to keep them with the original image")
        return super().refuses(field_type)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        ops, bins, signs = [], [], []
        for _ in range(self.mixture_width):
            depth = self.chain_depth if self.chain_depth > 0 else rng.integers(1, 4)
            for slot in range(self.depth):
                op, magnitude_bin, sign = draw_op(rng, self.space, self.severity) if slot < depth else (-1, 0, 1)
                ops.append(op)
                bins.append(magnitude_bin)
                signs.append(sign)
        dirichlet = rng.numpy()
        mix = dirichlet.dirichlet([self.alpha, self.alpha])
        weights = dirichlet.dirichlet([self.alpha] * self.mixture_width)
        return {"ops": tuple(ops), "bins": tuple(bins), "signs": tuple(signs),
                "mix": tuple(float(v) for v in mix), "weights": tuple(float(v) for v in weights)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return F.augmix(x, params["ops"], params["bins"], params["signs"], params["mix"], params["weights"],
                        self.space, self.depth, self.settings(x, field, canvas_size))
