"""The recipes' photometric ops with torchvision v2's names and semantics: the SSD recipe's
``RandomPhotometricDistort``, ``RandomChannelPermutation``, ``GaussianNoise`` (batch stage) and
``JPEG`` compression as an augmentation (sample stage). Images and videos; masks, boxes and the
rest pass unchanged."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mediapipe.augment.base import Canvas, Op, Params, Stage, check_probability, check_range
from mediapipe.augment.functional import noise as N
from mediapipe.augment.functional import photometric as F
from mediapipe.augment.recipe_geometry import per_pixel_placement
from mediapipe.fields import FieldType
from mediapipe.rng import SampleRNG
from mediapipe.sample import SampleMeta


def _channels(meta: SampleMeta) -> int:
    """The channel count of the images a draw is for (3 where the shape is not known)."""
    shape = meta.get("shape")
    return int(shape[-3]) if shape is not None and len(shape) >= 3 else 3


def random_permutation(rng: SampleRNG, n: int) -> tuple[int, ...]:
    """A uniform permutation of range(n) from the keyed generator (Fisher-Yates), as ``torch.randperm``."""
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.integers(0, i + 1)
        order[i], order[j] = order[j], order[i]
    return tuple(order)


@dataclass(frozen=True)
class RandomPhotometricDistort(Op):
    """The SSD recipe's colour distortion (torchvision's ``RandomPhotometricDistort``): each of
    brightness, contrast, saturation and hue is applied with probability ``p`` with a factor drawn
    in its range, contrast before or after saturation and hue (even odds), and then, with
    probability ``p``, the channels permuted; every switch and factor drawn per sample.

    Input: images (B, C, H, W) and clips (B, T, C, H, W, one draw per clip), uint8 or float in
    [0, 1]. Output: same shape and dtype; uint8 truncates after each step, as torchvision does.
    Args:
        brightness, contrast, saturation: (low, high) factor ranges, 0 <= low <= high (1 is the identity).
        hue: (low, high) shift in turns of the hue circle, -0.5 <= low <= high <= 0.5.
        p: probability of each of the five steps; 0 is the identity.
    Stage: batch (six masked steps over the batch, none per sample).
    """

    brightness: tuple[float, float] = (0.875, 1.125)
    contrast: tuple[float, float] = (0.5, 1.5)
    saturation: tuple[float, float] = (0.5, 1.5)
    hue: tuple[float, float] = (-0.05, 0.05)
    p: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("brightness", "contrast", "saturation"):
            check_range(self, name, getattr(self, name), 0.0)
        check_range(self, "hue", self.hue, -0.5, 0.5)
        check_probability(self, self.p)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        params: Params = {}
        for name, neutral in (("brightness", 1.0), ("contrast", 1.0), ("saturation", 1.0), ("hue", 0.0)):
            on = rng.random() < self.p  # torchvision's order: the switch, then the factor when on
            params[f"{name}_on"], params[name] = on, rng.uniform(*getattr(self, name)) if on else neutral
        params["contrast_before"] = rng.random() < 0.5
        permute = rng.random() < self.p
        channels = _channels(meta)
        params["permute"] = permute
        params["permutation"] = random_permutation(rng, channels) if permute else tuple(range(channels))
        return params

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return F.photometric_distort(x, **params)


@dataclass(frozen=True)
class RandomChannelPermutation(Op):
    """Permute each sample's channels by its own uniform random permutation (torchvision's
    ``RandomChannelPermutation``).

    Input: images (B, C, H, W) and clips (B, T, C, H, W, one permutation per clip), any dtype.
    Output: same shape and dtype. Stage: batch (one gather for the batch).
    """

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        return {"permutation": random_permutation(rng, _channels(meta))}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return F.permute_channels(x, params["permutation"])


@dataclass(frozen=True)
class GaussianNoise(Op):
    """Add Gaussian noise, its own draw per pixel of each sample (torchvision's ``GaussianNoise``):
    ``x + mean + sigma * n`` with n standard normal, in [0, 1] units whatever the dtype.

    Input: images (B, C, H, W) and clips (B, T, C, H, W, noise per frame), float in [0, 1] or
    uint8 (noise of ``mean * 255 + sigma * 255 * n`` truncated to an integer, as torchvision).
    Output: same shape and dtype.
    Args:
        mean: the noise's mean, in [0, 1] units; sigma: its std, >= 0 (0 adds ``mean`` only).
        clip: clamp the result to [0, 1] (uint8: [0, 255]); uint8 images need it (without, the
            values would wrap around, as torchvision's do).
    Stage: batch. The noise (float32, the sample's shape) is drawn on the host from the keyed
    generator, so a sample gets the same noise on every device and with any number of workers.
    Images batched as a list (of several sizes) get their noise per sample in the workers instead.
    """

    mean: float = 0.0
    sigma: float = 0.1
    clip: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.sigma >= 0:
            raise ValueError(f"GaussianNoise(sigma={self.sigma}): expected sigma >= 0")

    def placement(self) -> Stage:
        return per_pixel_placement(self)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        shape = meta.get("shape") or (3, *meta["size"])
        return {"noise": rng.numpy().standard_normal(tuple(shape), dtype=np.float32)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return N.gaussian_noise(x, params["noise"], self.mean, self.sigma, self.clip)


@dataclass(frozen=True)
class JPEG(Op):
    """Compress and decompress each sample as JPEG at a random quality (torchvision's ``JPEG``):
    the blocking and chroma loss of a real encoder, as an augmentation.

    Input: uint8 images (C, H, W) and clips (T, C, H, W), C 1 or 3, one quality per sample.
    Output: same shape and dtype: libjpeg's encode (4:2:0) and decode through Pillow, bit for bit
    torchvision's ``jpeg``.
    Args:
        quality: 1 (smallest) to 100, or (low, high) drawn uniformly, both ends included. The
            default, 50, is DALI's (torchvision has none).
    Stage: sample (one encode and decode per image, in the workers).
    """

    quality: int | tuple[int, int] = 50
    batched = False

    def __post_init__(self) -> None:
        super().__post_init__()
        quality = (self.quality, self.quality) if isinstance(self.quality, int) else tuple(self.quality)
        if len(quality) != 2 or not 1 <= quality[0] <= quality[1] <= 100:
            raise ValueError(f"JPEG(quality={self.quality!r}): expected an int in 1..100 or (low, high) with "
                             "1 <= low <= high <= 100")
        object.__setattr__(self, "quality", quality)

    def sample_params(self, rng: SampleRNG, meta: SampleMeta) -> Params:
        low, high = self.quality
        return {"quality": rng.integers(low, high + 1)}

    def transform(self, x: torch.Tensor, params: Params, field: FieldType, canvas_size: Canvas) -> torch.Tensor:
        return F.jpeg(x, int(params["quality"]))
