"""Pillow image backend: every format Pillow reads; DCT-reduced JPEG decode via `draft`;
16-bit grayscale scaled to 8 bits by keeping the high byte (`to_8_bits`).

A JPEG in ``mode="L"`` is decoded to its own luma plane (libjpeg's grayscale output, as the
turbo backend, torchvision's ``decode_jpeg(mode=GRAY)`` and DALI give it), not converted from
the decoded RGB; other formats become L through Pillow's ITU-R 601-2 conversion.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import torch
from PIL import Image, ImageOps

from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.exif import quiet_exif
from mediapipe.decoders.image import (
    FULL_SCALE,
    ImageDecoder,
    ScaledDecode,
    check_hint,
    finish_decode,
    frame_of,
)
from mediapipe.decoders.registry import register
from mediapipe.errors import DecodeError, LimitError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta

_EXIF_ORIENTATION = 0x0112
# the formats Pillow names a JPEG file by: "MPO" for a multi-picture file (a camera's stereo pair or
# previews after the main picture), whose first picture, a JPEG, is the one decoded
JPEG_FORMATS = frozenset({"JPEG", "MPO"})
SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})  # "I" is read as 16-bit data


def to_8_bits(im: Image.Image) -> Image.Image:
    """A 16-bit grayscale image (PNG, TIFF) as 8-bit "L", keeping each value's high byte
    (v >> 8: 0-255 -> 0, 65280-65535 -> 255), as torchvision's ``to_dtype(..., scale=True)``,
    libpng's 16-to-8 strip and Pillow's own reading of 16-bit RGB do. Pillow's ``convert``
    would saturate every value above 255 instead. Mode "I" is clipped to 0-65535 first."""
    values = np.asarray(im)
    if im.mode == "I":
        values = np.clip(values, 0, 65535)
    return Image.fromarray((values >> 8).astype(np.uint8))


def declared_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) that an image file's header declares, read by Pillow's format plugins
    without its decompression-bomb guard (only to say how large a refused image is), or None."""
    fp = io.BytesIO(data)
    prefix = fp.read(16)
    try:
        Image.init()
        for name in Image.ID:
            factory, accept = Image.OPEN[name]
            accepted = accept is None or accept(prefix)
            if not accepted or isinstance(accepted, str):  # (as Image.open tells a format)
                continue
            fp.seek(0)
            try:
                width, height = factory(fp, "").size
            except Exception:  # noqa: BLE001, S112 (not this format: the next one may read it)
                continue
            return int(width), int(height)
    except Exception:  # noqa: BLE001 (Pillow's internals changed: the message goes without the size)
        return None
    return None


@register("image", "pillow")
class PillowImageDecoder(ImageDecoder):
    """Pillow on the CPU: the fallback for every format; JPEG downscaled in the DCT domain
    (``Image.draft``, factors 1/2, 1/4, 1/8) as `plan_decode` allows, like the turbo backend."""

    priority = 100

    def _open(self, data: bytes, path: str, decoded: bytes | None = None) -> Image.Image:
        """``data`` (or ``decoded``, a thinner copy of it: see `scans`) opened, its claims checked
        on ``data`` itself, as the other backends check them."""
        try:
            with quiet_exif():  # Pillow reads the EXIF block as it opens a JPEG
                im = Image.open(io.BytesIO(data if decoded is None else decoded))
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
            raise LimitError(path, self.name, self._guard_refusal(err, data, path)) from err
        except Exception as err:  # Pillow raises UnidentifiedImageError, SyntaxError, struct.error...
            raise DecodeError(path, self.name, f"not a readable image ({err})") from err
        if im.format in JPEG_FORMATS:
            factors = [(h, v) for _, h, v, _ in getattr(im, "layer", [])]
            self.check_jpeg(data, path, frame_of(0xC2 if im.info.get("progressive") else 0xC0, im.height, im.width,
                                                 factors, 0))
        self.check_pixels(*im.size, path)
        return im

    def _guard_refusal(self, err: Exception, data: bytes, path: str) -> str:
        """Why Pillow's decompression-bomb guard refused a file: this pipeline's own ``max_pixels``
        where it refuses the image too (raising Pillow's limit would not help: `check_pixels`
        raises; a JPEG declaring more than its bytes hold is corrupt first, as when opened), else
        Pillow's process-wide ``Image.MAX_IMAGE_PIXELS`` (an error above twice it;
        a warning above it, which the program's warnings filter made an error), which this library
        leaves as the program set it."""
        size = declared_size(data)
        guard, limit = Image.MAX_IMAGE_PIXELS, self.limits.max_pixels
        warned = isinstance(err, Image.DecompressionBombWarning)
        self.check_jpeg(data, path)  # the checks of an opened image, in its order: a JPEG's claim first
        if size is not None:
            self.check_pixels(*size, path)
        elif limit is not None and limit <= (guard if warned else 2 * guard):  # (the image has more pixels)
            return f"image above max_pixels={limit} ({err})"
        image = f"image is {size[0]}x{size[1]} = {size[0] * size[1]} pixels: " if size is not None else ""
        if warned:
            return (f"{image}{err} (Pillow's DecompressionBombWarning, above its process-wide Image.MAX_IMAGE_PIXELS="
                    f"{guard}, which this program's warnings filter turns into an error; max_pixels={limit} allows "
                    "the image: raise Image.MAX_IMAGE_PIXELS or let that warning through)")
        return (f"{image}{err} (Pillow's process-wide Image.MAX_IMAGE_PIXELS={guard} refuses images above twice "
                f"it; max_pixels={limit} allows this one, but this library leaves Pillow's guard as the program "
                "set it: raise Image.MAX_IMAGE_PIXELS, or set it to None, to decode larger images through Pillow)")

    def _oriented(self, im: Image.Image) -> bool:
        """Whether EXIF orientation will swap or flip this image."""
        if not self.options.exif_transpose:
            return False
        try:
            with quiet_exif():
                return im.getexif().get(_EXIF_ORIENTATION, 1) not in (0, 1)
        except Exception:
            return False

    def probe(self, blob: Blob, data: bytes | None = None) -> SampleMeta:
        im = self._open(blob.read() if data is None else data, blob.name)
        width, height = im.size
        if self._oriented(im) and im.getexif().get(_EXIF_ORIENTATION) in (5, 6, 7, 8):
            width, height = height, width
        return {"height": height, "width": width}

    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> torch.Tensor:
        check_hint(hint)
        data = blob.read()
        im = self._open(data, blob.name, decoded=None if self.turns(data) else self.scans(data, hint))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Truncated File Read" and friends become errors below
                return self._decode(im, hint)
        except (LimitError, DecodeError):
            raise
        except Exception as err:
            raise DecodeError(blob.name, self.name, str(err) or type(err).__name__) from err

    def _decode(self, im: Image.Image, hint: DecodeHint) -> torch.Tensor:
        full = (im.size[1], im.size[0])
        plan = FULL_SCALE
        if self._oriented(im):
            if im.format in JPEG_FORMATS and self.options.mode == "L":
                im.draft("L", None)  # the luma plane, as for an upright JPEG (see the module docstring)
            im = ImageOps.exif_transpose(im)
            full = (im.size[1], im.size[0])
        elif im.format in JPEG_FORMATS:
            plan = self._draft(im, self.plan(hint, full), full)
        im.load()
        if im.mode in SIXTEEN_BIT_MODES:
            im = to_8_bits(im)
        if im.mode != self.options.mode:
            if im.mode in ("P", "PA", "RGBA", "LA") and self.options.mode == "RGB":
                im = im.convert("RGBA").convert("RGB") if im.mode in ("P", "PA") else im.convert("RGB")
            else:
                im = im.convert(self.options.mode)
        # at full scale the resize to hint.size is left to the op (torch's uint8 antialiased
        # kernel, faster than Pillow's); a reduced decode is resampled here, on the box drawn
        return finish_decode(np.asarray(im), hint, plan)

    def _draft(self, im: Image.Image, plan: ScaledDecode, full: tuple[int, int]) -> ScaledDecode:
        """Ask libjpeg for the plan's scale (and for a JPEG's luma plane in mode L); the plan
        that the decode will follow (full scale where Pillow declines)."""
        if plan.denominator == 1 and self.options.mode != "L":
            return plan
        d = plan.denominator
        # draft picks the largest of 8, 4, 2, 1 not above min(W // w, H // h): exactly d here
        size = (max(1, full[1] // d), max(1, full[0] // d)) if d > 1 else None
        im.draft(self.options.mode if self.options.mode == "L" else "RGB", size)
        decoded = (im.size[1], im.size[0])
        if decoded == plan.reduced_size(full):
            return plan
        if decoded == full:  # Pillow declined to scale this one
            return FULL_SCALE
        raise RuntimeError(f"JPEG draft gave {decoded[1]}x{decoded[0]}, expected 1/{d} of {full[1]}x{full[0]}")
