"""DALI lowerings of the audio ops: one channel, (N,) waveforms and (F, T) features in DALI
((1, ...) in our batches), as torchaudio computes them."""

from __future__ import annotations

from typing import Any

import numpy as np

from mediapipe.loaders.dali.context import FieldNode, LoweringContext, _copy


def _audio(ctx: LoweringContext, op: Any, layouts: tuple[str, ...] = ("N",)) -> FieldNode:
    (src,) = op.inputs  # an audio op reads one field (key=, or keys= of one)
    f = _copy(ctx.decoded(src))
    if f.kind != "audio" or f.layout not in layouts:
        raise NotImplementedError(f"{type(op).__name__}(key={src!r}) on a {f.kind} field laid out {f.layout}")
    return f


def _write_audio(ctx: LoweringContext, op: Any, f: FieldNode) -> None:
    ctx.fields[op.outputs[0]] = f


def lower_preemphasis(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    f.node = ctx.fn.preemphasis_filter(f.node, preemph_coeff=float(op.coef), border="zero")  # x[-1] = 0
    _write_audio(ctx, op, f)


def lower_resample(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    if op.orig_freq != op.new_freq:
        f.node = ctx.fn.audio_resample(f.node, in_rate=float(op.orig_freq), out_rate=float(op.new_freq))
    _write_audio(ctx, op, f)


def lower_nonsilent_region(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    begin, length = ctx.fn.nonsilent_region(f.node, cutoff_db=float(op.cutoff_db), window_length=int(op.window))
    f.node = ctx.fn.slice(f.node, begin, length, axes=[0])
    _write_audio(ctx, op, f)


def lower_pad_trim(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op, ("N", "FT"))
    axis = 0 if f.layout == "N" else 1  # the time axis, last in our layout
    f.node = ctx.fn.slice(f.node, start=[0], shape=[int(op.length)], axes=[axis],
                          out_of_bounds_policy="trim_to_shape")
    f.pad_to = int(op.length)  # the host pads to it; lengths keep the real sizes, as PadTrim's do
    _write_audio(ctx, op, f)


def lower_gain(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    factor = ctx.operand(ctx.drawn(op, f, "factor", lambda p: 10.0 ** (p["db"] / 20.0), np.float32))
    f.node = f.node * factor  # the torch backend's keyed gain
    _write_audio(ctx, op, f)


def lower_audio_normalize(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    # (x - mean) / sqrt(var + eps) over the utterance (population variance), as ours
    f.node = ctx.fn.normalize(f.node, axes=[0], epsilon=float(op.eps), ddof=0)
    _write_audio(ctx, op, f)


def lower_mfcc(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    _mel(op, ctx, f)
    _decibels(ctx, f, 10.0, op.amin, 0.0)
    f.node = ctx.fn.mfcc(f.node, axis=0, dct_type=2, n_mfcc=op.n_mfcc, normalize=op.dct_norm == "ortho")
    if op.dct_norm is None:  # torchaudio's unnormalised DCT-II is twice DALI's
        f.node = f.node * 2.0
    _write_audio(ctx, op, f)


def _window(op: Any) -> list[float]:
    import torch

    n = op.n_fft
    make = {"hann": torch.hann_window, "hamming": torch.hamming_window}.get(op.window)
    w = make(n, periodic=True) if make is not None else torch.ones(n)
    return [float(v) for v in w]


def _stft(op: Any, ctx: LoweringContext, f: FieldNode) -> None:
    f.node = ctx.fn.spectrogram(f.node, nfft=op.n_fft, window_length=op.n_fft, window_step=op.hop_length,
                                window_fn=_window(op), power=int(op.power), center_windows=bool(op.center),
                                reflect_padding=True, layout="ft")
    f.layout = "FT"


def _mel(op: Any, ctx: LoweringContext, f: FieldNode) -> None:
    _stft(op, ctx, f)
    f.node = ctx.fn.mel_filter_bank(f.node, sample_rate=float(op.sample_rate), nfilter=op.n_mels,
                                    freq_low=float(op.f_min), freq_high=float(op.f_max or op.sample_rate / 2),
                                    normalize=op.norm == "slaney", mel_formula=op.mel_scale)


def _decibels(ctx: LoweringContext, f: FieldNode, multiplier: float, amin: float, pad_value: float) -> None:
    # reference=1: absolute dB as torchaudio's (DALI's default, 0, would be each sample's peak)
    f.node = ctx.fn.to_decibels(f.node, multiplier=multiplier, reference=1.0,
                                cutoff_db=float(multiplier * np.log10(amin)))
    f.pad_value = pad_value


def lower_spectrogram(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    _stft(op, ctx, f)
    _write_audio(ctx, op, f)


def lower_mel_spectrogram(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    _mel(op, ctx, f)
    _write_audio(ctx, op, f)


def lower_log_mel_spectrogram(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op)
    _mel(op, ctx, f)
    _decibels(ctx, f, 10.0, op.amin, op.pad_value)
    _write_audio(ctx, op, f)


def lower_amplitude_to_db(op: Any, ctx: LoweringContext) -> None:
    f = _audio(ctx, op, ("FT",))
    _decibels(ctx, f, 10.0 if op.stype == "power" else 20.0, op.amin, op.pad_value)
    _write_audio(ctx, op, f)


def _stft_check(op: Any) -> str | None:
    if op.power not in (1, 2, 1.0, 2.0):
        return f"power={op.power} (DALI: 1 or 2)"
    if op.win_length not in (None, op.n_fft):
        return f"win_length={op.win_length} != n_fft (DALI's window spans the FFT)"
    if op.window not in ("hann", "hamming", "rectangular"):
        return f"window={op.window!r}"
    return None


def _mel_check(op: Any) -> str | None:
    if op.norm not in (None, "slaney") or op.mel_scale not in ("htk", "slaney"):
        return f"norm={op.norm!r}, mel_scale={op.mel_scale!r}"
    return _stft_check(op)


def _no_top_db(op: Any) -> str | None:
    return f"top_db={op.top_db} (DALI's to_decibels has no per-sample floor)" if op.top_db is not None else None
