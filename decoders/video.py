"""The video decoder spec and what every video backend shares: clip sampling, padding,
and turning decoded YUV planes into the requested region, size and colour format.

Output of ``mp.decoders.video(...)``, per sample:
- one clip (``clips_per_video=1`` and ``sampling`` "random" or "uniform"): uint8 (T, 3, H, W);
- several clips (``clips_per_video > 1``, or ``sampling="all"``): uint8 (N, T, 3, H, W), the
  clips of one video along a leading dim (a batch is then (B, N, T, 3, H, W)). Image ops
  take ``[..., C, H, W]`` and draw one set of parameters per sample, so every frame of
  every clip of a video gets the same crop, flip and colour jitter.
``output="rgb"``: channels R, G, B. ``output="yuv"``: channels Y, U, V (chroma upsampled to
the luma size after the crop and resize), for `mediapipe.augment.YUVToRGB` on the device.
Side field ``<field>_colour``: the stream's colour code (matrix x range, `colour_code`),
an int64 (B,) in a batch, which ``YUVToRGB(matrix="auto", range="auto")`` reads.

Geometry: a fused crop (``DecodeHint.roi``, in the displayed picture's pixels) is resampled
exactly as drawn: chroma is replicated onto the luma grid for the region, so a box with odd
edges in 4:2:0 is neither snapped nor shifted. FFmpeg's conversion replicates too for frames of
even width and height; for odd sizes its swscale interpolates chroma instead, and the two differ
at sharp colour edges. Phone video's display matrix (a rotation by a multiple of 90 degrees) is
applied unless ``apply_rotation=False``; the time spans of the clips go to a field decoded
``from_field`` this one (`Decoded.span`), e.g. the file's audio track.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F

from mediapipe.augment.functional.video import colour_code, yuv_to_rgb
from mediapipe.decoders.base import Decoded, DecodeHint, Decoder, TimeSpans
from mediapipe.decoders.options import DecoderOptions, written_unless_default
from mediapipe.decoders.spec import DecoderSpec
from mediapipe.decoders.video_index import VideoIndex
from mediapipe.errors import DecodeError
from mediapipe.rng import SampleRNG

Sampling = Literal["random", "uniform", "all"]
Pad = Literal["repeat_last", "loop", "error"]
Output = Literal["rgb", "yuv"]
BitDepth = Literal[8, 16]
SAMPLINGS: tuple[str, ...] = get_args(Sampling)
PADS: tuple[str, ...] = get_args(Pad)
OUTPUTS: tuple[str, ...] = get_args(Output)
BIT_DEPTHS: tuple[int, ...] = get_args(BitDepth)
RESAMPLINGS = ("bilinear", "bicubic")  # what the fused plane resize honours from the hint


MIN_FPS, MAX_FPS = 1e-3, 1e4  # fps= bounds: a frame every 1000 s to high-speed cameras; NaN and inf refused


@dataclass(frozen=True)
class VideoOptions(DecoderOptions):
    """The options of `video` (documented there), as every video backend reads them."""

    factory: ClassVar[str] = "video"

    clip_len: int = 16
    stride: int = 1
    fps: float | None = None
    clips_per_video: int = 1
    sampling: Sampling = "random"
    pad: Pad = "repeat_last"
    output: Output = "rgb"
    threads: int | None = None
    apply_rotation: bool = written_unless_default(True)
    bit_depth: BitDepth = written_unless_default(8)

    def check(self) -> None:
        for name in ("clip_len", "stride", "clips_per_video"):
            if getattr(self, name) < 1:
                raise self.refuse(name, "expected >= 1")
        if self.fps is not None and not MIN_FPS <= self.fps <= MAX_FPS:
            raise self.refuse("fps", f"expected frames per second in [{MIN_FPS:g}, {MAX_FPS:g}] or None")
        if self.threads is not None and self.threads < 0:
            raise self.refuse("threads", "expected >= 0 or None")
        if self.bit_depth == 16 and self.output != "rgb":
            raise self.refuse("bit_depth", "only with output='rgb' (YUVToRGB reads 8-bit planes)")


def video(
    clip_len: int = VideoOptions.clip_len,
    stride: int = VideoOptions.stride,
    fps: float | None = VideoOptions.fps,
    clips_per_video: int = VideoOptions.clips_per_video,
    sampling: Sampling = VideoOptions.sampling,
    pad: Pad = VideoOptions.pad,
    output: Output = VideoOptions.output,
    backend: str = "auto",
    threads: int | None = VideoOptions.threads,
    apply_rotation: bool = VideoOptions.apply_rotation,
    bit_depth: BitDepth = VideoOptions.bit_depth,
) -> DecoderSpec:
    """A video decoder: clips of ``clip_len`` frames, ``stride`` frames apart, as uint8 tensors.

    Args:
        clip_len: frames per clip (T).
        stride: step between a clip's frames, in source frames (or in frames at ``fps``).
        fps: resample the time axis to this rate first, by timestamp (variable frame rate
            included), as FFmpeg's ``fps`` filter: output frame n is the last source frame
            shown before (n + 0.5) / fps; None keeps the source's frames.
        clips_per_video: clips per video (N); more than one adds a leading clip dim.
        sampling: "random" (starts drawn from the sample's keyed RNG), "uniform" (N starts
            evenly spread, the middle one for N = 1; deterministic), or "all" (consecutive,
            non-overlapping clips from frame 0; N varies by video, so batch_size=1 or
            `Pipeline.dataset`).
        pad: for a video shorter than a clip: "repeat_last" (hold the last frame), "loop"
            (start again from frame 0) or "error" (a `DecodeError`, handled by ``on_error``).
        output: "rgb" (converted in the worker after the crop and resize, BT.601/BT.709/BT.2020
            and range from the stream) or "yuv" (Y, U, V planes for YUVToRGB on the device).
        backend: "auto" (NVDEC where a GPU decodes AV1, else PyAV), "pyav" or "nvdec".
        threads: decoder threads per file (libdav1d frame and tile threads); None uses
            ``torch.get_num_threads()`` (1 in loader workers, all cores in the main process).
        apply_rotation: turn frames as the stream's display matrix says (phone video shot
            upright is stored sideways), as players and FFmpeg do; False keeps the stored frames.
        bit_depth: 8 (uint8; 10- and 12-bit streams are converted from their full precision)
            or 16 (uint16 RGB, 0-65535, for HDR work; ``output="rgb"`` only).
    """
    options = VideoOptions(clip_len=clip_len, stride=stride, fps=fps, clips_per_video=clips_per_video,
                           sampling=sampling, pad=pad, output=output, threads=threads,
                           apply_rotation=apply_rotation, bit_depth=bit_depth)
    return DecoderSpec("video", backend, options)


@dataclass(frozen=True)
class ClipPlan:
    """The frames to decode for one sample: ``clips[n][t]`` is a frame number of the file;
    ``spans[n]``: (start, end) seconds from the first frame's time when clip n plays."""

    clips: tuple[tuple[int, ...], ...]
    stacked: bool  # True: output (N, T, C, H, W); False: (T, C, H, W)
    spans: tuple[tuple[float, float], ...] = ()

    @property
    def wanted(self) -> list[int]:
        """The distinct frame numbers, ascending: what the decoder must produce."""
        return sorted({f for clip in self.clips for f in clip})


class VideoDecoder(Decoder):
    """Base of the video backends: options, clip planning, and plane geometry."""

    kind: ClassVar[str] = "video"
    side_fields: ClassVar[tuple[str, ...]] = ("colour",)  # <field>_colour: colour_code of the stream
    reads_whole: ClassVar[bool] = False  # the demuxer reads (and seeks in) the file itself
    options_type: ClassVar[type[DecoderOptions]] = VideoOptions
    options: VideoOptions

    def thread_count(self) -> int:
        if self.options.threads is not None:
            return self.options.threads
        return max(1, min(torch.get_num_threads(), os.cpu_count() or 1))

    def turns(self, index: VideoIndex) -> int:
        """Counter-clockwise quarter turns from the stored frames to the output (0 to 3)."""
        return (index.rotation // 90) % 4 if self.options.apply_rotation else 0

    # -- clips ----------------------------------------------------------------------------
    def plan(self, index: VideoIndex, rng: SampleRNG, path: str) -> ClipPlan:
        """Choose the clips' frames (a pure function of the index, the options and ``rng``)."""
        o = self.options
        return plan_clips(index.frames, index.fps, clip_len=o.clip_len, stride=o.stride, fps=o.fps,
                          clips_per_video=o.clips_per_video, sampling=o.sampling, pad=o.pad,
                          rng=rng, path=path, decoder=self.name, times=index.times)

    def span(self, plan: ClipPlan, index: VideoIndex) -> TimeSpans:
        """When the clips play, on the file's timeline: for a field decoded ``from_field`` this one."""
        origin = index.start_seconds
        return TimeSpans(tuple((origin + a, origin + b) for a, b in plan.spans), plan.stacked)

    # -- planes to the output ---------------------------------------------------------------
    def finish(self, planes: PackedPlanes, frames: list[int], plan: ClipPlan, hint: DecodeHint,
               colour: tuple[str, str], turns: int = 0, seconds: Counter | None = None) -> torch.Tensor:
        """The decoded frames' Y/U/V planes of the region (``planes``, one slot per entry of
        ``frames``, ascending frame numbers) to the output tensor:
        resized as ``hint.interpolation`` and ``hint.antialias`` say (`PackedPlanes.resized`:
        every plane of the clip in one to three interpolate calls), converted to RGB in one
        batched product, then turned ``turns`` quarter turns counter-clockwise (the display matrix). ``seconds`` gets the
        time of the resize ("resize") and of the rest ("convert")."""
        t0 = time.perf_counter()
        count = planes.count
        size = tuple(hint.size) if hint.size is not None else None
        if size is not None and turns % 2:
            size = size[::-1]  # resized in the stored orientation, then turned
        mode = hint.interpolation if hint.interpolation in RESAMPLINGS else "bilinear"
        flat = planes.resized(size or planes.shape, mode, hint.antialias)  # (3F, H, W): Y..., U..., V...
        t1 = time.perf_counter()
        yuv = flat.view(3, count, *flat.shape[-2:]).transpose(0, 1)  # (F, 3, H, W)
        yuv = self.convert(yuv, colour, planes.depth)
        if turns:
            yuv = torch.rot90(yuv, turns, dims=(-2, -1))
        row = {f: i for i, f in enumerate(frames)}
        order = [row[f] for clip in plan.clips for f in clip]
        if order == list(range(len(frames))):  # the usual case: each frame once, in order
            clips = yuv.reshape(len(plan.clips), -1, *yuv.shape[1:])
        else:
            clips = yuv[torch.tensor(order, dtype=torch.int64)].reshape(len(plan.clips), -1, *yuv.shape[1:])
        out = clips.contiguous() if plan.stacked else clips[0].contiguous()
        if seconds is not None:
            seconds["resize"] += t1 - t0
            seconds["convert"] += time.perf_counter() - t1
        return out

    def convert(self, yuv: torch.Tensor, colour: tuple[str, str], depth: int) -> torch.Tensor:
        """(F, 3, H, W) Y/U/V of ``depth`` bits (uint8, or float after a high-depth resize) to the
        output: RGB or YUV, uint8 or (``bit_depth=16``) uint16."""
        code = colour_code(*colour)
        if depth == 8 and yuv.dtype == torch.uint8 and self.options.bit_depth == 8:
            return yuv_to_rgb(yuv, code) if self.options.output == "rgb" else yuv.contiguous()
        eight = yuv.float() / float(1 << (depth - 8)) if depth != 8 else yuv.float()  # 8-bit code values
        if self.options.output == "yuv":
            return eight.round_().clamp_(0, 255).to(torch.uint8)
        if self.options.bit_depth == 8:
            return yuv_to_rgb(eight / 255.0, code, dtype=torch.uint8)
        rgb = yuv_to_rgb(eight / 255.0, code, dtype=torch.float32)
        return rgb.mul_(65535.0).round_().to(torch.int32).to(torch.uint16)

    def result(self, clips: torch.Tensor, colour: tuple[str, str], decoded: int = 0,
               span: TimeSpans | None = None) -> Decoded:
        """The decoder's output: the clips, with the stream's colour code as side field ``colour``,
        the number of frames the decoder produced for them (``Decoded.frames``) and when they play."""
        return Decoded(clips, {"colour": colour_code(*colour)}, frames=decoded, span=span)


class PackedPlanes:
    """A clip's Y, U and V planes of the region, copied in as each frame is decoded (while it is
    in cache, and so that the decoder's frame buffers are released at once), planar, in groups
    of four. Chroma is replicated onto the luma grid for the region, so all planes are resized
    as planes of the region's luma size; its rows are kept once each (``sub_y``: luma rows
    per chroma row; ``dy``: the region's first luma row within its first chroma row) and
    repeated only between the horizontal and the vertical pass of the resize, on rows already
    narrowed to the output width.

    torch's uint8 bilinear/bicubic kernels (the image ops' kernels, ported from Pillow-SIMD)
    are separable, horizontal pass first, and vectorised for 4-channel images (much slower on
    single planes), so planes 4g..4g+3 are resized as the channels of image g, and the two
    passes of a uint8 chroma plane narrowed by the resize are two calls (otherwise, and for
    deeper samples, resized in float, the rows are repeated first and one call does both).
    The values are the same as resizing each full replicated plane alone in one call. Plane i
    is Y of frame slot i, plane count + i its U, plane 2 count + i its V.

    Where keeping rows once saves nothing (``sub_y`` 1) or a single frame's three planes fit one
    image (``count`` 1), the planes share one buffer (``joint``), chroma rows repeated as they
    are copied in, and are resized in one call.
    """

    def __init__(self, count: int, shape: tuple[int, int], dtype: Any = np.uint8, depth: int = 8,
                 sub_y: int = 1, dy: int = 0) -> None:
        self.count, self.shape, self.depth = count, (int(shape[0]), int(shape[1])), depth  # depth: bits per sample
        # Without subsampled rows (4:2:2, 4:4:4) nothing is saved, and a single frame's Y, U, V fit
        # one image: then one buffer as the old layout (chroma rows repeated as they are copied in)
        # and one call, not luma and chroma padded to four planes each and resized apart.
        self.joint = sub_y == 1 or count == 1
        # chroma row of each luma row of the region (None: one each, sub_y 1)
        self._row_of = (np.arange(self.shape[0]) + dy) // sub_y if sub_y > 1 else None
        if self.joint:
            self.data = np.empty((4 * -(-3 * count // 4), *self.shape), dtype)
            self.luma, self.chroma = self.data[:count], self.data[count : 3 * count]
            return
        rows = -(-(dy + self.shape[0]) // sub_y)  # the chroma rows that cover the region
        self.luma = np.empty((4 * -(-count // 4), *self.shape), dtype)
        self.chroma = np.empty((4 * -(-2 * count // 4), rows, self.shape[1]), dtype)

    def put(self, i: int, y: np.ndarray, u: np.ndarray, v: np.ndarray) -> None:
        """Copy frame slot ``i``'s planes in (the views may point into a decoder's buffer): Y of
        the region, U and V as their covering rows at the region's width (`chroma_columns`)."""
        self.luma[i] = y
        if self.joint and self._row_of is not None:  # the joint buffer holds chroma on the luma grid
            np.take(u, self._row_of, axis=0, out=self.chroma[i], mode="clip")
            np.take(v, self._row_of, axis=0, out=self.chroma[self.count + i], mode="clip")
            return
        self.chroma[i] = u
        self.chroma[self.count + i] = v

    def planes(self, kind: str = "luma") -> torch.Tensor:
        """(P, h, w): the planes of ``kind`` ("luma": P = count; "chroma": U then V, P = 2 count,
        replicated onto the luma grid)."""
        if kind == "luma":
            return torch.from_numpy(self.luma[: self.count])
        chroma = torch.from_numpy(self.chroma[: 2 * self.count])
        return chroma if self.joint else self._rows(chroma)

    def resized(self, size: tuple[int, int], interpolation: str = "bilinear", antialias: bool = True) -> torch.Tensor:
        """Every plane resized to ``size``: (3 count, H, W); uint8 stays uint8, deeper samples
        come back as float32."""
        if interpolation not in RESAMPLINGS:
            raise ValueError(f"interpolation={interpolation!r}: expected one of {RESAMPLINGS}")
        size = (int(size[0]), int(size[1]))
        if self.joint:
            return _resized(torch.from_numpy(self.data), size, interpolation, antialias)[: 3 * self.count]
        luma = _resized(torch.from_numpy(self.luma), size, interpolation, antialias)[: self.count]
        chroma = torch.from_numpy(self.chroma)
        if chroma.dtype == torch.uint8 and self.shape[1] > size[1]:  # torch's separable uint8 kernel: two calls
            chroma = _resized(chroma, (chroma.shape[-2], size[1]), interpolation, antialias)  # give one call's values
        chroma = _resized(self._rows(chroma), size, interpolation, antialias)  # vertical pass (or both)
        return torch.cat([luma, chroma[: 2 * self.count]])

    def _rows(self, chroma: torch.Tensor) -> torch.Tensor:
        """The separate layout's chroma rows repeated onto the region's luma rows (``sub_y``
        times, from ``dy``)."""
        return chroma.index_select(-2, torch.from_numpy(self._row_of))


def _resized(planes: torch.Tensor, size: tuple[int, int], interpolation: str, antialias: bool) -> torch.Tensor:
    """(4G, h, w) planes resized to ``size``, four at a time as the channels of an image; uint8
    stays uint8, deeper samples become float32 (planes already of that size are returned as they are)."""
    shape = tuple(planes.shape[-2:])
    if tuple(size) == shape:
        return planes
    if planes.dtype != torch.uint8:
        planes = planes.to(torch.float32)
    x = planes.reshape(-1, 4, *shape)  # (G, 4, h, w): a view of contiguous planes
    x = F.interpolate(x, size=tuple(size), mode=interpolation, antialias=antialias, align_corners=False)
    return x.view(-1, *size)  # planar out: no copy


_PAIRS = {np.dtype(np.uint8): (np.uint16, np.uint16(257)), np.dtype(np.uint16): (np.uint32, np.uint32(65537))}


def chroma_columns(plane: np.ndarray, top: int, left: int, height: int, width: int, sub_y: int,
                   sub_x: int) -> np.ndarray:
    """The chroma rows of a subsampled plane that cover the luma region (top, left, height,
    width), each sample repeated ``sub_x`` times along the row (FFmpeg's conversion does so for
    even frame sizes) and cut to the region's columns: (rows, width). `PackedPlanes` repeats
    the rows (``sub_y`` each, from ``top % sub_y``). Exact for any region, odd edges included."""
    c0, c1 = top // sub_y, -(-(top + height) // sub_y)
    d0, d1 = left // sub_x, -(-(left + width) // sub_x)
    cover = plane[c0:c1, d0:d1]
    if sub_x == 2 and cover.dtype in _PAIRS:  # each sample twice: s * (2^bits + 1) is the sample pair
        wide, one = _PAIRS[cover.dtype]
        cover = np.multiply(cover, one, dtype=wide).view(cover.dtype)  # one pass (no astype copy first)
    elif sub_x > 1:
        cover = np.repeat(cover, sub_x, axis=1)
    dx = left - d0 * sub_x
    return cover[:, dx : dx + width]


def display_to_stored(box: tuple[int, int, int, int], height: int, width: int,
                      turns: int) -> tuple[int, int, int, int]:
    """A (top, left, height, width) box of the displayed picture (the stored ``height`` x
    ``width`` frame turned ``turns`` quarter turns counter-clockwise) in stored pixels."""
    top, left, h, w = box
    turns %= 4
    if turns == 1:
        return left, width - top - h, w, h
    if turns == 2:
        return height - top - h, width - left - w, h, w
    if turns == 3:
        return height - left - w, top, w, h
    return box


def clip_box(roi: tuple[int, int, int, int] | None, height: int, width: int) -> tuple[int, int, int, int]:
    """The region (top, left, height, width) clipped to a ``height`` x ``width`` frame (all of it
    for None); ValueError when nothing of it lies inside."""
    if roi is None:
        return 0, 0, height, width
    top, left, h, w = (int(v) for v in roi)
    bottom, right = min(height, top + h), min(width, left + w)
    top, left = max(0, top), max(0, left)
    if bottom <= top or right <= left:
        raise ValueError(f"region {tuple(roi)} lies outside the {height}x{width} frame")
    return top, left, bottom - top, right - left


def plan_clips(
    frames: int, source_fps: float, *, clip_len: int, stride: int, fps: float | None, clips_per_video: int,
    sampling: str, pad: str, rng: SampleRNG | None, path: str = "", decoder: str = "video",
    times: np.ndarray | None = None,
) -> ClipPlan:
    """Frame numbers of each clip, and when each clip plays.

    Without ``fps`` a clip is ``clip_len`` frames ``stride`` apart. With ``fps`` the time axis
    is first resampled by timestamp (``times``: seconds of each frame from the first; frame i
    at i / source_fps when None), as FFmpeg's fps filter does: output frame n shows the last
    source frame before (n + 0.5) / fps; the clip is ``clip_len`` output frames ``stride``
    apart. A video shorter than a clip is padded by ``pad``.
    """
    if frames <= 0:
        raise DecodeError(path, decoder, "video has no frames")
    if times is None or len(times) != frames:
        times = np.arange(frames, dtype=np.float64) / source_fps
    if fps:
        total = int(math.floor(float(times[-1]) * fps + 0.5)) + 1  # output frames up to the last source frame
        total = max(1, total)

        def frame_of(n: int) -> int:
            return max(0, int(np.searchsorted(times, (n + 0.5) / fps, side="left")) - 1)

        def seconds(n: int) -> tuple[float, float]:
            return n / fps, (n + 1) / fps
    else:
        total = frames
        last_end = float(times[-1]) + 1.0 / source_fps

        def frame_of(n: int) -> int:
            return n

        def seconds(n: int) -> tuple[float, float]:
            return float(times[n]), float(times[n + 1]) if n + 1 < frames else last_end
    offsets = [k * stride for k in range(clip_len)]
    span = offsets[-1] + 1
    stacked = sampling == "all" or clips_per_video > 1
    if span > total:
        if pad == "error":
            raise DecodeError(path, decoder, f"clip needs {span} frames (clip_len={clip_len}, stride={stride}"
                                             f"{f', fps={fps:g}' if fps else ''}), video has {total}; pad='error'")
        positions = [min(o, total - 1) for o in offsets] if pad == "repeat_last" else [o % total for o in offsets]
        starts_positions = [positions] * (1 if sampling == "all" else clips_per_video)
    else:
        room = total - span  # the last possible start
        if sampling == "random":
            if rng is None:
                raise ValueError("sampling='random' needs an rng")
            starts = [rng.integers(0, room + 1) for _ in range(clips_per_video)]
        elif sampling == "uniform":
            if clips_per_video == 1:
                starts = [room // 2]
            else:
                starts = [int(round(i * room / (clips_per_video - 1))) for i in range(clips_per_video)]
        else:  # all: consecutive, non-overlapping clips from frame 0
            starts = list(range(0, room + 1, span))
        starts_positions = [[s + o for o in offsets] for s in starts]
    clips = tuple(tuple(frame_of(n) for n in positions) for positions in starts_positions)
    spans = tuple((seconds(min(p))[0], seconds(max(p))[1]) for p in starts_positions)
    return ClipPlan(clips, stacked=stacked, spans=spans)


# The backends register themselves on import; they import this module, so they come last.
from mediapipe.decoders import video_nvdec, video_pyav  # noqa: E402, F401
