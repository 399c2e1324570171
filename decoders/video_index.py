"""A video file's frame index: presentation timestamps, key frames, count, rate, colour,
and for AV1 which frames are reference frames (read from each frame header).

Built once per file by demuxing the video stream's packets (no decoding), or taken from a
converted dataset's metadata (``frames``, ``fps``, ``keyframes``), and cached in memory per
worker. The decoder uses it to seek to the key frame at or before a clip's first frame and
to recognise each decoded frame by its timestamp.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

import numpy as np

from mediapipe.decoders.av1_obu import ReferenceGraph, sequence_or_none
from mediapipe.decoders.base import Limits, size_of
from mediapipe.decoders.streams import main_stream
from mediapipe.errors import DecodeError, LimitError
from mediapipe.reasons import reason
from mediapipe.sample import Blob, SampleMeta

# AVColorSpace / AVColorRange values (libavutil/pixfmt.h), as PyAV reports them.
_BT709_SPACES = {1}  # AVCOL_SPC_BT709
_BT2020_SPACES = {9, 10}  # AVCOL_SPC_BT2020_NCL, AVCOL_SPC_BT2020_CL (read with the NCL matrix, as swscale)
_FULL_RANGE = 2  # AVCOL_RANGE_JPEG
MATRICES = ("bt601", "bt709", "bt2020")
RANGES = ("limited", "full")
CACHE_SIZE = 4096
AV_PACKET_OVERHEAD = 640  # bytes an av.Packet costs beyond its payload (the object, AVPacket, buffer refs)
MAX_FRAME_INTERVAL = 3600.0  # seconds between frames past which a file's timestamps are corrupt, not slow


@dataclass(frozen=True)
class VideoIndex:
    """What the decoder needs to know about one file's video stream before decoding it.

    pts: presentation timestamps (stream time base) in presentation order, one per frame,
        or None when the index came from dataset metadata (then frame i is at i / fps).
    keyframes: frame numbers (presentation order) of the key frames, ascending; frame 0 first.
    matrix / range: the stream's colour signalling ("bt601", "bt709" or "bt2020"; "limited"
        or "full"); unspecified streams get FFmpeg's defaults: BT.601, limited range.
    rotation: the display matrix's rotation, counter-clockwise degrees (0, 90, 180, 270), as
        FFmpeg reads it; bit_depth: bits per sample of the decoded frames (8, 10, 12).
    references: AV1 only, bool per frame (presentation order): whether the frame still comes
        out of libdav1d opened with ``skip_frame="NONREF"`` (it is a reference frame, or shows
        one); None when unknown (other codecs, an index from metadata, an unparsed header).
    """

    frames: int
    fps: float
    duration: float
    width: int
    height: int
    codec: str
    pix_fmt: str
    time_base: Fraction
    start_pts: int
    keyframes: tuple[int, ...]
    pts: np.ndarray | None = None
    matrix: str = "bt601"
    range: str = "limited"
    has_audio: bool = False
    references: np.ndarray | None = None
    rotation: int = 0
    bit_depth: int = 8
    deps: tuple[tuple[int, ...], ...] | None = None

    def needed(self, frames: list[int]) -> list[int] | None:
        """The frames to decode for ``frames`` (ascending): they and what they reference,
        transitively (`ReferenceGraph`); None when the stream's graph is unknown."""
        return None if self.deps is None else closure(self.deps, list(frames))

    def all_references(self, frames: list[int]) -> bool:
        """Whether every frame of ``frames`` survives ``skip_frame="NONREF"`` (False when unknown)."""
        return self.references is not None and bool(self.references[frames].all())

    @cached_property
    def _frame_of_pts(self) -> dict[int, int]:
        return {} if self.pts is None else {int(p): i for i, p in enumerate(self.pts.tolist())}

    def frame_at(self, pts: int) -> int:
        """The frame number of a decoded frame's timestamp (nearest frame when not exact)."""
        exact = self._frame_of_pts.get(pts)  # a dict hit: the per-frame cost while decoding
        if exact is not None:
            return exact
        if self.pts is not None:
            i = int(np.searchsorted(self.pts, pts))
            if i < len(self.pts) and self.pts[i] == pts:
                return i
            if i == 0:
                return 0
            if i >= len(self.pts):
                return len(self.pts) - 1 + (1 if pts > self.pts[-1] else 0)
            return i if self.pts[i] - pts < pts - self.pts[i - 1] else i - 1
        return int(round(float((pts - self.start_pts) * self.time_base) * self.fps))

    def pts_of(self, frame: int) -> int:
        """The timestamp of frame number ``frame``."""
        if self.pts is not None:
            return int(self.pts[frame])
        return self.start_pts + int(round(frame / self.fps / self.time_base))

    def keyframe_before(self, frame: int) -> int:
        """The last key frame at or before ``frame`` (0 when none is listed)."""
        i = bisect_right(self.keyframes, frame) - 1
        return self.keyframes[i] if i >= 0 else 0

    @cached_property
    def times(self) -> np.ndarray:
        """Seconds of each frame from the first frame (presentation order): from the timestamps
        (variable frame rates as they are), or i / fps for an index from metadata."""
        if self.pts is None:
            return np.arange(self.frames, dtype=np.float64) / self.fps
        return (self.pts - self.pts[0]).astype(np.float64) * float(self.time_base)

    @property
    def start_seconds(self) -> float:
        """The first frame's time on the file's timeline (its timestamp x time base)."""
        return float(self.start_pts * self.time_base)

    def as_meta(self, rotate: bool = True) -> SampleMeta:
        """Header facts for the ops' parameters: the displayed size (turned by the display
        matrix when ``rotate``), frames, rate, duration, key frames."""
        height, width = (self.width, self.height) if rotate and self.rotation % 180 else (self.height, self.width)
        return {"height": height, "width": width, "frames": self.frames, "fps": self.fps,
                "duration": self.duration, "keyframes": list(self.keyframes)}


_CACHE: OrderedDict[tuple, VideoIndex] = OrderedDict()


def file_key(blob: Blob) -> tuple:
    """What identifies a file's content for the caches: name, path, offset, size and, for a file
    on disk, its device, inode, size, modification and status-change times (a file replaced or
    rewritten gets a new key even when its mtime is set back: the kernel sets ctime on every
    write and ``utime``, and no call sets it back); for bytes in memory, their length."""
    stamp = None
    if blob.data is None and blob.path is not None:
        try:
            st = os.stat(blob.path)
            stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            stamp = None
    return (blob.name, blob.path, blob.offset, blob.size, stamp, None if blob.data is None else len(blob.data))


def cached_index(blob: Blob, key: tuple | None = None) -> VideoIndex | None:
    """The index kept for ``blob`` (``key``: its `file_key`, taken before the file is read)."""
    key = file_key(blob) if key is None else key
    index = _CACHE.get(key)
    if index is not None:
        try:
            _CACHE.move_to_end(key)
        except KeyError:  # evicted by another thread meanwhile: the index is still right
            pass
    return index


def remember(blob: Blob, index: VideoIndex, key: tuple | None = None) -> None:
    """Keep ``index`` under ``key``: the file's `file_key` from before it was read, so a file
    changed while it was indexed is indexed again."""
    _CACHE[file_key(blob) if key is None else key] = index
    while len(_CACHE) > CACHE_SIZE:
        try:
            _CACHE.popitem(last=False)
        except KeyError:  # emptied by another thread
            break


def clear_cache() -> None:
    _CACHE.clear()


def colour_of(colorspace: int | None, color_range: int | None, pix_fmt: str) -> tuple[str, str]:
    """("bt601" | "bt709" | "bt2020", "limited" | "full") from FFmpeg's enums; unspecified as
    FFmpeg's swscale (BT.601, limited range)."""
    colorspace = int(colorspace) if colorspace is not None else None
    matrix = "bt709" if colorspace in _BT709_SPACES else "bt2020" if colorspace in _BT2020_SPACES else "bt601"
    full = color_range == _FULL_RANGE or pix_fmt.startswith("yuvj")
    return matrix, "full" if full else "limited"


def check_limits(index: VideoIndex, limits: Limits, path: str, decoder: str, blob: Blob | None = None) -> None:
    """`LimitError` when the video is over a limit; a `DecodeError` saying it is truncated or
    corrupt when what puts it over is impossible: more frames than the file (``blob``) has
    bytes, or timestamps that leave more than `MAX_FRAME_INTERVAL` between frames."""
    over_frames = limits.max_frames is not None and index.frames > limits.max_frames
    over_duration = limits.max_duration is not None and index.duration > limits.max_duration
    if over_frames or over_duration:
        nbytes = size_of(blob)
        if nbytes is not None and index.frames > nbytes:
            raise DecodeError(path, decoder, f"truncated or corrupt: {index.frames} frames declared in a file of "
                                             f"{nbytes} bytes (a frame takes at least one)")
        interval = index.duration / max(index.frames, 1)
        if over_duration and interval > MAX_FRAME_INTERVAL:
            raise DecodeError(path, decoder, f"truncated or corrupt: its timestamps spread {index.frames} frames "
                                             f"over {index.duration:.1f} s (a frame every {interval:.1f} s)")
    if over_frames:
        raise LimitError(path, decoder, f"video has {index.frames} frames, above max_frames={limits.max_frames}")
    if over_duration:
        raise LimitError(path, decoder, f"video lasts {index.duration:.1f} s, above max_duration={limits.max_duration}")
    if limits.max_pixels is not None and index.width * index.height > limits.max_pixels:
        raise LimitError(path, decoder, f"frames are {index.width}x{index.height}, above max_pixels={limits.max_pixels}")


def video_stream(container: Any, path: str, decoder: str) -> Any:
    """The main video stream of an open PyAV container (`main_stream`), or a `DecodeError`
    saying what is there."""
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        raise DecodeError(path, decoder, f"no video stream (streams: {', '.join(kinds)})")
    stream = main_stream(container.streams.video)
    ctx = stream.codec_context
    if ctx is None or stream.codec_context.codec is None:
        raise DecodeError(path, decoder, "unsupported codec: FFmpeg has no decoder for this video stream")
    return stream


def build_index(container: Any, stream: Any, path: str, decoder: str, meta: SampleMeta | None = None,
                keep: Demuxed | None = None) -> VideoIndex:
    """Index ``stream`` of an open container: from dataset metadata when it has frames, fps and
    keyframes, else by demuxing every packet of the stream (decoding only the first frame, for
    what only a frame tells). ``keep`` receives the packets and the first frame, for a clip
    decode that follows without opening and demuxing the file again."""
    ctx = stream.codec_context
    first = FirstFrame(stream)
    if keep is not None:
        keep.first = first
    pix_fmt = ctx.pix_fmt or (ctx.format.name if ctx.format is not None else "") or "yuv420p"
    time_base = stream.time_base or Fraction(1, 90_000)
    has_audio = bool(container.streams.audio)
    meta = meta or {}

    def facts() -> dict[str, Any]:
        """What the stream says, the first decoded frame's word first (rotation, depth, colour)."""
        frame = first.frame
        fmt = frame.format.name if frame is not None else pix_fmt
        space = frame.colorspace if frame is not None else getattr(ctx, "colorspace", None)
        crange = frame.color_range if frame is not None else getattr(ctx, "color_range", None)
        matrix, colour_range = colour_of(space, crange, fmt)
        rotation = int(round((frame.rotation or 0) / 90.0)) * 90 % 360 if frame is not None else 0
        width = int(frame.width) if frame is not None else int(ctx.width)
        height = int(frame.height) if frame is not None else int(ctx.height)
        if width <= 0 or height <= 0:
            raise DecodeError(path, decoder, f"video stream has no frame size ({width}x{height})")
        return dict(width=width, height=height, codec=ctx.codec.name, pix_fmt=fmt, time_base=Fraction(time_base),
                    matrix=matrix, range=colour_range, has_audio=has_audio, rotation=rotation,
                    bit_depth=bit_depth_of(fmt))

    if all(k in meta for k in ("frames", "fps", "keyframes")) and int(meta["frames"]) > 0 and float(meta["fps"]) > 0:
        try:
            for packet in container.demux(stream):
                if first.feed(packet):
                    break
        except Exception:  # noqa: BLE001 - the clip decode reports a damaged file with its reason
            pass
        common = facts()
        frames, fps = int(meta["frames"]), float(meta["fps"])
        keyframes = tuple(sorted({0, *(int(k) for k in meta["keyframes"] if 0 <= int(k) < frames)}))
        start = stream.start_time if stream.start_time is not None else 0
        return VideoIndex(frames=frames, fps=fps, duration=frames / fps, start_pts=int(start),
                          keyframes=keyframes, **common)
    pts_list: list[int] = []
    key_pts: list[int] = []
    av1 = ctx.codec.name == "libdav1d"
    seq = None
    if av1 and ctx.extradata and len(ctx.extradata) > 4:
        seq = sequence_or_none(bytes(ctx.extradata)[4:])  # av1C: 4 bytes, then the config OBUs
    graph = ReferenceGraph(seq) if av1 else None
    unit_pts: list[int] = []
    count = 0
    try:
        for packet in container.demux(stream):
            if packet.size == 0:  # the flush packet at the end
                continue
            pts = packet.pts if packet.pts is not None else packet.dts
            if pts is None:  # raw streams without timestamps: number the packets
                pts = count
            pts_list.append(int(pts))
            first.feed(packet)
            if keep is not None:
                keep.add(packet)
            if packet.is_keyframe:
                key_pts.append(int(pts))
            if graph is not None and graph.ok:
                graph.add(bytes(packet))
                unit_pts.append(int(pts))
            count += 1
    except Exception as err:  # av.error.FFmpegError and friends: keep what was read when it is usable
        if not pts_list:
            raise DecodeError(path, decoder, f"cannot read packets: {reason(err)}") from err
    if not pts_list:
        raise DecodeError(path, decoder, "video stream has no frames")
    pts = np.unique(np.asarray(pts_list, dtype=np.int64))  # presentation order
    keyframes = sorted({int(np.searchsorted(pts, k)) for k in key_pts} | {0})
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    if len(pts) > 1:
        span = float((pts[-1] - pts[0]) * time_base)
        fps = (len(pts) - 1) / span if span > 0 else float(rate or 25)
        if rate and abs(float(rate) - fps) / fps < 0.02:
            fps = float(rate)  # container's exact rational rate when it agrees with the timestamps
    else:
        fps = float(rate) if rate else 25.0
    duration = len(pts) / fps
    common = facts()
    references = deps = None
    if graph is not None and graph.ok and len(unit_pts) == len(pts):
        unit_of = {p: u for u, p in enumerate(unit_pts)}
        units = np.array([unit_of[int(p)] for p in pts])
        deps = graph.result(units)
        references = np.asarray(graph.survives, dtype=bool)[units]
    return VideoIndex(frames=len(pts), fps=fps, duration=duration, start_pts=int(pts[0]),
                      keyframes=tuple(keyframes), pts=pts, references=references, deps=deps, **common)


class Demuxed:
    """What an index pass leaves for the clip decode that follows it: the stream's packets in
    order (up to ``max_bytes``, each packet's payload and `AV_PACKET_OVERHEAD`; more and it keeps
    none) and the first frame, already decoded by
    the stream's own decoder with one thread (`FirstFrame`)."""

    def __init__(self, max_bytes: int = 32 << 20) -> None:
        self.packets: list[Any] | None = []
        self.first: FirstFrame | None = None
        self.left = max_bytes

    def add(self, packet: Any) -> None:
        if self.packets is None:
            return
        self.left -= packet.size + AV_PACKET_OVERHEAD
        if self.left < 0:
            self.packets = None  # too large to hold: the clip decode demuxes the file again
        else:
            self.packets.append(packet)


def bit_depth_of(pix_fmt: str) -> int:
    """Bits per sample of an FFmpeg pixel format (8 when unknown)."""
    try:
        import av

        return int(av.VideoFormat(pix_fmt).components[0].bits)
    except Exception:  # noqa: BLE001 - an unknown or unusable format name
        return 8


class FirstFrame:
    """Decodes the packets it is fed (one thread) until the stream's first frame comes out:
    what only a decoded frame tells (the display matrix, the real pixel format and colour)."""

    def __init__(self, stream: Any) -> None:
        self.frame: Any = None
        self.pts: int | None = None
        self.ctx: Any = None
        self.failed = False
        self.fed = 0
        self.seconds = 0.0  # spent decoding: the clip decode that follows reuses the frame
        try:  # the stream's own context: it carries the container's side data (the display matrix)
            self.ctx = stream.codec_context
            self.ctx.thread_count = 1
        except Exception:  # noqa: BLE001 - then the stream's own parameters are all we have
            self.failed = True

    def feed(self, packet: Any) -> bool:
        """Decode ``packet`` while no frame came out; True once one has."""
        if self.frame is not None or self.failed:
            return True
        t0 = time.perf_counter()
        try:
            frames = self.ctx.decode(packet)
        except Exception:  # noqa: BLE001 - a damaged first packet: no facts from a frame
            self.failed = True
            return True
        finally:
            self.seconds += time.perf_counter() - t0
        self.fed += 1
        if frames:
            self.frame, self.pts = frames[0], packet.pts
        return self.frame is not None

    @property
    def reusable(self) -> bool:
        """Whether the decoder holds exactly the state after the first packet, with its frame out:
        a clip decode may go on from the second packet with the same decoder."""
        return self.frame is not None and self.fed == 1 and not self.failed


def closure(deps: tuple[tuple[int, ...], ...], wanted: list[int]) -> list[int]:
    """``wanted`` and every frame they need, transitively (ascending)."""
    seen = set(wanted)
    todo = list(wanted)
    while todo:
        for d in deps[todo.pop()]:
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return sorted(seen)
