"""Transcode one media file for training: images (Pillow), video and audio (PyAV).

Each function takes the input's bytes and returns ``(extension, bytes, meta)``, where
``meta`` is what samplers need without decoding (width/height, duration, fps, frames,
key frames, sample rate...). Output is deterministic: equal inputs and options give
equal bytes (bit-exact muxers, no timestamps), so a resumed conversion equals an
uninterrupted one.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from mediapipe.decoders.image import scalable_frame
from mediapipe.decoders.streams import main_stream
from mediapipe.encoder_logs import quiet_svt

VIDEO_CODECS = ("av1", "copy")
AUDIO_CODECS = ("flac", "opus", "copy")
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
_BITEXACT = {"fflags": "+bitexact"}  # no random ids or library versions in the container


@dataclass(frozen=True)
class TranscodeOptions:
    """How each kind of media is rewritten; None keeps the input's value.

    image_max_side: longest side in pixels after resizing (never upscaled).
    jpeg_quality: 1-95, for images that are re-encoded.
    video_codec: "av1" (SVT-AV1) or "copy" (keep the stream, no re-encode).
    video_max_height: rows after resizing (never upscaled); fps: output frame rate.
    keyframe_interval: frames between key frames (short GOPs make clip seeking cheap).
    crf, preset: SVT-AV1's quality (0-63, lower is better) and speed (0-13, higher is faster).
    keep_audio: keep a video's audio track (copied as is).
    audio_rate, audio_channels, audio_codec: for audio files ("flac", "opus" or "copy").
    reencode: re-encode images even when they could be copied byte for byte.
    """

    image_max_side: int | None = None
    jpeg_quality: int = 90
    video_codec: str = "av1"
    video_max_height: int | None = None
    fps: float | None = None
    keyframe_interval: int = 16
    crf: int = 35
    preset: int = 10
    keep_audio: bool = True
    audio_rate: int | None = None
    audio_channels: int | None = None
    audio_codec: str = "flac"
    reencode: bool = False

    def __post_init__(self) -> None:
        if self.video_codec not in VIDEO_CODECS:
            raise ValueError(f"video_codec={self.video_codec!r}: expected one of {VIDEO_CODECS}")
        if self.audio_codec not in AUDIO_CODECS:
            raise ValueError(f"audio_codec={self.audio_codec!r}: expected one of {AUDIO_CODECS}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality={self.jpeg_quality}: expected 1..100")
        if self.image_max_side is not None and self.image_max_side < 1:
            raise ValueError(f"image_max_side={self.image_max_side}: expected a positive int")
        if self.keyframe_interval < 1:
            raise ValueError(f"keyframe_interval={self.keyframe_interval}: expected >= 1")
        if self.audio_codec == "opus" and self.audio_rate is not None and self.audio_rate not in OPUS_RATES:
            raise ValueError(f"audio_rate={self.audio_rate}: Opus supports {OPUS_RATES}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class TranscodeError(ValueError):
    """An input could not be converted; the reason is the message."""


Transcoded = tuple[str, bytes, dict[str, Any]]  # (extension, bytes, what the sample record notes)


def transcode(data: bytes, kind: str, ext: str, options: TranscodeOptions) -> Transcoded:
    """Rewrite one input of ``kind`` ("image", "video", "audio") per ``options`` (`TRANSCODERS`)."""
    transcoder = TRANSCODERS.get(kind)
    if transcoder is None:
        raise TranscodeError(f"unknown media kind {kind!r} (extension {ext!r})")
    return transcoder(data, ext, options)


# -- images -------------------------------------------------------------------------------
def fit_size(width: int, height: int, max_side: int | None) -> tuple[int, int]:
    """(width, height) scaled down so that the longer side is at most ``max_side``."""
    if max_side is None or max(width, height) <= max_side:
        return width, height
    scale = max_side / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def check_jpeg(data: bytes) -> None:
    """Raise `TranscodeError` unless a JPEG decodes without a single libjpeg warning: a
    truncated file, a missing end marker, a bad Huffman table or damaged entropy-coded
    data. This is the loader's own test (libjpeg-turbo, strict). The scan is decoded in
    full at 1/8 scale, so every Huffman code is read while the inverse DCT and colour
    conversion cost almost nothing; a frame TurboJPEG cannot reduce (`scalable_frame`) at full scale."""
    import simplejpeg

    least = 1 if scalable_frame(data) else 0  # 1: the smallest scale TurboJPEG has
    try:
        simplejpeg.decode_jpeg(data, strict=True, min_height=least, min_width=least)
    except ValueError as err:
        raise TranscodeError(f"image: damaged JPEG ({err})") from err


def transcode_image(data: bytes, options: TranscodeOptions) -> tuple[str, bytes, dict[str, Any]]:
    """A JPEG that already fits (and needs no rotation) is copied byte for byte once it
    passes `check_jpeg`; anything else is decoded, EXIF-rotated, resized and re-encoded as
    JPEG without its EXIF data (16-bit grayscale keeps its high byte, see `to_8_bits`).
    A damaged JPEG is refused either way, never copied or re-encoded half grey, and one whose
    header declares more than its bytes can hold (`jpeg_claim_error`) before any decode. An RGB or
    grayscale JPEG is decoded once, strictly (`decode_jpeg_strict`): that decode is its check;
    so is the first picture of a multi-picture file (MPO), decoded in full as Pillow did. A
    lossless JPEG is re-encoded, never copied: a reduced decode of it (a loader's) corrupts memory."""
    from PIL import Image, ImageOps

    from mediapipe.decoders.image import jpeg_claim_error
    from mediapipe.decoders.image_pillow import SIXTEEN_BIT_MODES, to_8_bits

    try:
        with Image.open(io.BytesIO(data)) as im:
            orientation = im.getexif().get(0x0112, 1)
            width, height = im.size
            if orientation in (5, 6, 7, 8):
                width, height = height, width
            target = fit_size(width, height, options.image_max_side)
            stored = target if orientation not in (5, 6, 7, 8) else target[::-1]
            claim = jpeg_claim_error(data) if im.format in ("JPEG", "MPO") else None
            if claim is not None:  # weighed before any decode allocates what the header declares
                raise TranscodeError(f"image: {claim}")
            if (im.format == "JPEG" and orientation == 1 and target == (width, height) and not options.reencode
                    and scalable_frame(data)):
                check_jpeg(data)
                return "jpg", data, {"width": width, "height": height, "codec": "jpeg", "copied": True}
            comment = im.info.get("comment")
            icc = im.info.get("icc_profile")
            if im.format in ("JPEG", "MPO") and im.mode in ("RGB", "L"):
                # Pillow's draft took an MPO in full: so does this decode of its first picture
                out = decode_jpeg_strict(data, im.mode, im.size, stored if im.format == "JPEG" else im.size)
                if orientation in EXIF_TRANSPOSE:
                    out = out.transpose(Image.Transpose[EXIF_TRANSPOSE[orientation]])
            else:
                if im.format in ("JPEG", "MPO"):
                    check_jpeg(data)
                    if stored != im.size and im.mode == "YCbCr":
                        im.draft(im.mode, stored)  # DCT-domain downscale, as decode_jpeg_strict does
                out = ImageOps.exif_transpose(im)
                if out.mode in SIXTEEN_BIT_MODES:
                    out = to_8_bits(out)
                if out.mode not in ("RGB", "L"):
                    out = out.convert("RGB")
            if out.size != target:
                out = out.resize(target, Image.Resampling.LANCZOS)
            buf = io.BytesIO()
            out.save(buf, format="JPEG", quality=options.jpeg_quality, icc_profile=icc, comment=comment)
    except TranscodeError:
        raise
    except (OSError, ValueError, Image.DecompressionBombError) as err:
        raise TranscodeError(f"image: {err}") from err
    return "jpg", buf.getvalue(), {"width": target[0], "height": target[1], "codec": "jpeg", "copied": False}


def draft_scale(size: tuple[int, int], wanted: tuple[int, int]) -> int:
    """The DCT-domain reduction (1, 2, 4 or 8) that Pillow's ``draft`` picks for a JPEG of
    ``size`` to be resized to ``wanted``: the largest that leaves both sides at least as large."""
    ratio = min(size[0] // wanted[0], size[1] // wanted[1])
    return next(s for s in (8, 4, 2, 1) if ratio >= s)


def decode_jpeg_strict(data: bytes, mode: str, size: tuple[int, int], wanted: tuple[int, int]) -> Any:
    """An RGB or grayscale (``mode``) JPEG of ``size`` decoded by libjpeg-turbo in strict mode,
    as a Pillow image ("RGBX" sharing the decoded buffer, or "L"): the pixels Pillow's decoder
    gives, and the check `check_jpeg` makes, in one decode. Where the image is to be resized to
    ``wanted``, the inverse DCT runs at the scale Pillow's ``draft`` would pick (`draft_scale`), or
    at full scale where TurboJPEG would run it at another (`turbo_takes_scale`) or may not reduce
    it (`scalable_frame`)."""
    import simplejpeg
    from PIL import Image

    min_width = min_height = 0
    if wanted != size and scalable_frame(data):
        scale = draft_scale(size, wanted)
        if turbo_takes_scale(size, scale):
            min_width, min_height = -(-size[0] // scale), -(-size[1] // scale)
    raw = "L" if mode == "L" else "RGBX"  # Pillow keeps RGB as 4 bytes a pixel: RGBX is its layout
    try:
        pixels = simplejpeg.decode_jpeg(data, colorspace="GRAY" if raw == "L" else "RGBX", strict=True,
                                        min_width=min_width, min_height=min_height)
    except ValueError as err:
        raise TranscodeError(f"image: damaged JPEG ({err})") from err
    return Image.frombuffer(raw, (pixels.shape[1], pixels.shape[0]), pixels, "raw", raw, 0, 1)


def turbo_takes_scale(size: tuple[int, int], scale: int) -> bool:
    """Whether TurboJPEG, asked for at least 1/``scale`` of ``size``, decodes at 1/``scale``: it
    takes the largest M/8 whose image fits what is asked, and for a few-pixel image a larger M/8
    fits as well (3x3 asked for 2x2 is decoded at 3/8)."""
    reduced = [-(-side // scale) for side in size]
    return not any(all(-(-side * m // 8) <= r for side, r in zip(size, reduced)) for m in range(8 // scale + 1, 9))


# EXIF orientation -> the Image.Transpose that turns it upright, as ImageOps.exif_transpose has it
EXIF_TRANSPOSE = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE", 6: "ROTATE_270",
                  7: "TRANSVERSE", 8: "ROTATE_90"}


# -- video --------------------------------------------------------------------------------
def probe_video(data: bytes) -> dict[str, Any]:
    """Metadata of a video file from its packets (no decoding): size, fps, frames, key frames."""
    import av

    with av.open(io.BytesIO(data)) as container:
        stream = main_stream(container.streams.video)
        ctx = stream.codec_context
        rate = stream.average_rate or stream.guessed_rate or Fraction(0)
        pts, keys = [], []
        for packet in container.demux(stream):
            if packet.size == 0 or packet.pts is None:
                continue
            pts.append(packet.pts)
            keys.append(packet.pts) if packet.is_keyframe else None
        order = {p: i for i, p in enumerate(sorted(pts))}
        duration = len(pts) / float(rate) if rate else float((container.duration or 0) / av.time_base)
        meta = {"width": ctx.width, "height": ctx.height, "fps": round(float(rate), 6), "frames": len(pts),
                "duration": round(duration, 6), "keyframes": sorted(order[p] for p in keys),
                "codec": ctx.codec.canonical_name}
        if container.streams.audio:
            audio = main_stream(container.streams.audio).codec_context
            meta.update(audio_codec=audio.codec.canonical_name, sample_rate=audio.sample_rate)
        return meta


def even_fit(width: int, height: int, max_height: int | None) -> tuple[int, int]:
    """Size scaled to at most ``max_height`` rows, both sides even (4:2:0 needs even sizes)."""
    if max_height is not None and height > max_height:
        width, height = width * max_height / height, max_height
    return max(2, int(round(width / 2)) * 2), max(2, int(round(height / 2)) * 2)


def transcode_video(data: bytes, ext: str, options: TranscodeOptions) -> tuple[str, bytes, dict[str, Any]]:
    """Re-encode the main video stream (`main_stream`) as AV1 (SVT-AV1) in Matroska, or copy it."""
    import av

    try:
        if options.video_codec == "copy":
            if options.keep_audio:
                return ext, data, probe_video(data)  # the stream as it is, container and all
            out_data = _remux_video_only(data)
        else:
            out_data = _encode_av1(data, options)
        return "mkv", out_data, probe_video(out_data)
    except IndexError as err:
        raise TranscodeError("video: the file has no video stream") from err
    except (av.FFmpegError, OSError, ValueError) as err:
        raise TranscodeError(f"video: {err}") from err


def _remux_video_only(data: bytes) -> bytes:
    import av

    buf = io.BytesIO()
    with av.open(io.BytesIO(data)) as inp, av.open(buf, "w", format="matroska", options=_BITEXACT) as out:
        src = main_stream(inp.streams.video)
        dst = out.add_stream_from_template(src)
        for packet in inp.demux(src):
            if packet.dts is None:
                continue
            packet.stream = dst
            out.mux(packet)
    return buf.getvalue()


def _encode_av1(data: bytes, options: TranscodeOptions) -> bytes:
    import av

    buf = io.BytesIO()
    with quiet_svt(), av.open(io.BytesIO(data)) as inp, \
            av.open(buf, "w", format="matroska", options=_BITEXACT) as out:
        src = main_stream(inp.streams.video)
        src_audio = main_stream(inp.streams.audio) if options.keep_audio and inp.streams.audio else None
        src_rate = src.average_rate or src.guessed_rate or Fraction(25)
        rate = Fraction(options.fps).limit_denominator(1001) if options.fps else Fraction(src_rate)
        width, height = even_fit(src.codec_context.width, src.codec_context.height, options.video_max_height)
        dst = out.add_stream("libsvtav1", rate=rate)
        dst.width, dst.height, dst.pix_fmt = width, height, "yuv420p"
        dst.codec_context.gop_size = options.keyframe_interval
        dst.options = {"crf": str(options.crf), "preset": str(options.preset),
                       "svtav1-params": f"keyint={options.keyframe_interval}"}
        dst_audio = out.add_stream_from_template(src_audio) if src_audio is not None else None
        streams = [src] + ([src_audio] if src_audio is not None else [])
        emitted = 0
        last = None

        def emit_until(t: float, frame: av.VideoFrame) -> None:
            """Emit ``frame`` into every output slot whose time is before ``t`` (fps change)."""
            nonlocal emitted
            while emitted / rate < t - 1e-9:
                out_frame = frame.reformat(width=width, height=height, format="yuv420p")
                out_frame.pts, out_frame.time_base = emitted, 1 / rate
                out_frame.pict_type = av.video.frame.PictureType.NONE  # else the input's I-frames force key frames
                for packet in dst.encode(out_frame):
                    out.mux(packet)
                emitted += 1

        for packet in inp.demux(*streams):
            if packet.stream is src_audio:
                if packet.dts is not None:
                    packet.stream = dst_audio
                    out.mux(packet)
                continue
            for frame in packet.decode():
                t = float(frame.time) if frame.time is not None else emitted / float(rate)
                if last is not None:
                    emit_until(t, last[1])
                last = (t, frame)
        if last is None:
            raise TranscodeError("video: no frames decoded")
        emit_until(last[0] + 1 / float(src_rate), last[1])
        for packet in dst.encode(None):
            out.mux(packet)
    return buf.getvalue()


# -- audio --------------------------------------------------------------------------------
def probe_audio(data: bytes) -> dict[str, Any]:
    import av

    with av.open(io.BytesIO(data)) as container:
        stream = main_stream(container.streams.audio)
        ctx = stream.codec_context
        samples = 0
        for frame in container.decode(stream):
            samples += frame.samples
        rate = ctx.sample_rate
        return {"sample_rate": rate, "channels": ctx.channels, "num_samples": samples,
                "duration": round(samples / rate, 6) if rate else 0.0, "codec": ctx.codec.canonical_name}


def transcode_audio(data: bytes, ext: str, options: TranscodeOptions) -> tuple[str, bytes, dict[str, Any]]:
    """Resample/down-mix and encode as FLAC (lossless) or Opus (in Ogg), or copy as is."""
    import av

    try:
        if options.audio_codec == "copy":
            return ext, data, probe_audio(data)
        buf = io.BytesIO()
        fmt, codec, out_ext = ("flac", "flac", "flac") if options.audio_codec == "flac" else ("ogg", "libopus", "opus")
        with av.open(io.BytesIO(data)) as inp, av.open(buf, "w", format=fmt, options=_BITEXACT) as out:
            src = main_stream(inp.streams.audio)
            rate = options.audio_rate or src.codec_context.sample_rate
            if codec == "libopus" and rate not in OPUS_RATES:
                rate = 48000  # Opus runs at 48 kHz internally; other rates are resampled
            channels = options.audio_channels or src.codec_context.channels
            layout = {1: "mono", 2: "stereo"}.get(channels)
            if layout is None:
                raise TranscodeError(f"audio: {channels} channels; expected 1 or 2")
            dst = out.add_stream(codec, rate=rate, layout=layout)
            if codec == "flac":
                dst.format = "s16" if src.codec_context.format.bytes <= 2 else "s32"
            dst.codec_context.flags |= av.codec.context.Flags.bitexact
            resampler = av.AudioResampler(format=dst.format, layout=layout, rate=rate)
            for frame in inp.decode(src):
                frame.pts = None
                for piece in resampler.resample(frame):
                    for packet in dst.encode(piece):
                        out.mux(packet)
            for piece in resampler.resample(None):
                for packet in dst.encode(piece):
                    out.mux(packet)
            for packet in dst.encode(None):
                out.mux(packet)
        out_data = buf.getvalue()
        return out_ext, out_data, probe_audio(out_data)
    except IndexError as err:
        raise TranscodeError("audio: the file has no audio stream") from err
    except (av.FFmpegError, OSError) as err:
        raise TranscodeError(f"audio: {err}") from err


# media kind -> its transcoder (data, extension, options); an image's extension says nothing more
TRANSCODERS: dict[str, Callable[[bytes, str, TranscodeOptions], Transcoded]] = {
    "image": lambda data, ext, options: transcode_image(data, options),
    "video": transcode_video,
    "audio": transcode_audio,
}
