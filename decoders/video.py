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
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from mediapipe.augment.functional.video import colour_code, yuv_to_rgb
from mediapipe.decoders.base import Decoded, DecodeHint, Decoder, DecoderSpec, Limits
from mediapipe.decoders.video_index import VideoIndex
from mediapipe.errors import DecodeError
from mediapipe.rng import SampleRNG

SAMPLINGS = ("random", "uniform", "all")
PADS = ("repeat_last", "loop", "error")
OUTPUTS = ("rgb", "yuv")
RESAMPLINGS = ("bilinear", "bicubic")  # what the fused plane resize honours from the hint


def video(
    clip_len: int = 16,
    stride: int = 1,
    fps: float | None = None,
    clips_per_video: int = 1,
    sampling: str = "random",
    pad: str = "repeat_last",
    output: str = "rgb",
    backend: str = "auto",
    threads: int | None = None,
) -> DecoderSpec:
    """A video decoder: clips of ``clip_len`` frames, ``stride`` frames apart, as uint8 tensors.

    Args:
        clip_len: frames per clip (T).
        stride: step between a clip's frames, in source frames (or in frames at ``fps``).
        fps: resample the time axis to this rate first (frame i of the clip is the source
            frame shown at time start + i * stride / fps); None keeps the source's frames.
        clips_per_video: clips per video (N); more than one adds a leading clip dim.
        sampling: "random" (starts drawn from the sample's keyed RNG), "uniform" (N starts
            evenly spread, the middle one for N = 1; deterministic), or "all" (consecutive,
            non-overlapping clips from frame 0; N varies by video, so batch_size=1 or
            `Pipeline.dataset`).
        pad: for a video shorter than a clip: "repeat_last" (hold the last frame), "loop"
            (start again from frame 0) or "error" (a `DecodeError`, handled by ``on_error``).
        output: "rgb" (converted in the worker after the crop and resize, BT.601/BT.709 and
            range from the stream) or "yuv" (Y, U, V planes for YUVToRGB on the device).
        backend: "auto" (NVDEC where a GPU decodes AV1, else PyAV), "pyav" or "nvdec".
        threads: decoder threads per file (libdav1d frame and tile threads); None uses
            ``torch.get_num_threads()`` (1 in loader workers, all cores in the main process).
    """
    if clip_len < 1:
        raise ValueError(f"video(clip_len={clip_len}): expected >= 1")
    if stride < 1:
        raise ValueError(f"video(stride={stride}): expected >= 1")
    if fps is not None and fps <= 0:
        raise ValueError(f"video(fps={fps}): expected a positive rate or None")
    if clips_per_video < 1:
        raise ValueError(f"video(clips_per_video={clips_per_video}): expected >= 1")
    if sampling not in SAMPLINGS:
        raise ValueError(f"video(sampling={sampling!r}): expected one of {SAMPLINGS}")
    if pad not in PADS:
        raise ValueError(f"video(pad={pad!r}): expected one of {PADS}")
    if output not in OUTPUTS:
        raise ValueError(f"video(output={output!r}): expected one of {OUTPUTS}")
    if threads is not None and threads < 0:
        raise ValueError(f"video(threads={threads}): expected >= 0 or None")
    return DecoderSpec("video", backend, {
        "clip_len": clip_len, "stride": stride, "fps": fps, "clips_per_video": clips_per_video,
        "sampling": sampling, "pad": pad, "output": output, "threads": threads,
    })


@dataclass(frozen=True)
class ClipPlan:
    """The frames to decode for one sample: ``clips[n][t]`` is a frame number of the file."""

    clips: tuple[tuple[int, ...], ...]
    stacked: bool  # True: output (N, T, C, H, W); False: (T, C, H, W)

    @property
    def wanted(self) -> list[int]:
        """The distinct frame numbers, ascending: what the decoder must produce."""
        return sorted({f for clip in self.clips for f in clip})

    def window(self, index: VideoIndex) -> tuple[float, float]:
        """(start, end) seconds covered by the clips: where the time-aligned audio lies."""
        first = min(min(c) for c in self.clips)
        last = max(max(c) for c in self.clips)
        return index.time_of(first), index.time_of(last + 1)


_WINDOWS: OrderedDict[str, tuple[float, float]] = OrderedDict()  # blob name -> last clip window


def last_window(name: str) -> tuple[float, float] | None:
    """(start, end) seconds of the clips this process last decoded from the file ``name``.

    The hook for time-aligned audio: with ``decode={"video": video(...), "audio": audio(...)}``
    the graph decodes the fields in order, in one worker, so an audio decoder reading the
    same file finds here the window of the clip just sampled for this sample. (A core
    change that passes it as ``DecodeHint.window`` would make the coupling explicit.)
    """
    return _WINDOWS.get(name)


def remember_window(name: str, window: tuple[float, float]) -> None:
    _WINDOWS[name] = window
    _WINDOWS.move_to_end(name)
    while len(_WINDOWS) > 256:
        _WINDOWS.popitem(last=False)


class VideoDecoder(Decoder):
    """Base of the video backends: options, clip planning, and plane geometry."""

    kind: ClassVar[str] = "video"
    side_fields: ClassVar[tuple[str, ...]] = ("colour",)  # <field>_colour: colour_code of the stream
    reads_whole: ClassVar[bool] = False  # the demuxer reads (and seeks in) the file itself

    def __init__(
        self,
        *,
        device: torch.device | None = None,
        limits: Limits = Limits(),
        clip_len: int = 16,
        stride: int = 1,
        fps: float | None = None,
        clips_per_video: int = 1,
        sampling: str = "random",
        pad: str = "repeat_last",
        output: str = "rgb",
        threads: int | None = None,
    ) -> None:
        super().__init__(device=device, limits=limits)
        video(clip_len, stride, fps, clips_per_video, sampling, pad, output, threads=threads)  # validates
        self.clip_len, self.stride, self.fps = clip_len, stride, fps
        self.clips_per_video, self.sampling, self.pad, self.output = clips_per_video, sampling, pad, output
        self.threads = threads

    def thread_count(self) -> int:
        if self.threads is not None:
            return self.threads
        return max(1, min(torch.get_num_threads(), os.cpu_count() or 1))

    # -- clips ----------------------------------------------------------------------------
    def plan(self, index: VideoIndex, rng: SampleRNG, path: str) -> ClipPlan:
        """Choose the clips' frames (a pure function of the index, the options and ``rng``)."""
        plan = plan_clips(index.frames, index.fps, clip_len=self.clip_len, stride=self.stride, fps=self.fps,
                          clips_per_video=self.clips_per_video, sampling=self.sampling, pad=self.pad,
                          rng=rng, path=path, decoder=self.name)
        remember_window(path, plan.window(index))
        return plan

    # -- planes to the output ---------------------------------------------------------------
    def finish(self, planes: PackedPlanes, frames: list[int], plan: ClipPlan, hint: DecodeHint,
               colour: tuple[str, str]) -> torch.Tensor:
        """The decoded frames' cropped Y/U/V planes (``planes``, one slot per entry of ``frames``,
        ascending frame numbers) to the output tensor. The resize follows ``hint.interpolation``
        and ``hint.antialias`` (the fused op's); all luma planes of the clip go through one
        interpolate call, all chroma planes through another, and the colour conversion is one
        batched product over every frame.
        """
        count = planes.count
        shape = planes.luma_shape
        out_size = tuple(hint.size if hint.size is not None else shape)
        mode = hint.interpolation if hint.interpolation in RESAMPLINGS else "bilinear"
        luma = planes.resized(planes.luma, count, out_size, mode, hint.antialias)  # (F, H, W)
        if out_size == (2 * planes.chroma_shape[0], 2 * planes.chroma_shape[1]):
            # no resize: replicate each chroma sample 2x2, as FFmpeg's own yuv420p -> rgb24 does
            chroma = planes.resized(planes.chroma, 2 * count, planes.chroma_shape, mode, hint.antialias)
            chroma = chroma.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)
        else:  # one filtered resize from the chroma grid straight to the output size
            chroma = planes.resized(planes.chroma, 2 * count, out_size, mode, hint.antialias)
        yuv = torch.stack([luma, chroma[:count], chroma[count:]], dim=1)  # (F, 3, H, W)
        if self.output == "rgb":
            yuv = yuv_to_rgb(yuv, colour_code(*colour))
        row = {f: i for i, f in enumerate(frames)}
        order = [row[f] for clip in plan.clips for f in clip]
        if order == list(range(len(frames))):  # the usual case: each frame once, in order
            clips = yuv.reshape(len(plan.clips), -1, *yuv.shape[1:])
        else:
            clips = yuv[torch.tensor(order, dtype=torch.int64)].reshape(len(plan.clips), -1, *yuv.shape[1:])
        return clips if plan.stacked else clips[0]

    def result(self, clips: torch.Tensor, colour: tuple[str, str], decoded: int = 0) -> Decoded:
        """The decoder's output: the clips, with the stream's colour code as side field ``colour``
        and the number of frames the decoder produced for them (``Decoded.frames``)."""
        return Decoded(clips, {"colour": colour_code(*colour)}, frames=decoded)


class PackedPlanes:
    """A clip's cropped planes, copied in as each frame is decoded (while it is in cache, and
    so that the decoder's frame buffers are released at once), planar, in groups of four.

    torch's uint8 bilinear/bicubic kernels (the image ops' kernels, ported from Pillow-SIMD)
    are vectorised for 4-channel images and about 9x slower on single planes, so planes
    4g..4g+3 of a kind are resized as the channels of image g. The values are the same as
    resizing each plane alone. The planes are stored planar ((G, 4, h, w) memory, padded to
    a multiple of four): a frame's copy is row copies, and the kernel interleaves the
    channels itself, faster than a strided copy into a channels-last array (and its output
    is planar, with no copy back). Luma: Y of frame i is plane i; chroma: U of frame i is
    plane i, V of frame i is plane count + i.
    """

    def __init__(self, count: int, luma_shape: tuple[int, int], chroma_shape: tuple[int, int]) -> None:
        self.count, self.luma_shape, self.chroma_shape = count, tuple(luma_shape), tuple(chroma_shape)
        self.luma = np.empty((4 * -(-count // 4), *self.luma_shape), np.uint8)
        self.chroma = np.empty((4 * -(-2 * count // 4), *self.chroma_shape), np.uint8)

    def put(self, i: int, y: np.ndarray, u: np.ndarray, v: np.ndarray) -> None:
        """Copy frame slot ``i``'s planes in (the views may point into a decoder's buffer)."""
        self.luma[i] = y
        self.chroma[i] = u
        self.chroma[self.count + i] = v

    def planes(self, kind: str = "luma") -> torch.Tensor:
        """(P, h, w) uint8: the planes of ``kind`` ("luma": P = count; "chroma": U then V)."""
        packed = self.luma if kind == "luma" else self.chroma
        count = self.count if kind == "luma" else 2 * self.count
        return self.resized(packed, count, packed.shape[1:])

    @staticmethod
    def resized(packed: np.ndarray, count: int, size: tuple[int, int], interpolation: str = "bilinear",
                antialias: bool = True) -> torch.Tensor:
        """The first ``count`` planes of ``packed`` ((4G, h, w)) resized to ``size``: (count, H, W) uint8."""
        if interpolation not in RESAMPLINGS:
            raise ValueError(f"interpolation={interpolation!r}: expected one of {RESAMPLINGS}")
        x = torch.from_numpy(packed)
        if tuple(packed.shape[1:]) != tuple(size):
            x = x.view(-1, 4, *packed.shape[1:])  # (G, 4, h, w): four planes as the channels of an image
            x = F.interpolate(x, size=tuple(size), mode=interpolation, antialias=antialias, align_corners=False)
            x = x.view(-1, *size)  # planar out: no copy
        return x[:count]


def resize_planes(planes: list[np.ndarray], size: tuple[int, int], interpolation: str = "bilinear",
                  antialias: bool = True) -> torch.Tensor:
    """Resize equal-sized uint8 planes to ``size``: (P, H, W) (see `PackedPlanes`)."""
    packed = PackedPlanes(len(planes), planes[0].shape, (1, 1))
    for i, plane in enumerate(planes):
        packed.luma[i] = plane
    return packed.resized(packed.luma, len(planes), size, interpolation, antialias)


def even_roi(roi: tuple[int, int, int, int] | None, height: int, width: int,
             sub_y: int = 2, sub_x: int = 2) -> tuple[int, int, int, int]:
    """The region snapped outward to the chroma grid (even offsets and sizes for 4:2:0),
    so the luma and chroma crops cover the same picture area; at most one pixel larger."""
    if roi is None:
        return 0, 0, height, width
    top, left, h, w = roi
    top, left = max(0, top), max(0, left)
    bottom, right = min(height, top + h), min(width, left + w)
    top, left = top - top % sub_y, left - left % sub_x
    bottom = min(height, bottom + (-bottom) % sub_y)
    right = min(width, right + (-right) % sub_x)
    if bottom <= top or right <= left:
        raise ValueError(f"region {roi} lies outside the {height}x{width} frame")
    return top, left, bottom - top, right - left


def plan_clips(
    frames: int, source_fps: float, *, clip_len: int, stride: int, fps: float | None, clips_per_video: int,
    sampling: str, pad: str, rng: SampleRNG | None, path: str = "", decoder: str = "video",
) -> ClipPlan:
    """Frame numbers of each clip. A clip spans ``(clip_len - 1) * step + 1`` source frames,
    ``step = stride * source_fps / fps`` (``stride`` without ``fps``); a video shorter than
    that is padded by ``pad``."""
    if frames <= 0:
        raise DecodeError(path, decoder, "video has no frames")
    step = stride * (source_fps / fps if fps else 1.0)
    offsets = [int(math.floor(k * step + 1e-9)) for k in range(clip_len)]
    span = offsets[-1] + 1
    if span > frames:
        if pad == "error":
            raise DecodeError(path, decoder, f"clip needs {span} frames (clip_len={clip_len}, step={step:g}), "
                                             f"video has {frames}; pad='error'")
        if pad == "repeat_last":
            clip = tuple(min(o, frames - 1) for o in offsets)
        else:  # loop
            clip = tuple(o % frames for o in offsets)
        count = 1 if sampling == "all" else clips_per_video
        return ClipPlan((clip,) * count, stacked=sampling == "all" or clips_per_video > 1)
    room = frames - span  # the last possible start
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
    clips = tuple(tuple(s + o for o in offsets) for s in starts)
    return ClipPlan(clips, stacked=sampling == "all" or clips_per_video > 1)


def describe_options(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in options.items())


# The backends register themselves on import; they import this module, so they come last.
from mediapipe.decoders import video_nvdec, video_pyav  # noqa: E402, F401
