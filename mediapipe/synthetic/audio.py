"""Synthetic audio for the tests and the bench: speech-like clips (voiced syllables, bursts,
pauses) and a PyAV encoder that writes them in the format a file's extension names."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def speech_like(seconds: float, seed: int, sample_rate: int = 16000) -> np.ndarray:
    """float32 (samples,) in [-1, 1]: voiced syllables (a pitch contour with harmonics shaped by
    two moving formants), unvoiced bursts, pauses and a low noise floor."""
    rng = np.random.default_rng(seed)
    n = int(seconds * sample_rate)
    t = np.arange(n) / sample_rate
    out = np.zeros(n, np.float64)
    pos = 0.0
    while pos < seconds:
        syl = rng.uniform(0.12, 0.35)
        start, end = int(pos * sample_rate), min(n, int((pos + syl) * sample_rate))
        if end <= start:
            break
        tt = t[start:end] - pos
        env = np.sin(np.pi * tt / syl) ** 2
        if rng.random() < 0.8:  # voiced: harmonics of f0 weighted by two formant bumps
            f0 = rng.uniform(90, 220) * (1 + 0.1 * np.sin(2 * np.pi * rng.uniform(1, 4) * tt))
            phase = 2 * np.pi * np.cumsum(f0) / sample_rate
            f1, f2 = rng.uniform(300, 900), rng.uniform(900, 2500)
            sig = np.zeros_like(tt)
            for h in range(1, 25):
                fh = h * f0.mean()
                if fh > sample_rate / 2 - 500:
                    break
                amp = np.exp(-((fh - f1) / 200) ** 2) + 0.6 * np.exp(-((fh - f2) / 300) ** 2) + 0.02
                sig += amp * np.sin(h * phase)
        else:  # unvoiced: noise
            sig = rng.normal(0, 0.5, len(tt))
        out[start:end] += rng.uniform(0.15, 0.5) * env * sig / max(1e-9, np.abs(sig).max())
        pos += syl + (rng.uniform(0.2, 0.7) if rng.random() < 0.15 else rng.uniform(0.0, 0.06))
    out += rng.normal(0, 0.003, n)
    return np.clip(out, -1, 1).astype(np.float32)


CODECS = {  # extension -> (container format, codec, codec sample rate or None)
    "flac": ("flac", "flac", None), "wav": ("wav", "pcm_s16le", None), "opus": ("ogg", "libopus", 48000),
    "mp3": ("mp3", "libmp3lame", None), "m4a": ("ipod", "aac", None), "ogg": ("ogg", "vorbis", None),
    "mka": ("matroska", "aac", None), "webm": ("webm", "libopus", 48000),
}


def encode_audio(path: str | Path, x: np.ndarray, sample_rate: int, *, codec: str | None = None,
                 bit_rate: int | None = None) -> Path:
    """Write float (channels, samples) or (samples,) audio with PyAV; the format follows the extension
    (flac, wav, opus, mp3, m4a, ogg = Vorbis, mka = AAC in Matroska, webm = Opus) unless ``codec`` names an FFmpeg encoder (e.g. pcm_s24le)."""
    import av

    path = Path(path)
    x = np.atleast_2d(np.asarray(x, np.float32))
    fmt, default_codec, codec_rate = CODECS[path.suffix.lstrip(".").lower()]
    layout = {1: "mono", 2: "stereo"}[x.shape[0]]
    with av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream(codec or default_codec, rate=codec_rate or sample_rate, layout=layout)
        if bit_rate is not None:
            stream.bit_rate = bit_rate
        if stream.codec_context.name == "vorbis":
            stream.codec_context.options = {"strict": "experimental"}
        ctx = stream.codec_context
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(x), format="fltp", layout=layout)
        frame.sample_rate = sample_rate
        resampler = av.AudioResampler(format=ctx.format.name if ctx.format else "fltp", layout=layout,
                                      rate=ctx.sample_rate, frame_size=ctx.frame_size or None)
        for f in resampler.resample(frame) + resampler.resample(None):
            for packet in stream.encode(f):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path
