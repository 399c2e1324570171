"""Audio kernels: padded batches (B, C, N) with per-sample valid lengths (B,), or one sample (C, N).

Every batch kernel keeps padding from leaking into valid samples or frames: reductions run
over the valid part only, and outputs are zero beyond the new lengths. Spectrograms pad
each sample's own end by reflection (as ``torch.stft(center=True)`` does for one sample),
so a sample's frames do not depend on what it was batched with.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import torch
import torchaudio.functional as TAF

# -- masks and lengths --------------------------------------------------------------------


def valid_mask(lengths: torch.Tensor, size: int) -> torch.Tensor:
    """bool (B, size): True where position < lengths[b]."""
    return torch.arange(size, device=lengths.device)[None, :] < lengths[:, None]


def zero_padding(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Zero ``x`` (B, ..., N) beyond each sample's length, on the last dim."""
    mask = valid_mask(lengths.to(x.device), x.shape[-1])
    return x * mask.reshape(x.shape[0], *(1,) * (x.ndim - 2), x.shape[-1]).to(x.dtype)


def frame_lengths(lengths: torch.Tensor, n_fft: int, hop_length: int, center: bool) -> torch.Tensor:
    """Frames of an STFT of each valid length: 1 + len // hop (centred), else 1 + (len - n_fft) // hop."""
    if center:
        return torch.where(lengths > 0, lengths // hop_length + 1, 0)
    return torch.clamp((lengths - n_fft) // hop_length + 1, min=0)


# -- waveform kernels ---------------------------------------------------------------------


def gain(x: torch.Tensor, db: torch.Tensor) -> torch.Tensor:
    """Multiply sample b by 10 ** (db[b] / 20). Padding stays zero."""
    factor = torch.pow(10.0, db.to(x.device, torch.float32) / 20.0)
    return x * factor.reshape(-1, *(1,) * (x.ndim - 1)).to(x.dtype)


def preemphasis(x: torch.Tensor, lengths: torch.Tensor, coef: float) -> torch.Tensor:
    """y[n] = x[n] - coef * x[n - 1], with x[-1] = 0 (torchaudio's border); zero past lengths."""
    y = x.clone()
    y[..., 1:] -= coef * x[..., :-1]
    return zero_padding(y, lengths)


def normalize(x: torch.Tensor, lengths: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std per sample over its valid samples and all channels; zero past lengths."""
    mask = valid_mask(lengths.to(x.device), x.shape[-1])[:, None, :].to(x.dtype)
    count = (lengths.to(x.device, x.dtype) * x.shape[1]).clamp(min=1).reshape(-1, 1, 1)
    mean = (x * mask).sum(dim=(1, 2), keepdim=True) / count
    var = (((x - mean) * mask) ** 2).sum(dim=(1, 2), keepdim=True) / count
    return (x - mean) * torch.rsqrt(var + eps) * mask


def pad_trim(x: torch.Tensor, lengths: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut or zero-pad the last dim to ``length``; lengths become min(lengths, length)."""
    n = x.shape[-1]
    y = x[..., :length] if n >= length else torch.nn.functional.pad(x, (0, length - n))
    return y.contiguous(), torch.clamp(lengths, max=length)


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash on int64 tensors holding values in [0, 2**32) (products stay < 2**63)."""
    mask = 0xFFFFFFFF
    x = x & mask
    x = ((x >> 16) ^ x) * 0x45D9F3B & mask
    x = ((x >> 16) ^ x) * 0x45D9F3B & mask
    x = ((x >> 16) ^ x) * 0x2C1B3C6D & mask
    return (x >> 16) ^ x


def counter_normal(keys: torch.Tensor, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Standard normal noise (B, *shape): element i of sample b is a pure function of (keys[b], i).

    Counter-based (hash of key and index, then Box-Muller), so a sample's noise is the same
    on any device, in any batch, with no per-sample generator launches.
    """
    count = math.prod(shape)
    idx = torch.arange(count, device=device, dtype=torch.int64)[None, :]
    k = keys.to(device, torch.int64)[:, None]
    k_lo, k_hi = k & 0xFFFFFFFF, (k >> 32) & 0xFFFFFFFF
    h1 = _hash32(_hash32(idx * 2 + (k_lo << 1)) ^ k_hi)
    h2 = _hash32(_hash32(idx * 2 + 1 + (k_lo << 1)) ^ (k_hi ^ 0x5BD1E995))
    u1 = (h1.to(torch.float64) + 1.0) / 4294967297.0  # (0, 1)
    u2 = h2.to(torch.float64) / 4294967296.0
    z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
    return z.to(torch.float32).reshape(keys.shape[0], *shape)


def signal_power(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean square (B,) over each sample's valid samples and channels."""
    count = (lengths.to(x.device, torch.float32) * x.shape[1]).clamp(min=1)
    return (zero_padding(x.float(), lengths) ** 2).sum(dim=tuple(range(1, x.ndim))) / count


def add_noise(x: torch.Tensor, lengths: torch.Tensor, noise: torch.Tensor, snr_db: torch.Tensor) -> torch.Tensor:
    """x + noise scaled so that 10 log10(P_x / P_noise) = snr_db[b] over the valid part; zero past lengths."""
    p_x = signal_power(x, lengths)
    p_n = signal_power(noise, lengths).clamp(min=1e-20)
    scale = torch.sqrt(p_x / (p_n * torch.pow(10.0, snr_db.to(x.device, torch.float32) / 10.0)))
    y = x + noise * scale.reshape(-1, *(1,) * (x.ndim - 1)).to(x.dtype)
    return zero_padding(y, lengths)


def resample(x: torch.Tensor, lengths: torch.Tensor, orig_freq: int, new_freq: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torchaudio's band-limited sinc resampling over the whole batch; lengths scale, rounded up."""
    if orig_freq == new_freq:
        return x, lengths
    y = TAF.resample(x, orig_freq, new_freq)
    g = math.gcd(orig_freq, new_freq)
    new_lengths = torch.div(lengths * (new_freq // g) + (orig_freq // g) - 1, orig_freq // g, rounding_mode="floor")
    return zero_padding(y, new_lengths), new_lengths


def speed(x: torch.Tensor, factor: float) -> torch.Tensor:
    """One sample (..., N) played ``factor`` times faster: resampled to N / factor samples (pitch moves too)."""
    if factor == 1.0:
        return x
    orig, new = _ratio(factor)
    return TAF.resample(x, orig, new)


@lru_cache(maxsize=64)
def _ratio(factor: float) -> tuple[int, int]:
    frac = __import__("fractions").Fraction(factor).limit_denominator(1000)
    return frac.numerator, frac.denominator


def nonsilent_region(x: torch.Tensor, cutoff_db: float, window: int, reference_power: float | None = None
                     ) -> tuple[int, int]:
    """(start, length) of the region of one sample (C, N) whose short-time power is above cutoff_db
    relative to the maximum (or ``reference_power``), as DALI's nonsilent_region; (0, 0) if none."""
    power = (x.float() ** 2).mean(dim=0)
    n = power.shape[-1]
    if n == 0:
        return 0, 0
    window = max(1, min(window, n))
    csum = torch.nn.functional.pad(torch.cumsum(power.double(), 0), (1, 0))
    # moving average over the window ending at each sample (a partial window at the start)
    idx = torch.arange(n)
    lo = torch.clamp(idx - window + 1, min=0)
    avg = (csum[idx + 1] - csum[lo]) / window
    ref = float(avg.max()) if reference_power is None else reference_power
    if ref <= 0:
        return 0, 0
    above = torch.nonzero(avg >= ref * 10.0 ** (cutoff_db / 10.0)).flatten()
    if above.numel() == 0:
        return 0, 0
    begin, end = int(above[0]) - window + 1, int(above[-1]) + 1
    begin = max(0, begin)
    return begin, end - begin


# -- features -----------------------------------------------------------------------------


WINDOWS: dict[str, Callable[[int], torch.Tensor]] = {  # window name -> the window of a length
    "hann": lambda n: torch.hann_window(n, periodic=True, dtype=torch.float32),
    "hamming": lambda n: torch.hamming_window(n, periodic=True, dtype=torch.float32),
    "rectangular": torch.ones,
}


@lru_cache(maxsize=16)
def _window(kind: str, win_length: int, n_fft: int, device: str) -> torch.Tensor:
    if kind not in WINDOWS:
        raise ValueError(f"window {kind!r}: expected one of {tuple(WINDOWS)}")
    w = WINDOWS[kind](win_length)
    if win_length < n_fft:  # centred in the FFT frame, as torch.stft does
        left = (n_fft - win_length) // 2
        w = torch.nn.functional.pad(w, (left, n_fft - win_length - left))
    return w.to(device)


def reflect_pad_each(x: torch.Tensor, lengths: torch.Tensor, pad: int) -> torch.Tensor:
    """(B, C, N) to (B, C, pad + N + pad): each sample reflected about its own first and last valid sample.

    What ``F.pad(mode="reflect")`` does to one unpadded sample; only the 2 * pad edge columns
    are gathered, so the cost is a copy of the batch. Expects zeros past each length.
    """
    b, c, n = x.shape
    out = torch.nn.functional.pad(x, (pad, pad))
    if pad == 0 or n == 0:
        return out
    j = torch.arange(pad, device=x.device)
    out[..., :pad] = x[..., 1 : pad + 1].flip(-1) if n > pad else x[..., (pad - j).clamp(max=n - 1)]
    last = (lengths.to(x.device) - 1).clamp(min=0)[:, None]  # (B, 1)
    src = (last - 1 - j[None, :]).abs()  # reflect about the last valid sample (and about 0 if short)
    src = torch.minimum(src, last).expand(b, pad)
    tail = torch.gather(x, 2, src[:, None, :].expand(b, c, pad))
    dst = (pad + last + 1 + j[None, :]).expand(b, pad)
    out.scatter_(2, dst[:, None, :].expand(b, c, pad), tail)
    return out


def _stft(x: torch.Tensor, lengths: torch.Tensor, n_fft: int, hop_length: int, win_length: int | None,
          window: str, center: bool, normalized: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Complex STFT (B*C, F, T) of (B, C, N), each sample reflect-padded at its own end so
    padding in the batch does not change its frames; and the frame lengths (B,)."""
    win_length = win_length or n_fft
    b, c, n = x.shape
    x = x.float()
    if center:
        pad = n_fft // 2
        x = reflect_pad_each(x, lengths, pad) if n > 0 else torch.nn.functional.pad(x, (pad, pad))
    # the window comes zero-padded to n_fft (centred, as torch.stft pads a shorter one)
    spec = torch.stft(x.reshape(b * c, -1), n_fft, hop_length, n_fft,
                      _window(window, win_length, n_fft, str(x.device)), center=False, normalized=normalized,
                      return_complex=True)
    return spec, frame_lengths(lengths.to(x.device), n_fft, hop_length, center)


def spectrogram(
    x: torch.Tensor,
    lengths: torch.Tensor,
    *,
    n_fft: int,
    hop_length: int,
    win_length: int | None = None,
    window: str = "hann",
    power: float | None = 2.0,
    center: bool = True,
    normalized: bool = False,
    zero_padding_frames: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """|STFT|**power of (B, C, N) to (B, C, n_fft // 2 + 1, T) and frame lengths (B,).

    Frames past a sample's length are zero (unless ``zero_padding_frames=False``: for callers
    that mask a smaller tensor later, such as the mel projection). ``power=None``: complex STFT.
    """
    b, c, _ = x.shape
    spec, frames = _stft(x, lengths, n_fft, hop_length, win_length, window, center, normalized)
    spec = spec.reshape(b, c, spec.shape[-2], spec.shape[-1])
    if power is not None:
        spec = torch.addcmul(spec.real.square(), spec.imag, spec.imag)  # |z|^2: no sqrt, one pass fewer
        if power != 2.0:
            spec = spec.pow(power / 2.0)
    if not zero_padding_frames:
        return spec, frames
    mask = valid_mask(frames, spec.shape[-1])[:, None, None, :]
    return spec * mask, frames


@lru_cache(maxsize=16)
def mel_filters(n_freqs: int, f_min: float, f_max: float, n_mels: int, sample_rate: int, norm: str | None,
                mel_scale: str, device: str) -> torch.Tensor:
    """(n_freqs, n_mels) triangular filters (torchaudio's melscale_fbanks), cached per device."""
    return TAF.melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate, norm, mel_scale).to(device)


@lru_cache(maxsize=16)
def mel_filters_paired(n_freqs: int, f_min: float, f_max: float, n_mels: int, sample_rate: int, norm: str | None,
                       mel_scale: str, device: str) -> torch.Tensor:
    """`mel_filters` with each row twice, (2 * n_freqs, n_mels): applied to an STFT's interleaved
    (real, imaginary) squares it sums |z|^2 = re^2 + im^2 and projects to mel in one matmul."""
    return mel_filters(n_freqs, f_min, f_max, n_mels, sample_rate, norm, mel_scale, device).repeat_interleave(2, 0)


def mel_power_spectrogram(x: torch.Tensor, lengths: torch.Tensor, paired_fbanks: torch.Tensor, *, n_fft: int,
                          hop_length: int, win_length: int | None = None, window: str = "hann",
                          center: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Mel power spectrogram (B, C, n_mels, T) of (B, C, N) and frame lengths (B,); T is that of the
    padded batch (1 + N // hop centred). Frames past a length hold no feature (zero on the CPU;
    callers mask the output).

    Equals ``mel_scale(spectrogram(x, power=2), fbanks)`` with one pass fewer: the STFT's
    (real, imaginary) pairs are squared in place and ``paired_fbanks`` (`mel_filters_paired`)
    adds each pair while projecting, instead of a separate |z|^2 tensor.

    On the CPU the work goes sample by sample, in blocks of `MEL_BLOCK_FRAMES` valid frames
    through buffers that stay in the core's cache: a whole-batch STFT would be fresh memory
    each batch, paid for in page faults. Padded frames are not computed at all.
    """
    if x.device.type == "cpu":
        return _mel_power_blocks(x, lengths, paired_fbanks, n_fft, hop_length, win_length, window, center)
    return _mel_power_whole(x, lengths, paired_fbanks, n_fft, hop_length, win_length, window, center)


def _mel_power_whole(x: torch.Tensor, lengths: torch.Tensor, paired_fbanks: torch.Tensor, n_fft: int,
                     hop_length: int, win_length: int | None, window: str, center: bool
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """`mel_power_spectrogram` in a few whole-batch kernels (on a GPU); padded frames hold garbage."""
    b, c, _ = x.shape
    spec, frames = _stft(x, lengths, n_fft, hop_length, win_length, window, center)  # (BC, F, T)
    pairs = torch.view_as_real(spec.transpose(-1, -2).contiguous())  # (BC, T, F, 2): no copy on the CPU
    pairs = pairs.square_().reshape(b * c, pairs.shape[1], -1)
    mel = torch.matmul(pairs, paired_fbanks).transpose(-1, -2)  # (BC, n_mels, T)
    return mel.reshape(b, c, mel.shape[-2], mel.shape[-1]), frames


MEL_BLOCK_FRAMES = 512  # 0.8 MB of windowed frames and 0.8 MB of spectrum: inside a 2 MB L2 with the rest


def _reflect_pad_row(out: torch.Tensor, x: torch.Tensor, length: int, pad: int) -> torch.Tensor:
    """``reflect_pad_each(x[None], [length], pad)[0]`` for one sample ``x`` (C, m), written into the
    head of ``out`` (C, >= m + 2 pad), a buffer reused from sample to sample."""
    m = x.shape[-1]
    out[:, pad : pad + m] = x
    j = torch.arange(pad)
    out[:, :pad] = x[:, 1 : pad + 1].flip(-1) if m > pad else x[:, (pad - j).clamp(max=m - 1)]
    last = max(length - 1, 0)  # reflect about the last valid sample (and about 0 if short)
    out[:, pad + last + 1 : 2 * pad + last + 1] = x[:, (last - 1 - j).abs().clamp(max=last)]
    return out[:, : m + 2 * pad]


def _mel_power_blocks(x: torch.Tensor, lengths: torch.Tensor, paired_fbanks: torch.Tensor, n_fft: int,
                      hop_length: int, win_length: int | None, window: str, center: bool
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """`mel_power_spectrogram` on the CPU: each sample's valid frames, a block at a time, through
    reused buffers (window multiply, real FFT, squares, projection: the ops ``torch.stft`` runs)."""
    win_length = win_length or n_fft
    b, c, n = x.shape
    x = x.float()
    lengths = lengths.to(torch.int64)
    frames = frame_lengths(lengths, n_fft, hop_length, center)
    total = n // hop_length + 1 if center else max(0, (n - n_fft) // hop_length + 1)
    n_mels = paired_fbanks.shape[1]
    out = torch.zeros(b, c, n_mels, total)
    w = _window(window, win_length, n_fft, "cpu")
    k = min(MEL_BLOCK_FRAMES, max(1, int(frames.max()) if b else 1))
    bins = n_fft // 2 + 1
    buffers = torch.empty(c * k * n_fft), torch.empty(c * k * bins, dtype=torch.complex64), torch.empty(c * k * n_mels)
    pad = n_fft // 2
    padded = torch.empty(c, n + 2 * pad) if center else None  # each sample in turn, reflect-padded
    for i, (length, count) in enumerate(zip(lengths.tolist(), frames.tolist())):
        if count <= 0:
            continue
        if center:  # the sample's own reflect padding, the columns `reflect_pad_each` gives its row
            signal = _reflect_pad_row(padded, x[i, :, : min(n, max(length, pad + 1))], length, pad)
        else:
            signal = x[i, :, :length]
        framed = signal.unfold(-1, n_fft, hop_length)  # (C, frames, n_fft): a view
        for t0 in range(0, count, k):
            t1 = min(count, t0 + k)
            j = t1 - t0  # contiguous (C, j, ...) views of the buffers' heads
            windowed, spec, mel = (buf[: c * j * d].view(c, j, d) for buf, d in zip(buffers, (n_fft, bins, n_mels)))
            torch.mul(framed[:, t0:t1], w, out=windowed)
            torch.fft.rfft(windowed, out=spec)
            pairs = torch.view_as_real(spec).square_().reshape(c, j, 2 * bins)
            torch.matmul(pairs, paired_fbanks, out=mel)
            out[i, :, :, t0:t1] = mel.transpose(-1, -2)
    return out, frames


def mel_scale(spec: torch.Tensor, fbanks: torch.Tensor) -> torch.Tensor:
    """(..., F, T) power spectrogram to (..., n_mels, T)."""
    return torch.matmul(spec.transpose(-1, -2), fbanks).transpose(-1, -2)


def amplitude_to_db(x: torch.Tensor, frames: torch.Tensor, *, multiplier: float = 10.0, amin: float = 1e-10,
                    top_db: float | None = None, pad_value: float = 0.0, inplace: bool = False) -> torch.Tensor:
    """multiplier * log10(max(x, amin)), floored at (per-sample max over valid frames) - top_db.

    Input (B, C, F, T) with frame lengths (B,); frames past a length are ``pad_value``.
    One new tensor, worked on in place (``inplace``: ``x`` itself, for a caller that made ``x``
    and drops it): this runs on every feature of every batch.
    """
    db = (x.clamp_(min=amin) if inplace else torch.clamp(x, min=amin)).log10_().mul_(multiplier)
    padded = ~valid_mask(frames.to(x.device), x.shape[-1])[:, None, None, :]
    if top_db is not None:  # all on ``db``, ours: -inf keeps padding out of the peak and under the floor
        peak = db.masked_fill_(padded, -math.inf).amax(dim=(1, 2, 3), keepdim=True)
        torch.maximum(db, peak - top_db, out=db)
    return db.masked_fill_(padded, pad_value)


@lru_cache(maxsize=16)
def dct_matrix(n_mfcc: int, n_mels: int, norm: str | None, device: str) -> torch.Tensor:
    """(n_mels, n_mfcc) DCT-II matrix (torchaudio's create_dct)."""
    return TAF.create_dct(n_mfcc, n_mels, norm).to(device)


def band_mask(size: int, starts: torch.Tensor, widths: torch.Tensor) -> torch.Tensor:
    """bool (B, size): True inside any band [starts[b, k], starts[b, k] + widths[b, k]); width 0 masks nothing."""
    pos = torch.arange(size, device=starts.device)[None, None, :]
    s, w = starts[..., None], widths[..., None]
    return ((pos >= s) & (pos < s + w)).any(dim=1)


def mask_along(x: torch.Tensor, dim: int, starts: torch.Tensor, widths: torch.Tensor, value: float) -> torch.Tensor:
    """Set bands [starts[b, k], starts[b, k] + widths[b, k]) of ``dim`` (-1 time, -2 frequency) to ``value``.

    ``starts`` and ``widths`` are (B, K); width 0 masks nothing. One broadcast, no loop over samples.
    """
    size = x.shape[dim]
    band = band_mask(size, starts.to(x.device), widths.to(x.device))
    shape = [x.shape[0]] + [1] * (x.ndim - 1)
    shape[dim] = size
    return x.masked_fill(band.reshape(shape), value)


def spec_augment(x: torch.Tensor, frames: torch.Tensor, freq: tuple[torch.Tensor, torch.Tensor],
                 time: tuple[torch.Tensor, torch.Tensor], value: float) -> torch.Tensor:
    """Frequency and time bands of (B, ..., F, T) features set to ``value`` in one pass.

    ``freq`` and ``time`` are (starts, widths), each (B, K), in bins and frames. Frames past
    ``frames[b]`` keep their value (the extractor's pad value), untouched by either kind of band.
    """
    b, n_freq, n_time = x.shape[0], x.shape[-2], x.shape[-1]
    in_freq = band_mask(n_freq, *(t.to(x.device) for t in freq))  # (B, F)
    in_time = band_mask(n_time, *(t.to(x.device) for t in time))  # (B, T)
    valid = valid_mask(frames.to(x.device), n_time)
    mask = (in_freq[:, :, None] | in_time[:, None, :]) & valid[:, None, :]  # (B, F, T)
    return x.masked_fill(mask.reshape(b, *(1,) * (x.ndim - 3), n_freq, n_time), value)
