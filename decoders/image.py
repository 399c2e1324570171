"""The image decoder spec and what every image backend shares: options, limits, modes, hints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

import numpy as np
import torch

from mediapipe.augment.functional.geometry import BOX_TOLERANCE, AxisWindow, axis_window, resample_windows
from mediapipe.decoders.base import DecodeHint, Decoder
from mediapipe.decoders.exif import file_orientation, jpeg_orientation
from mediapipe.decoders.jpeg_markers import END_OF_IMAGE, NOT_A_MARKER, START_OF_SCAN, segments
from mediapipe.decoders.jpeg_scans import COARSE_MARGIN, without_final_refinement
from mediapipe.decoders.options import DecoderOptions, written_unless_default
from mediapipe.decoders.spec import DecoderSpec
from mediapipe.errors import DecodeError, LimitError

Mode = Literal["RGB", "L"]  # 3-channel colour (default) or 1-channel grayscale
MODES: tuple[str, ...] = get_args(Mode)


@dataclass(frozen=True)
class ImageOptions(DecoderOptions):
    """The options of `image` and `mask`, as every image backend reads them."""

    factory: ClassVar[str] = "image"

    mode: Mode = "RGB"
    exif_transpose: bool = False
    exact: bool = written_unless_default(False)
    device_decode: bool | None = written_unless_default(None)


def image(
    backend: str = "auto", *, mode: Mode = ImageOptions.mode, exif_transpose: bool = ImageOptions.exif_transpose,
    device_decode: bool | None = ImageOptions.device_decode, exact: bool = ImageOptions.exact,
) -> DecoderSpec:
    """An image decoder: JPEG fast path, and PNG, WebP, BMP, GIF, TIFF through Pillow.

    Output: uint8 (C, H, W) with C = 3 for ``mode="RGB"`` (grayscale, CMYK and palette
    images are converted) or 1 for ``mode="L"``. 16-bit PNG and TIFF (Pillow modes
    ``I;16``, ``I;16B``, ``I``) keep each value's high byte (v >> 8, as torchvision's
    ``to_dtype(..., scale=True)``), so a 0-65535 ramp spans 0-255. ``exif_transpose=True`` applies the
    EXIF orientation (JPEGs whose header says upright stay on the fast backends; Pillow
    decodes the ones it turns). ``backend``: "auto" (the fastest installed for the device),
    "turbo" (libjpeg-turbo through simplejpeg), "pillow", or "nvimgcodec" (nvJPEG on an
    NVIDIA GPU; libjpeg-turbo with region-of-interest decoding on the CPU).
    ``exact``: a region hinted with a shrinking antialiased resize (a fused crop) is by default
    decoded the cheaper way the quality bound allows, a reduced DCT scale or, for a progressive
    JPEG, without the scans that refine the last bit of its AC coefficients (see `plan_decode`,
    `without_final_refinement`); ``exact=True`` decodes every JPEG whole at full scale, as Pillow does.
    ``device_decode``: for backends that can decode a whole batch on the pipeline's device
    (nvimgcodec): None decodes there when the device is CUDA, True always (on the CPU too,
    in the training process), False never (per sample in the workers).

    Damaged JPEGs: every backend raises `DecodeError` for a file cut short or a header that
    declares more pixels than its bytes can hold. Damage inside the entropy-coded data
    (libjpeg's "Corrupt JPEG data" warnings: a broken restart interval, a bad Huffman code)
    is an error on "turbo"; "pillow" and "nvimgcodec" decode such a file as libjpeg does,
    with grey or smeared blocks past the damage (neither reports the warning).
    """
    options = ImageOptions(mode=mode, exif_transpose=exif_transpose, exact=exact, device_decode=device_decode)
    return DecoderSpec("image", backend, options)


def mask(backend: str = "auto", *, exif_transpose: bool = ImageOptions.exif_transpose) -> DecoderSpec:
    """A segmentation mask: an image file (PNG, usually) decoded to uint8 (1, H, W), typed as a
    mask, so every op resamples it with nearest (never smoothed or antialiased), fills its new
    pixels with 0 and keeps it out of colour ops, normalisation and mixing.

    It is decoded as ``image(mode="L")`` is: greyscale images give their values, colour images
    their luma, and palette images (a PNG of class colours) the luma of each colour, not the
    palette index; store class ids as greyscale values. A mask is never fused into its decoder
    (a reduced-scale decode would smooth it); it follows the drawn crop of the image exactly.
    """
    return DecoderSpec("image", backend, ImageOptions(mode="L", exif_transpose=exif_transpose), field_kind="mask")


class ImageDecoder(Decoder):
    """Base of the image backends: the pixel limit and hint arithmetic; its options are `ImageOptions`."""

    kind: ClassVar[str] = "image"
    options_type: ClassVar[type[DecoderOptions]] = ImageOptions
    options: ImageOptions

    def plan(self, hint: DecodeHint, full: tuple[int, int], data: bytes | None = None) -> ScaledDecode:
        """The DCT scale to decode at (`plan_decode`; full scale when ``exact``, and for ``data`` whose
        frame cannot be decoded reduced: `scalable_frame`)."""
        if self.options.exact:
            return FULL_SCALE
        plan = plan_decode(hint, full)
        return FULL_SCALE if plan.denominator > 1 and data is not None and not scalable_frame(data) else plan

    def scans(self, data: bytes, hint: DecodeHint) -> bytes:
        """The JPEG to decode for this hint: ``data``, or a progressive JPEG without its final
        refinement scans where the resize shrinks the region enough for its quantisation
        (`region_shrink`, `without_final_refinement`; never when ``exact``)."""
        if self.options.exact or hint.size is None:
            return data
        frame = jpeg_frame(data)
        shrink = 0.0 if frame is None or not frame.progressive else region_shrink(hint, (frame.height, frame.width))
        if shrink < COARSE_MARGIN:
            return data
        return without_final_refinement(data, shrink) or data

    @property
    def channels(self) -> int:
        return 1 if self.options.mode == "L" else 3

    def turns(self, data: bytes) -> bool:
        """Whether ``exif_transpose`` may turn or mirror this JPEG (then Pillow decodes it): False
        for a header that says upright, True where only Pillow can tell (see `jpeg_orientation`)."""
        return self.options.exif_transpose and jpeg_orientation(data) not in (0, 1)

    def orientation(self, data: bytes) -> int:
        """The EXIF orientation this decoder turns ``data`` by (2 to 8), 1 when it does not turn it
        (``exif_transpose=False``, or an upright file): what a source's targets are turned by."""
        return file_orientation(data) if self.options.exif_transpose else 1

    def check_jpeg(self, data: bytes, path: str, read: JpegFrame | None = None) -> None:
        """DecodeError for a JPEG whose header declares more than its bytes can hold (`jpeg_claim_error`)."""
        reason = jpeg_claim_error(data, read)
        if reason is not None:
            raise DecodeError(path, self.name, reason)

    def check_pixels(self, width: int, height: int, path: str) -> None:
        limit = self.limits.max_pixels
        if limit is not None and width * height > limit:
            raise LimitError(
                path, self.name, f"image is {width}x{height} = {width * height} pixels, above max_pixels={limit}"
            )


# A decode at a reduced DCT scale keeps the region at least this many times the output size
# in both dimensions: the scaled IDCT is a cruder low-pass than an antialiased resize, and
# the resize that follows must have room to filter what it lets through.
REDUCTION_MARGIN = 2.0
DCT_DENOMINATORS = (8, 4, 2)  # 1/8, 1/4, 1/2: libjpeg's fast scaled IDCTs (3/8, 5/8... alias more)


@dataclass(frozen=True)
class ScaledDecode:
    """How a JPEG is decoded for a hint: at 1/``denominator`` scale and, when reduced, resampled
    straight to the hinted size through ``rows`` and ``cols`` (the drawn region, carried onto
    the reduced grid with sub-pixel precision)."""

    denominator: int = 1
    rows: AxisWindow | None = None
    cols: AxisWindow | None = None

    def reduced_size(self, full: tuple[int, int]) -> tuple[int, int]:
        """(height, width) of the whole image at this scale (libjpeg rounds up)."""
        return (-(-full[0] // self.denominator), -(-full[1] // self.denominator))


FULL_SCALE = ScaledDecode()


def plan_decode(hint: DecodeHint, full: tuple[int, int]) -> ScaledDecode:
    """The smallest DCT scale that keeps the hinted region `REDUCTION_MARGIN` times the output
    size and on which the resampling grid reaches the region's edges (see `axis_window`); full
    scale when none does, when no size is hinted, or when the resize is not antialiased (then a
    reduced decode would not equal a resize of the full one)."""
    if hint.size is None or not hint.antialias or hint.interpolation not in ("bilinear", "bicubic"):
        return FULL_SCALE
    top, left, height, width = hint.roi if hint.roi is not None else (0, 0, *full)
    out_h, out_w = hint.size
    for d in DCT_DENOMINATORS:
        if height < REDUCTION_MARGIN * out_h * d or width < REDUCTION_MARGIN * out_w * d:
            continue
        plan = ScaledDecode(d)
        reduced = plan.reduced_size(full)
        rows = axis_window(top / d, height / d, out_h, reduced[0])
        cols = axis_window(left / d, width / d, out_w, reduced[1])
        if max(rows.error, cols.error) <= BOX_TOLERANCE:
            return ScaledDecode(d, rows, cols)
    return FULL_SCALE


def region_shrink(hint: DecodeHint, full: tuple[int, int]) -> float:
    """How many times an antialiased bilinear or bicubic resize shrinks the hinted region (the
    smaller of the two axes' factors); 0 where no such resize follows."""
    if hint.size is None or not hint.antialias or hint.interpolation not in ("bilinear", "bicubic"):
        return 0.0
    height, width = (hint.roi[2], hint.roi[3]) if hint.roi is not None else full
    return min(height / hint.size[0], width / hint.size[1])


def finish_decode(array: np.ndarray, hint: DecodeHint, plan: ScaledDecode) -> torch.Tensor:
    """(C, H, W) from a decoded (H, W[, C]) array: the hinted region, or at a reduced scale the
    region already resampled to the hinted size."""
    x = hwc_to_chw(array)
    if plan.rows is None or plan.cols is None:
        return crop_chw(x, hint.roi)
    return resample_windows(x, plan.rows, plan.cols, hint.interpolation, hint.antialias)


_PROGRESSIVE_SOF = {0xC2, 0xC6, 0xCA, 0xCE}  # start-of-frame markers of progressive JPEGs
_HUFFMAN_SOF = {0xC0, 0xC1, 0xC2}  # baseline, extended and progressive Huffman-coded frames
_FRAME_SOF = {0xC0, 0xC1, 0xC3, 0xC5, 0xC7, 0xC9, 0xCB, 0xCD} | _PROGRESSIVE_SOF


@dataclass(frozen=True)
class JpegFrame:
    """A JPEG's start-of-frame segment: its marker, the size it declares, the number of MCUs
    (minimum coded units) that size takes, where the segment starts in the data, and the
    largest horizontal and vertical sampling factors of its components."""

    marker: int
    height: int
    width: int
    mcus: int
    offset: int
    h_max: int = 1
    v_max: int = 1

    @property
    def progressive(self) -> bool:
        return self.marker in _PROGRESSIVE_SOF


def jpeg_frame(data: bytes) -> JpegFrame | None:
    """The start-of-frame segment, found by walking the segments before it (bounded by the
    data); None for data that is not a readable JPEG header. The last file's answer is kept:
    a sample's probe, checks and decode all ask about the same (immutable) bytes."""
    global _last_frame
    last = _last_frame
    if last is not None and last[0] is data:
        return last[1]
    frame = _walk_to_frame(data)
    if type(data) is bytes:
        _last_frame = (data, frame)
    return frame


_last_frame: tuple[bytes, JpegFrame | None] | None = None  # (data, its frame): one file's, see jpeg_frame
_DCT_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC9, 0xCA})  # baseline, extended, progressive; Huffman or arithmetic


def scalable_frame(data: bytes) -> bool:
    """Whether libjpeg-turbo may decode ``data`` at a reduced scale: its frame (`jpeg_frame`) is a
    DCT one. A lossless (SOF3) frame is decoded whole whatever scale is asked, into the smaller
    buffer TurboJPEG sized for that scale (a heap overrun); a header the walk cannot read is
    decoded at full scale too, which is safe whatever frame libjpeg finds."""
    frame = jpeg_frame(data)
    return frame is not None and frame.marker in _DCT_SOF


def _walk_to_frame(data: bytes) -> JpegFrame | None:
    for marker, i, _ in segments(data):
        if marker in (NOT_A_MARKER, START_OF_SCAN, END_OF_IMAGE):  # a scan before any frame: malformed
            return None
        if marker in _FRAME_SOF:
            if i + 10 > len(data):
                return None
            height, width = int.from_bytes(data[i + 5 : i + 7], "big"), int.from_bytes(data[i + 7 : i + 9], "big")
            factors = [(c >> 4, c & 15) for c in data[i + 10 : i + 10 + 3 * data[i + 9]][1::3]]
            return frame_of(marker, height, width, factors, i)
    return None


def frame_of(marker: int, height: int, width: int, factors: list[tuple[int, int]], offset: int) -> JpegFrame:
    """The `JpegFrame` of a start-of-frame segment's fields (``factors``: each component's
    horizontal and vertical sampling factors)."""
    h_max = max((h for h, _ in factors), default=1) or 1
    v_max = max((v for _, v in factors), default=1) or 1
    mcus = -(-width // (8 * h_max)) * -(-height // (8 * v_max))
    return JpegFrame(marker, height, width, mcus, offset, h_max, v_max)


def jpeg_is_progressive(data: bytes) -> bool:
    """Whether a JPEG's frame is progressive (malformed data reads as not progressive)."""
    frame = jpeg_frame(data)
    return frame is not None and frame.progressive


# a progressive JPEG with more scans than this is refused: each scan walks every block of the
# image, so a small file of tiny scans costs its size times the image's area (libjpeg-turbo
# recommends a limit of this order, its djpeg -maxscans; nvImageCodec refuses over 256)
MAX_PROGRESSIVE_SCANS = 500


def jpeg_claim_error(data: bytes, read: JpegFrame | None = None) -> str | None:
    """Why a JPEG's declared size cannot be what its bytes hold, or None: a Huffman-coded frame
    spends at least one bit on each MCU (its first scan codes every block's DC value), so a
    header declaring more MCUs than the file has bits is truncated or corrupt. Checked before
    the decoder allocates the declared image (a few bytes can declare 65500 x 65500). A
    progressive frame with more than `MAX_PROGRESSIVE_SCANS` scans is refused too. ``read``: the
    frame a decoder read where `jpeg_frame` walks to none (junk that Pillow skips in the header),
    taken as Huffman-coded: a few junk bytes must not lift the bound."""
    frame = jpeg_frame(data) or read
    if frame is None:
        return None
    if frame.progressive:
        scans = data.count(b"\xff\xda", frame.offset)  # 0xFFDA never occurs inside entropy-coded data
        if scans > MAX_PROGRESSIVE_SCANS:
            return f"a progressive JPEG of {scans} scans, above the limit of {MAX_PROGRESSIVE_SCANS}"
    if frame.marker not in _HUFFMAN_SOF or 8 * len(data) >= frame.mcus:
        return None
    return (f"truncated or corrupt: the header declares {frame.width}x{frame.height} pixels ({frame.mcus} "
            f"coded units of at least a bit each) in a file of {len(data)} bytes")


def jpeg_is_complete(data: bytes) -> bool:
    """Whether an end-of-image marker follows the frame's first scan: a file cut short has none
    (entropy-coded data never holds one, and a thumbnail's lies in a segment before the frame)."""
    frame = jpeg_frame(data)
    sos = -1 if frame is None else data.find(b"\xff\xda", frame.offset)
    return sos >= 0 and data.rfind(b"\xff\xd9") > sos


def hwc_to_chw(array: np.ndarray) -> torch.Tensor:
    """A (C, H, W) view over an (H, W, C) or (H, W) array: no copy; channels-last strides."""
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(array).permute(2, 0, 1)


def crop_chw(x: torch.Tensor, roi: tuple[int, int, int, int] | None) -> torch.Tensor:
    if roi is None:
        return x
    top, left, height, width = roi
    return x[:, top : top + height, left : left + width]


def check_hint(hint: DecodeHint) -> None:
    if hint.roi is not None and (hint.roi[2] <= 0 or hint.roi[3] <= 0):
        raise ValueError(f"empty region of interest {hint.roi}")
