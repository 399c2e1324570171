"""PyAV video backend: AV1 through libdav1d (frame and tile threads), and whatever else
FFmpeg decodes (H.264, HEVC, VP9...), from MP4, Matroska/WebM, IVF and other containers.

A clip costs one seek to the key frame at or before its first frame and a forward decode
to its last frame; frames between clips are decoded only when no key frame lies between
them. Only the wanted frames' planes are read: each is cropped as YUV plane views and
copied at once into the clip's resize layout (`PackedPlanes`), so the decoder's buffer goes
back to its pool; lead-in frames and frames between strided picks are decoded and dropped.
The clip is then resized (all its planes in one to three calls, `PackedPlanes.resized`) and
converted to RGB in one batched product (or not at all, for ``output="yuv"``): never
``to_ndarray("rgb24")`` on a whole frame.

Non-reference frames: FFmpeg's libdav1d wrapper reads ``skip_frame`` only when the decoder
opens (dav1d's ``decode_frame_type``), so setting ``"NONREF"`` mid-stream changes nothing
(every frame still comes out), and a decoder reopened after the lead-in would lack the
reference frames. Set at open it skips the frames that refresh no reference slot (in
libsvtav1 streams, most odd frames). So the index
reads each AV1 frame header's ``refresh_frame_flags`` (`VideoIndex.references`), and a clip
whose wanted frames are all reference frames (about half of the stride-2 clips) opens
libdav1d with ``"NONREF"``: its lead-in and the frames between its picks that nothing
references are never decoded, and the frames it keeps are bit-identical.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import torch

from mediapipe.decoders.base import Decoded, DecodeHint
from mediapipe.decoders.registry import register
from mediapipe.decoders.video import PackedPlanes, VideoDecoder, chroma_columns, clip_box, display_to_stored
from mediapipe.decoders.video_cache import PACKET_OVERHEAD, SourceCache
from mediapipe.decoders.video_index import (
    Demuxed,
    VideoIndex,
    bit_depth_of,
    build_index,
    cached_index,
    check_limits,
    colour_of,
    file_key,
    remember,
    video_stream,
)
from mediapipe.errors import DecodeError, MediapipeError
from mediapipe.reasons import reason
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob, SampleMeta

try:
    import av
except ImportError:  # pragma: no cover - av is a dependency
    av = None

log = logging.getLogger(__name__)

# Planar pixel formats read straight from the frame's planes: chroma subsampling (rows, columns)
# and bits per sample (more than 8: little-endian 16-bit words).
_PLANAR = {"yuv420p": (2, 2, 8), "yuvj420p": (2, 2, 8), "yuv422p": (1, 2, 8), "yuvj422p": (1, 2, 8),
           "yuv444p": (1, 1, 8), "yuvj444p": (1, 1, 8)}
_PLANAR.update({f"yuv{sub}p{bits}le": (sy, sx, bits) for sub, sy, sx in (("420", 2, 2), ("422", 1, 2), ("444", 1, 1))
                for bits in (10, 12)})


def open_container(blob: Blob, path: str, decoder: str) -> Any:
    """An open PyAV input container over ``blob``: the file by name when it is a whole
    file (FFmpeg's own I/O), else a seekable file object (a tar member, bytes in memory)."""
    try:
        if blob.data is None and blob.offset == 0 and blob.size is None and blob.path is not None:
            return av.open(blob.path, "r", metadata_errors="ignore")
        return av.open(blob.open(), "r", metadata_errors="ignore")
    except MediapipeError:
        raise
    except Exception as err:  # av.error.FFmpegError (InvalidDataError...), OSError
        raise DecodeError(path, decoder, f"cannot open: {reason(err)}") from err


def plane_array(plane: Any, dtype: Any = np.uint8) -> np.ndarray:
    """A zero-copy (height, width) view of one plane of a decoded frame (uint8, or uint16 samples)."""
    size = np.dtype(dtype).itemsize
    rows = np.frombuffer(plane, dtype, count=plane.height * plane.line_size // size)
    return rows.reshape(plane.height, plane.line_size // size)[:, : plane.width]


@register("video", "pyav")
class PyAVVideoDecoder(VideoDecoder):
    """FFmpeg through PyAV on the CPU; libdav1d for AV1 with ``threads`` threads."""

    priority = 100
    paths: ClassVar[Counter] = Counter()  # "closure", "nonref", "all" (and "..._retry"): clips decoded each way, per process

    @classmethod
    def available(cls, device: torch.device | None) -> bool:
        return av is not None

    # -- index --------------------------------------------------------------------------
    def index(self, blob: Blob, meta: SampleMeta | None = None) -> VideoIndex:
        """The file's frame index: cached per process; built from ``meta`` or by demuxing. A fresh
        index pass keeps the file's packets and its decoder, first frame decoded, in this
        decoder's `SourceCache` (`PacketSource`): the clip decodes of the file that follow, in this
        epoch and later ones, do no open, no demux, and the first does not decode the first
        frame again."""
        key = file_key(blob)  # before reading: a file changed meanwhile is read again next time
        index = cached_index(blob, key)
        if index is None:
            seconds = self._state().seconds
            t0 = time.perf_counter()
            container = open_container(blob, blob.name, self.name)
            keep = Demuxed() if self.thread_count() == 1 else None  # the first frame's decoder has one thread
            try:
                stream = video_stream(container, blob.name, self.name)
                t1 = time.perf_counter()
                index = build_index(container, stream, blob.name, self.name, meta, keep)
            except BaseException:
                container.close()
                raise
            first = keep.first.seconds if keep is not None and keep.first is not None else 0.0
            seconds["open"] += t1 - t0
            seconds["index"] += time.perf_counter() - t1 - first
            seconds["lead_in"] += first  # the first frame, decoded by the index pass for the clip
            remember(blob, index, key)
            try:
                check_limits(index, self.limits, blob.name, self.name, blob)
            except BaseException:
                container.close()  # an over-limit file's packets are never kept
                raise
            if keep is not None and keep.packets and keep.first is not None and not keep.first.failed:
                self._sources().put(key, PacketSource(container, stream, keep, key), live=True)
            else:
                container.close()
        else:
            check_limits(index, self.limits, blob.name, self.name, blob)
        return index

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without this process's demuxed files (a copy starts with none of its own)."""
        state = dict(self.__dict__)
        state.pop("_source_local", None)
        state.pop("_source_cache", None)
        return state

    def _sources(self) -> SourceCache:
        """This decoder's demuxed files, shared by the threads that decode with it (thread workers:
        a file indexed by one thread serves the clips another decodes, and outlives both)."""
        cache = self.__dict__.get("_source_cache")
        if cache is None:
            cache = self.__dict__.setdefault("_source_cache", SourceCache())  # atomic: one cache wins
        return cache

    def _state(self) -> threading.local:
        """The seconds this thread spent per part of the decode since its last sample (``seconds``,
        handed out with it as `Decoded.stages`)."""
        local = self.__dict__.get("_source_local")
        if local is None:
            local = self.__dict__.setdefault("_source_local", threading.local())
        if not hasattr(local, "seconds"):
            local.seconds = Counter()
        return local

    def reuses_index_pass(self) -> bool:
        """Whether a clip decode may go on with the index pass's software decoder (`PacketSource`)."""
        return True

    def _take_source(self, blob: Blob) -> PacketSource | None:
        """The demuxed copy of ``blob`` (rewound, its decoder flushed), taken out of the cache while
        this thread decodes it, if there is one."""
        if not self.reuses_index_pass():
            return None
        source = self._sources().take(file_key(blob))
        if source is not None:
            source.rewind(self.thread_count())
        return source

    def probe(self, blob: Blob, data: bytes | None = None) -> SampleMeta:
        return self.index(blob).as_meta(rotate=self.options.apply_rotation)

    # -- decode -------------------------------------------------------------------------
    def decode(self, blob: Blob, hint: DecodeHint, rng: SampleRNG, meta: SampleMeta) -> Decoded:
        """The clips (``Decoded.value``), the stream's colour code (side field ``colour``) and
        when the clips play (``Decoded.span``)."""
        seconds = self._state().seconds
        try:
            index = self.index(blob, meta)
            plan = self.plan(index, rng, blob.name)
            wanted = plan.wanted
            turns = self.turns(index)
            roi = self.region(hint, index, blob.name, turns)
            planes, colour, decoded = self.decode_frames(blob, index, wanted, roi)
            out = self.finish(planes, wanted, plan, hint, colour, turns, seconds)
        except BaseException:
            seconds.clear()  # a failed sample's parts are not the next sample's
            raise
        stages = dict(seconds)
        seconds.clear()
        return replace(self.result(out, colour, decoded, self.span(plan, index)), stages=stages)

    def region(self, hint: DecodeHint, index: VideoIndex, path: str, turns: int = 0) -> tuple[int, int, int, int]:
        """The hint's region (displayed pixels) in stored pixels, clipped to the frame."""
        height, width = (index.width, index.height) if turns % 2 else (index.height, index.width)
        try:
            box = clip_box(hint.roi, height, width)
        except ValueError as err:
            raise DecodeError(path, self.name, str(err)) from err
        return display_to_stored(box, index.height, index.width, turns)

    def codec(self, stream: Any) -> Any:
        """The codec context that decodes ``stream``: FFmpeg's default decoder (libdav1d for AV1)
        with ``threads`` threads (dav1d's frame and tile threads; frame/slice threads elsewhere)."""
        ctx = stream.codec_context
        ctx.thread_type = "AUTO"
        ctx.thread_count = self.thread_count()
        return ctx

    def decode_frames(self, blob: Blob, index: VideoIndex, wanted: list[int],
                      roi: tuple[int, int, int, int]) -> tuple[PackedPlanes, tuple[str, str], int]:
        """Decode frames ``wanted`` (ascending), cropped to ``roi``: their planes, slot i for
        ``wanted[i]``, the stream's (matrix, range), and the number of frames the decoder
        output (lead-in and frames between picks included, frames ``skip_frame`` skipped
        not; a retried clip counts both passes). Frames before and between the wanted
        ones are decoded only: their planes are never read. When every wanted frame is an AV1
        reference frame (`VideoIndex.references`), libdav1d opens with ``skip_frame="NONREF"``
        and skips the non-reference frames of the lead-in and between picks (the frames it
        does decode are bit-identical); should a wanted frame still be missing, the clip is
        decoded again without skipping."""
        tally = Tally({index.pts_of(f) for f in wanted}, self._state().seconds)
        needed = index.needed(wanted)
        if needed is not None:
            try:
                planes, colour = self._decode_frames(blob, index, wanted, roi, tally, skip_nonref=False,
                                                     only=frozenset(needed))
                self.paths["closure"] += 1
                return planes, colour, tally.frames
            except DecodeError:
                self.paths["closure_retry"] += 1  # the header parse was wrong, or the file is bad
        elif index.all_references(wanted):
            try:
                planes, colour = self._decode_frames(blob, index, wanted, roi, tally, skip_nonref=True)
                self.paths["nonref"] += 1
                return planes, colour, tally.frames
            except DecodeError:
                self.paths["nonref_retry"] += 1  # the header parse was wrong, or the file is bad
        planes, colour = self._decode_frames(blob, index, wanted, roi, tally, skip_nonref=False)
        self.paths["all"] += 1
        return planes, colour, tally.frames

    def _decode_frames(self, blob: Blob, index: VideoIndex, wanted: list[int], roi: tuple[int, int, int, int],
                       tally: Tally, *, skip_nonref: bool,
                       only: frozenset[int] | None = None) -> tuple[PackedPlanes, tuple[str, str]]:
        path = blob.name
        top, left, height, width = roi
        slot = {f: i for i, f in enumerate(wanted)}
        planes: PackedPlanes | None = None
        done = bytearray(len(wanted))
        seconds = tally.seconds
        # skip_frame is read when a decoder opens: a clip that skips opens its own
        container: Any = None if skip_nonref else self._take_source(blob)
        clean = False
        try:
            if container is not None:
                stream, ctx = None, container.ctx  # the index pass's decoder, on its packets
            else:
                t0 = time.perf_counter()
                container = open_container(blob, path, self.name)
                stream = video_stream(container, path, self.name)
                ctx = self.codec(stream)
                seconds["open"] += time.perf_counter() - t0
            if skip_nonref and ctx.codec.name == "libdav1d":
                ctx.skip_frame = "NONREF"  # libdav1d reads it when it opens, at the first packet
            colour: tuple[str, str] | None = None
            layout = None
            try:
                for number, frame in self._frames(container, stream, ctx, index, wanted, path, tally, only):
                    if colour is None:
                        colour = colour_of(frame.colorspace, frame.color_range, frame.format.name)
                    if frame.width < left + width or frame.height < top + height:
                        raise DecodeError(path, self.name, f"frame {number} is {frame.width}x{frame.height}, "
                                                           f"smaller than the {index.width}x{index.height} indexed")
                    t0 = time.perf_counter()
                    y, u, v, depth, sub_y = self._crop(frame, top, left, height, width)
                    if planes is None or layout != (y.dtype, depth, sub_y):
                        if planes is not None:  # the pixel format changed mid-stream
                            raise DecodeError(path, self.name, f"frame {number} changes the pixel format "
                                                               f"to {frame.format.name}")
                        planes = PackedPlanes(len(wanted), (height, width), y.dtype, depth, sub_y, top % sub_y)
                        layout = (y.dtype, depth, sub_y)
                    planes.put(slot[number], y, u, v)
                    done[slot[number]] = 1
                    seconds["convert"] += time.perf_counter() - t0
            except MediapipeError:
                raise
            except Exception as err:  # av.error.FFmpegError: corrupt or truncated data
                raise DecodeError(path, self.name, f"decoding failed: {reason(err)}") from err
            clean = True
        finally:
            if clean and isinstance(container, PacketSource):
                container.release()
                self._sources().put(container.key, container)  # for this file's next clip, in any thread
            else:
                container.close()
        missing = [f for f, ok in zip(wanted, done) if not ok]
        if missing or planes is None:
            raise DecodeError(path, self.name, f"frames {(missing or wanted)[:5]} of {index.frames} were not "
                                               "decoded (truncated or corrupt file?)")
        return planes, colour or (index.matrix, index.range)

    def _crop(self, frame: Any, top: int, left: int, height: int, width: int) -> tuple[Any, Any, Any, int, int]:
        """Y of the region, U and V as the chroma rows that cover it at the region's width
        (`chroma_columns`), the bits per sample and the luma rows per chroma row. Y is a view
        into the frame's buffer: PackedPlanes.put copies it at once."""
        fmt = frame.format.name
        if fmt == "nv12":  # hardware decoders: Y, then U and V interleaved at half resolution
            uv = np.frombuffer(frame.planes[1], np.uint8).reshape(frame.planes[1].height, -1)[:, : 2 * -(-frame.width // 2)]
            y, u, v, sub_y, sub_x, bits = plane_array(frame.planes[0]), uv[:, 0::2], uv[:, 1::2], 2, 2, 8
        else:
            if fmt not in _PLANAR:  # P010 (hardware), GBR, gray...: one conversion to 4:2:0 at the same depth
                deep = bit_depth_of(fmt) > 8
                frame = frame.reformat(format="yuv420p10le" if deep else "yuv420p")
                fmt = frame.format.name
            sub_y, sub_x, bits = _PLANAR[fmt]
            dtype = np.uint8 if bits == 8 else np.uint16
            y, u, v = (plane_array(frame.planes[p], dtype) for p in range(3))
        region = (top, left, height, width, sub_y, sub_x)
        return (y[top : top + height, left : left + width], chroma_columns(u, *region), chroma_columns(v, *region),
                bits, sub_y)

    def _frames(self, container: Any, stream: Any, ctx: Any, index: VideoIndex, wanted: list[int], path: str,
                tally: Tally, only: frozenset[int] | None = None):
        """Yield (frame number, frame) for each wanted frame (ascending). Seek to the key frame at
        or before the next wanted frame only when that key frame lies ahead of the decoder's
        position; otherwise keep decoding forward. With ``only``, packets of other frames never
        reach the decoder (`VideoIndex.needed`). ``tally`` counts every frame the decoder outputs."""
        todo = deque(wanted)
        position = -1  # the last frame number decoded; a fresh container starts at frame 0
        linear = False  # after a seek that overshot: decode from the start, never seek again
        while todo:
            target = todo[0]
            key = index.keyframe_before(target)
            after_seek = not linear and (key > position + 1 or target <= position)
            if after_seek:
                _seek(container, stream, ctx, index.pts_of(key), tally.seconds)
            overshot = False
            frame_at, keyframe_before = index.frame_at, index.keyframe_before
            for frame in _decoded(container, stream, ctx, tally, None if only is None else (index, only),
                                  getattr(container, "ready", None)):
                pts = frame.pts
                if pts is None:
                    pts = frame.dts
                number = frame_at(pts) if pts is not None else position + 1
                if after_seek and number > target and key > 0:
                    overshot = True  # the demuxer's seek disagrees with the index
                    break
                after_seek = False
                position = number
                if todo[0] > number:
                    continue  # a lead-in frame: decoded, never touched
                while todo and todo[0] < number:
                    todo.popleft()  # a frame the stream does not have: reported as missing
                if todo and todo[0] == number:
                    todo.popleft()
                    yield number, frame
                if not todo:
                    return
                if not linear and keyframe_before(todo[0]) > position + 1:
                    break  # a key frame lies ahead of the next wanted frame: seek to it
            else:
                return  # end of stream; what is left in todo is missing
            if overshot:
                log.warning("%s: seek to frame %d landed later; decoding from the start", path, key)
                _seek(container, stream, ctx, index.pts_of(0), tally.seconds)
                position, linear = -1, True


_DECODER_FIELDS = ("colorspace", "color_range", "color_primaries", "color_trc")  # the container's word, for
# frames whose bitstream leaves them unspecified


class PacketSource:
    """The packets an index pass kept, standing in for the container they came from, which is
    closed: ``demux`` goes on from the current packet, ``seek`` goes to a key frame (flushing
    the decoder ``ctx``). The first clip goes on with the index pass's decoder, whose first
    frame is ``ready`` (`FirstFrame`: handed out, not decoded again); ``release`` then drops the
    decoder (its frame pool is most of its memory) and ``rewind`` makes a new one with the
    stream's parameters for the next clip."""

    def __init__(self, container: Any, stream: Any, keep: Demuxed, key: tuple) -> None:
        self.key = key  # the file's identity when it was read (`file_key`)
        # the packets' bytes and timestamps only: an av.Packet keeps its stream, and with it the
        # container and the index pass's decoder, alive
        self.packets = [(bytes(p), p.pts, p.dts, p.is_keyframe) for p in keep.packets]
        self.ctx = stream.codec_context
        self.nbytes = sum(len(p[0]) for p in self.packets) + PACKET_OVERHEAD * len(self.packets)
        self.codec, self.extradata = self.ctx.codec.name, self.ctx.extradata
        self.fields = {name: getattr(self.ctx, name, None) for name in _DECODER_FIELDS}
        first = keep.first
        self.ready = {first.pts: first.frame} if first is not None and first.reusable else {}
        self.position = 0
        container.close()  # the packets and the decoder outlive it

    def demux(self, stream: Any):
        while self.position < len(self.packets):
            data, pts, dts, key = self.packets[self.position]
            self.position += 1
            packet = av.Packet(data)
            packet.pts, packet.dts, packet.is_keyframe = pts, dts, key
            yield packet
        yield av.Packet()  # empty: flushes the decoder, as a container's demux ends

    def seek(self, pts: int, stream: Any = None, backward: bool = True, any_frame: bool = False) -> None:
        at = 0
        for i, (_, packet_pts, _, key) in enumerate(self.packets):
            if key and packet_pts is not None and packet_pts <= pts:
                at = i
        self.position, self.ready = at, {}
        self.ctx.flush_buffers()

    def rewind(self, threads: int) -> None:
        """Back to the first packet with a new decoder of ``threads`` threads (nothing to do
        while the index pass's decoder is still here)."""
        if self.ctx is None:
            ctx = av.CodecContext.create(self.codec, "r")
            if self.extradata:
                ctx.extradata = self.extradata
            for name, value in self.fields.items():
                if value is not None:
                    setattr(ctx, name, value)
            ctx.thread_type, ctx.thread_count = "AUTO", threads
            self.ctx, self.position, self.ready = ctx, 0, {}

    def release(self) -> None:
        """Drop the decoder and what it holds (it is made again by ``rewind``)."""
        self.ctx, self.ready = None, {}

    def close(self) -> None:
        self.packets, self.ready, self.nbytes, self.ctx = [], {}, 0, None


def _seek(container: Any, stream: Any, ctx: Any, pts: int, seconds: Counter) -> None:
    """Seek to the key frame at or before ``pts`` and drop what the decoder holds (its time
    into ``seconds["seek"]``)."""
    t0 = time.perf_counter()
    container.seek(pts, stream=stream, backward=True, any_frame=False)
    if stream is not None and ctx is not stream.codec_context:
        ctx.flush_buffers()  # the container flushes its streams' own decoders only (a PacketSource its own)
    seconds["seek"] += time.perf_counter() - t0


class Tally:
    """What a clip decode counts: the frames out of the decoder (``frames``; frames libdav1d
    skipped never come out), and into ``seconds`` the time in the decoder for packets that gave
    a wanted frame (``useful``, by timestamp: ``wanted``) and for the others (``lead_in``)."""

    def __init__(self, wanted: set[int], seconds: Counter) -> None:
        self.frames, self.wanted, self.seconds = 0, wanted, seconds


def _decoded(container: Any, stream: Any, ctx: Any, tally: Tally,
             only: tuple[VideoIndex, frozenset[int]] | None = None, ready: dict[int, Any] | None = None):
    """Every frame the decoder produces from here on; the final empty packet flushes it.
    ``tally`` counts them, once per packet, and the decoder's seconds (`Tally`).
    ``only`` (index, frame numbers): the packets of other frames are dropped before the decoder.
    ``ready``: packet pts -> its frame, already decoded by this decoder (`PacketSource.ready`)."""
    for packet in container.demux(stream):
        if only is not None and packet.size:
            pts = packet.pts if packet.pts is not None else packet.dts
            if pts is not None and only[0].frame_at(pts) not in only[1]:
                continue
        if ready and packet.size and packet.pts in ready:
            tally.frames += 1
            yield ready.pop(packet.pts)
            continue
        t0 = time.perf_counter()
        frames = ctx.decode(packet if packet.size else None)
        spent = time.perf_counter() - t0
        tally.frames += len(frames)
        useful = any(f.pts in tally.wanted for f in frames)
        tally.seconds["useful" if useful else "lead_in"] += spent
        yield from frames
