"""Counter-based random draws keyed by (seed, epoch, sample index, op index).

Every random parameter in a pipeline comes from a key, never from a global
generator, so a sample gets the same numbers whatever worker draws them, whatever
the resume point, and whether its op runs in a worker or on the device.

The generator is SplitMix64 over a counter: cheap enough to create per sample and
op in pure Python (a few microseconds), and the same in every process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_TWO_53 = float(1 << 53)

T = TypeVar("T")

# The key's fourth part says whose draw it is: an op's (its index in the pipeline), a
# decoder's, a replacement's or a template's; draws made once per batch (MixUp's lambda) take
# their own index range. `op_rng` and its siblings below are the only places that build keys.
_BATCH_INDEX_BASE = 1 << 48
_REPLACEMENT = -2
_TEMPLATE = -3  # on_error="replace": the sample whose shapes a batch of failures takes
_DECODER_BASE = 1 << 20


def _mix64(z: int) -> int:
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK
    return z ^ (z >> 31)


def derive_key(*parts: int) -> int:
    """Hash integers (negative ones too) into one 64-bit key; order matters."""
    key = 0x6A09E667F3BCC908
    for part in parts:
        key = _mix64((key + _GOLDEN + (int(part) & _MASK)) & _MASK)
    return key


class SampleRNG:
    """Random draws for one (sample, op). Equal keys give equal draws in any process."""

    __slots__ = ("key", "_counter")

    def __init__(self, seed: int, epoch: int, index: int, op_index: int) -> None:
        self.key = derive_key(seed, epoch, index, op_index)
        self._counter = 0

    def bits(self) -> int:
        """The next 64 random bits."""
        self._counter += 1
        return _mix64((self.key + self._counter * _GOLDEN) & _MASK)

    def random(self) -> float:
        """A float in [0, 1)."""
        return (self.bits() >> 11) / _TWO_53

    def uniform(self, low: float, high: float) -> float:
        return low + (high - low) * self.random()

    def log_uniform(self, low: float, high: float) -> float:
        """exp(uniform(log low, log high)): aspect ratios, scale factors."""
        return math.exp(self.uniform(math.log(low), math.log(high)))

    def integers(self, low: int, high: int) -> int:
        """An integer in [low, high); ``high > low``."""
        span = high - low
        if span <= 0:
            raise ValueError(f"integers({low}, {high}): empty range")
        return low + self.bits() % span

    def bernoulli(self, p: float) -> bool:
        return self.random() < p

    def normal(self, mean: float = 0.0, std: float = 1.0) -> float:
        u1 = max(self.random(), 1e-300)
        u2 = self.random()
        return mean + std * math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

    def beta(self, a: float, b: float) -> float:
        """A Beta(a, b) draw (MixUp's lambda), through this key's numpy generator."""
        return float(self.numpy().beta(a, b))

    def choice(self, options: Sequence[T]) -> T:
        return options[self.integers(0, len(options))]

    def numpy(self) -> np.random.Generator:
        """A numpy generator for array draws (noise), seeded by this key and counter."""
        return np.random.Generator(np.random.Philox(key=self.bits()))


def op_rng(seed: int, epoch: int, index: int, op_index: int) -> SampleRNG:
    """The draws of op ``op_index`` (its place in the pipeline's list) for sample ``index``."""
    return SampleRNG(seed, epoch, index, op_index)


def decoder_rng(seed: int, epoch: int, index: int, field_index: int) -> SampleRNG:
    """The draws of the decoder of field ``field_index`` (its place in ``decode``), e.g. a clip's start."""
    return SampleRNG(seed, epoch, index, _DECODER_BASE + field_index)


def batch_rng(seed: int, epoch: int, draw_number: int, op_index: int) -> SampleRNG:
    """The draw of a per-batch op (MixUp's lambda) for batch ``draw_number`` of every rank's step."""
    return SampleRNG(seed, epoch, _BATCH_INDEX_BASE + draw_number, op_index)


def replacement_rng(seed: int, epoch: int, index: int) -> SampleRNG:
    """Which samples stand in, in turn, for failed sample ``index`` (``on_error="skip"``)."""
    return SampleRNG(seed, epoch, index, _REPLACEMENT)


def template_rng(seed: int, epoch: int, index: int) -> SampleRNG:
    """Which sample gives the shapes of a batch, led by ``index``, in which every sample failed."""
    return SampleRNG(seed, epoch, index, _TEMPLATE)
