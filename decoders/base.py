"""The decoder interface: bytes in, a tensor out, steered by a `DecodeHint`.

A decoder spec (what the user writes: ``mp.decoders.image(...)``) is a small,
picklable description; each worker turns it into a live decoder through the
registry, so "auto" can pick a backend for the device that the worker sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from mediapipe.decoders.options import DecoderOptions
from mediapipe.options import Where
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta


@dataclass(frozen=True)
class TimeSpans:
    """Where in time another field of the same file lies: (start, end) seconds on the file's
    presentation timeline (timestamps x time base), one per clip, ``stacked`` when the clips
    are along a leading dim. A video decoder returns it (`Decoded.span`); the pipeline hands it
    to the decoder of a field that reads the same file ``from_field`` it (`DecodeHint.span`)."""

    spans: tuple[tuple[float, float], ...]
    stacked: bool = False


@dataclass(frozen=True)
class DecodeHint:
    """What the op after a decoder needs, so the decoder can skip work it would throw away.

    roi: (top, left, height, width) in the source's pixels: decode only this region.
    size: (height, width) the region will be resized to; a decoder may decode at a
        reduced scale (DCT scaling) as long as the region stays at least this large,
        or resize the region to exactly this size itself.
    frames: frame indices to decode (video).
    window: (start, duration) in seconds to decode (audio).
    interpolation: how a decoder that resizes to ``size`` itself must resample
        ("bilinear", "bicubic"); antialias: whether it low-pass filters when shrinking.
    span: the time spans of the field this one is decoded ``from_field`` (the clips of a
        video, for its audio track): decode what plays during them.
    """

    roi: tuple[int, int, int, int] | None = None
    size: tuple[int, int] | None = None
    frames: tuple[int, ...] | None = None
    window: tuple[float, float] | None = None
    interpolation: str = "bilinear"
    antialias: bool = True
    span: TimeSpans | None = None


NO_HINT = DecodeHint()


@dataclass(frozen=True)
class Decoded:
    """A decoder's output with per-sample side fields, e.g. a video stream's colour matrix:
    the batch gets ``<field>_<name>`` for each entry of ``fields`` (see `Decoder.side_fields`)."""

    value: Any
    fields: dict[str, Any]
    frames: int = 0  # video: frames the decoder produced for this sample (lead-in included), for StageStats
    span: TimeSpans | None = None  # video: when its clips play, for a field decoded from_field this one
    fallback: str | None = None  # why a backend meant for a GPU decoded this sample on the CPU (StageStats.fallbacks)
    stages: dict[str, float] | None = None  # seconds by part of the decode (video: open, index...), StageStats "decode_<part>"
_NO_RNG = SampleRNG(0, 0, 0, 0)  # device backends draw nothing: randomness is drawn in the workers


@dataclass(frozen=True)
class Limits:
    """Stops decompression bombs before memory is spent: checked against headers."""

    max_pixels: int | None = 178_956_970  # Pillow's own default warning threshold x2
    max_frames: int | None = 100_000
    max_duration: float | None = 4 * 3600.0


class Decoder:
    """A live decoder of one media kind. Subclasses register with `registry.register`; every
    capability a pipeline asks of a decoder is declared here with its default."""

    kind: ClassVar[str] = ""
    name: ClassVar[str] = ""
    priority: ClassVar[int] = 100  # lower wins "auto"
    collate: ClassVar[str] = "stack"  # "stack": equal shapes; "pad": pad the last dim, add <field>_lengths
    side_fields: ClassVar[tuple[str, ...]] = ()  # names a `Decoded` result adds, as <field>_<name>
    uses_cuda: ClassVar[bool] = False  # decodes with CUDA in the loader workers (see mediapipe.cuda_access)
    reads_whole: ClassVar[bool] = True  # wants the blob's bytes read for it; False: opens the file itself
    options_type: ClassVar[type[DecoderOptions]] = DecoderOptions  # the kind's options (none by default)
    auto_fallback: str | None = None  # set by `registry.create`: why "auto" passed over a faster backend

    @classmethod
    def side_fields_for(cls, options: DecoderOptions) -> tuple[str, ...]:
        """The side fields a decoder with ``options`` adds (`side_fields` unless options change them)."""
        return cls.side_fields

    def __init__(self, *, device: torch.device | None = None, limits: Limits = Limits(), **options: Any):
        self.device = device
        self.limits = limits
        self.options = self.options_type.of(options)  # an unknown or ill-typed option: a PipelineError naming it

    @classmethod
    def available(cls, device: torch.device | None) -> bool:
        """Whether this backend can run here (its library imports, its device exists)."""
        return True

    @classmethod
    def preferred(cls, device: torch.device | None) -> bool:
        """Whether "auto" may pick this backend for ``device`` (the fastest there in `mediapipe bench`)."""
        return True

    @classmethod
    def refusal(cls, device: torch.device | None) -> str | None:
        """Why this installed backend cannot decode here (its hardware lacks the codec), or None where
        it can or where that cannot be known in this process. "auto" then picks the next backend and
        counts each of its samples as a fallback with this reason; naming the backend is an error."""
        return None

    def probe(self, blob: Blob, data: bytes | None = None) -> SampleMeta:
        """Cheap metadata from the header (height/width, frames...), without decoding."""
        return {}

    def orientation(self, data: bytes) -> int:
        """The EXIF orientation (2 to 8) this decoder turns ``data`` by, 1 when it keeps the stored
        frame: what a source's targets are turned by before any op draws on them."""
        return 1

    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> Any:
        """Decode ``blob``; honour ``hint`` where the backend can. Raise `DecodeError` on bad input."""
        raise NotImplementedError

    @classmethod
    def placement(cls, device: torch.device | None, options: DecoderOptions) -> Where:
        """"worker": decode per sample in the loader workers (CPU backends). "device": the
        workers read the bytes and draw the parameters, and the training process decodes
        the whole batch on ``device`` with `decode_batch` (nvJPEG-style GPU decoders)."""
        return "worker"

    def decode_batch(self, blobs: list[Blob], hints: list[DecodeHint], metas: list[SampleMeta]) -> list[Any]:
        """Decode a batch at once (device backends); an entry is a `DecodeError` where that sample failed."""
        out: list[Any] = []
        for blob, hint, meta in zip(blobs, hints, metas):
            try:
                out.append(self.decode(blob, hint, _NO_RNG, meta))
            except Exception as err:  # noqa: BLE001 - returned, not raised: the batch goes on
                out.append(err)
        return out


def size_of(blob: Blob | None) -> int | None:
    """The blob's size in bytes, to weigh a header's claims against; None when unknown."""
    try:
        return None if blob is None else blob.nbytes()
    except OSError:
        return None
