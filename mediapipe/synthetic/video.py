"""Synthetic video for the tests, the GPU checks and the bench: frames of a slow pan and zoom
with the frame number stamped in, and a writer that encodes them (and optional audio) with PyAV."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.encoder_logs import quiet_svt


def counter_pattern(frame: np.ndarray, number: int, bits: int = 10) -> None:
    """Stamp ``number`` in binary as black/white blocks along the top-left edge (in place), so a
    decoded frame tells which frame it is even after lossy coding."""
    height, width = frame.shape[:2]
    block = max(4, min(height // 8, width // (bits + 2)))
    block -= block % 2
    for b in range(bits):
        value = 255 if (number >> b) & 1 else 0
        frame[:block, b * block : (b + 1) * block] = value


def read_counter(luma: np.ndarray, bits: int = 10) -> int:
    """The frame number `counter_pattern` stamped, read back from a decoded luma plane."""
    height, width = luma.shape[:2]
    block = max(4, min(height // 8, width // (bits + 2)))
    block -= block % 2
    number = 0
    for b in range(bits):
        cell = luma[block // 4 : block - block // 4, b * block + block // 4 : (b + 1) * block - block // 4]
        number |= int(cell.mean() > 128) << b
    return number


def render_frames(height: int, width: int, count: int, seed: int, counter: bool = True) -> Iterator[np.ndarray]:
    """RGB uint8 (height, width, 3) frames: a slow pan and zoom over a photographic-looking
    image (`mediapipe.synthetic.photo_like`), with the frame number stamped in a corner."""
    import torch
    import torch.nn.functional as F

    from mediapipe.synthetic import photo_like

    big_h, big_w = int(height * 1.5) + 2, int(width * 1.5) + 2
    base = torch.from_numpy(photo_like(big_h, big_w, seed)).permute(2, 0, 1)[None]
    rng = np.random.default_rng(seed)
    direction = rng.uniform(-1, 1, 2)
    for i in range(count):
        t = i / max(1, count - 1)
        scale = 1.0 - 0.3 * t  # zoom in over the clip
        ch = max(height // 2, min(big_h, int(big_h * (0.66 + 0.3 * scale))))
        cw = max(width // 2, min(big_w, int(ch * width / height)))
        cy = int((big_h - ch) * (0.5 + 0.45 * direction[0] * (t - 0.5)))
        cx = int((big_w - cw) * (0.5 + 0.45 * direction[1] * (t - 0.5)))
        crop = base[..., cy : cy + ch, cx : cx + cw]
        frame = F.interpolate(crop, size=(height, width), mode="bilinear", antialias=True, align_corners=False)
        out = frame[0].permute(1, 2, 0).contiguous().numpy()
        if counter:
            counter_pattern(out, i)
        yield out


AUDIO_CODECS = {".mp4": "aac", ".mkv": "flac", ".webm": "libopus"}  # what write_video puts beside the video


def write_video(path: Path, frames: Iterable[np.ndarray], *, fps: int = 24, codec: str = "libsvtav1", gop: int = 48,
                matrix: str = "bt601", range: str = "limited", pix_fmt: str = "yuv420p", crf: int = 35,
                preset: int = 12, options: dict[str, str] | None = None, times: Sequence[float] | None = None,
                audio: tuple[np.ndarray, int, float] | None = None) -> Path:
    """Encode RGB frames to ``path`` (container from the suffix; ``.ivf`` is AV1's raw format).

    ``matrix``/``range`` pick the RGB to YUV conversion and are written into the stream's
    colour signalling, so a decoder can undo them. ``gop``: frames between key frames;
    ``options`` override the encoder's (e.g. ``{"bf": "3"}`` for H.264 with B-frames).
    ``times``: each frame's time in seconds (millisecond steps; a variable frame rate), else
    i / fps. ``audio``: (float32 (C, N) samples, rate, start seconds on the file's timeline),
    encoded as AAC (MP4), FLAC (Matroska) or Opus (WebM) beside the video.
    """
    import av

    colorspace = {"bt601": 6, "bt709": 1, "bt2020": 9}[matrix]  # AVCOL_SPC_SMPTE170M, _BT709, _BT2020_NCL
    sws_space = {"bt601": "ITU601", "bt709": "ITU709", "bt2020": "BT2020"}[matrix]
    primaries = {"bt601": 6, "bt709": 1, "bt2020": 9}[matrix]
    transfer = {"bt601": 6, "bt709": 1, "bt2020": 14}[matrix]  # AVCOL_TRC_SMPTE170M, _BT709, _BT2020_10
    color_range = {"limited": 1, "full": 2}[range]
    fmt = "ivf" if path.suffix == ".ivf" else None
    with quiet_svt(), av.open(str(path), "w", format=fmt) as out:
        stream = None
        sound = None
        for i, rgb in enumerate(frames):
            if stream is None:
                stream = out.add_stream(codec, rate=fps)
                stream.height, stream.width = rgb.shape[:2]
                stream.pix_fmt = pix_fmt
                if times is not None:
                    stream.time_base = stream.codec_context.time_base = Fraction(1, 1000)
                ctx = stream.codec_context
                ctx.colorspace, ctx.color_range = colorspace, color_range
                ctx.color_primaries, ctx.color_trc = primaries, transfer
                if codec == "libsvtav1":
                    stream.options = {"preset": str(preset), "crf": str(crf),
                                      "svtav1-params": f"keyint={gop}:scd=0:lp=2"}
                else:
                    ctx.gop_size = gop
                    if codec == "libx264":
                        stream.options = {"preset": "ultrafast", "crf": "23"}
                    elif codec == "libvpx-vp9":
                        stream.options = {"deadline": "realtime", "cpu-used": "8", "crf": "35"}
                if options:
                    stream.options = {**stream.options, **options}
                if audio is not None:  # every stream exists before the first packet is written
                    sound = _audio_stream(out, path, audio[0].shape[0], audio[1])
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
            frame = frame.reformat(format=pix_fmt, dst_colorspace=sws_space,
                                   dst_color_range="JPEG" if range == "full" else "MPEG")
            if times is not None:
                frame.pts, frame.time_base = int(round(times[i] * 1000)), Fraction(1, 1000)
            for packet in stream.encode(frame):
                out.mux(packet)
        if stream is None:
            raise ValueError(f"write_video({path}): no frames")
        for packet in stream.encode():
            out.mux(packet)
        if sound is not None:
            _mux_audio(out, sound, *audio)
    return path


def _audio_stream(out: Any, path: Path, channels: int, rate: int) -> Any:
    codec = AUDIO_CODECS.get(path.suffix)
    if codec is None:
        raise ValueError(f"write_video({path}): no audio codec for {path.suffix} files")
    return out.add_stream(codec, rate=rate, layout={1: "mono", 2: "stereo"}[channels])


def _mux_audio(out: Any, stream: Any, samples: np.ndarray, rate: int, start: float) -> None:
    """Encode ``samples`` (float32 (C, N)) into ``stream`` of ``out``, starting at ``start`` seconds."""
    import av

    layout = {1: "mono", 2: "stereo"}[samples.shape[0]]
    codec = stream.codec_context.name
    fmt = {"aac": "fltp", "flac": "s16", "libopus": "flt"}.get(codec, "fltp")
    resampler = av.AudioResampler(format=fmt, layout=layout, rate=rate)
    first = int(round(start * rate))
    block = 960 if codec == "libopus" else 1024
    for at in range(0, samples.shape[1], block):
        piece = np.ascontiguousarray(samples[:, at : at + block], dtype=np.float32)
        frame = av.AudioFrame.from_ndarray(piece, format="fltp", layout=layout)
        frame.sample_rate, frame.pts, frame.time_base = rate, first + at, Fraction(1, rate)
        for converted in resampler.resample(frame):
            for packet in stream.encode(converted):
                out.mux(packet)
    for packet in stream.encode():
        out.mux(packet)
