"""Audio ops and features: against DALI's CPU operators and formulas, with padding in the batch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mediapipe import augment as A
from mediapipe.augment.functional import audio as F
from mediapipe.fields import FieldType
from mediapipe.rng import SampleRNG
from mediapipe.stages.collate import stack_params

SR = 16000
LENGTHS = (4000, 3217, 1600, 801)


def padded_batch(lengths=LENGTHS, channels: int = 1, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, list]:
    rng = np.random.default_rng(seed)
    xs = [rng.normal(0, 0.3, (channels, n)).astype(np.float32) for n in lengths]
    batch = torch.zeros(len(xs), channels, max(lengths))
    for i, x in enumerate(xs):
        batch[i, :, : x.shape[1]] = torch.from_numpy(x)
    return batch, torch.tensor(lengths), xs


def run(op, batch: torch.Tensor, lengths: torch.Tensor, first_index: int = 0) -> dict:
    """``op`` on the padded batch in the field "audio" (waveforms, or features for a features op)."""
    kind = "audio" if "audio" in op.kinds() else "features"
    op = op.bind({"audio": FieldType(kind, collate="pad"), "audio_lengths": FieldType("other")})
    params = stack_params([op.sample_params(SampleRNG(0, 0, first_index + i, 0), {"shape": tuple(batch.shape[1:])})
                           for i in range(batch.shape[0])])
    data = {"audio": batch, "audio_lengths": lengths}
    op.apply_fields(data, params)
    return data


def dali_features(xs: list[np.ndarray]) -> tuple:
    dali = pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn

    window = torch.hann_window(400, periodic=True).tolist()  # DALI's own Hann is offset by half a sample

    @dali.pipeline_def(batch_size=len(xs), num_threads=1, device_id=None)
    def pipe():
        a = fn.external_source(source=lambda: [x[0] for x in xs], batch=True)
        spec = fn.spectrogram(a, nfft=400, window_length=400, window_step=160, window_fn=window)
        mel = fn.mel_filter_bank(spec, sample_rate=SR, nfilter=80, normalize=False, mel_formula="htk")
        db = fn.to_decibels(mel, multiplier=10.0, reference=1.0, cutoff_db=-100.0)
        return spec, mel, db

    p = pipe()
    p.build()
    return tuple([np.asarray(out.at(i)) for i in range(len(xs))] for out in p.run())


def test_spectrogram_and_mel_match_dali_with_padding():
    batch, lengths, xs = padded_batch()
    spec_ref, mel_ref, db_ref = dali_features(xs)
    data = run(A.Spectrogram(n_fft=400, hop_length=160, out="spec"), batch, lengths)
    mel = run(A.MelSpectrogram(n_fft=400, hop_length=160, n_mels=80, sample_rate=SR, out="mel"), batch, lengths)
    logmel = run(A.LogMelSpectrogram(n_fft=400, hop_length=160, n_mels=80, sample_rate=SR), batch, lengths)
    frames = data["spec_lengths"]
    assert frames.tolist() == [n // 160 + 1 for n in LENGTHS] == mel["mel_lengths"].tolist()
    assert data["spec"].shape == (4, 1, 201, max(frames))
    for i in range(4):
        t = int(frames[i])
        assert spec_ref[i].shape == (201, t)
        np.testing.assert_allclose(data["spec"][i, 0, :, :t].numpy(), spec_ref[i], rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(mel["mel"][i, 0, :, :t].numpy(), mel_ref[i], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(logmel["audio"][i, 0, :, :t].numpy(), db_ref[i], atol=1e-3)
        assert data["spec"][i, :, :, t:].abs().max() == 0 if t < data["spec"].shape[-1] else True
        assert (logmel["audio"][i, :, :, t:] == 0).all()


def test_features_do_not_depend_on_padding():
    batch, lengths, xs = padded_batch(channels=2)
    op = A.MFCC(n_fft=400, hop_length=160, n_mels=40, n_mfcc=13, sample_rate=SR)
    together = run(op, batch, lengths)
    for i, x in enumerate(xs):
        alone = run(op, torch.from_numpy(x)[None], torch.tensor([x.shape[1]]), first_index=i)
        t = int(together["audio_lengths"][i])
        assert alone["audio_lengths"].item() == t
        torch.testing.assert_close(together["audio"][i, :, :, :t], alone["audio"][0], atol=1e-3, rtol=1e-4)


def test_mfcc_matches_the_formula():
    batch, lengths, xs = padded_batch(lengths=(4000,))
    out = run(A.MFCC(n_fft=400, hop_length=160, n_mels=40, n_mfcc=13, sample_rate=SR, top_db=None), batch, lengths)
    x = xs[0][0].astype(np.float64)
    # reference: reflect-pad, periodic Hann frames, |FFT|^2, HTK mel triangles, 10 log10, orthonormal DCT-II
    pad = np.pad(x, 200, mode="reflect")
    frames = np.stack([pad[t * 160 : t * 160 + 400] for t in range(len(x) // 160 + 1)])
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2  # (T, 201)
    hz = np.linspace(0, SR / 2, 201)
    mel_pts = np.linspace(0, 2595 * np.log10(1 + (SR / 2) / 700), 42)
    f_pts = 700 * (10 ** (mel_pts / 2595) - 1)
    fb = np.zeros((201, 40))
    for m in range(40):
        lo, c, hi = f_pts[m], f_pts[m + 1], f_pts[m + 2]
        fb[:, m] = np.maximum(0, np.minimum((hz - lo) / (c - lo), (hi - hz) / (hi - c)))
    db = 10 * np.log10(np.maximum(power @ fb, 1e-10))
    k, n = np.arange(13)[:, None], np.arange(40)[None, :]
    dct = np.cos(np.pi / 40 * (n + 0.5) * k) * np.sqrt(2 / 40)
    dct[0] /= np.sqrt(2)
    ref = dct @ db.T  # (13, T)
    np.testing.assert_allclose(out["audio"][0, 0].numpy(), ref, atol=2e-2, rtol=1e-3)


def test_amplitude_to_db_top_db_per_sample():
    spec = torch.tensor([[[[1.0, 1e-6, 5.0]]], [[[100.0, 1e-9, 0.0]]]])
    out = run(A.AmplitudeToDB(top_db=40.0), spec, torch.tensor([3, 2]))["audio"]
    assert torch.allclose(out[0, 0, 0], torch.tensor([0.0, 10 * math.log10(5) - 40, 10 * math.log10(5)]))
    assert torch.allclose(out[1, 0, 0], torch.tensor([20.0, -20.0, 0.0]))  # floor 20 - 40; padded frame 0


def test_specaugment_masks_counts_widths_and_padding():
    feats = torch.ones(6, 1, 80, 300)
    lengths = torch.tensor([300, 250, 120, 300, 40, 300])
    op = A.SpecAugment(freq_masks=(1, 2), freq_width=10, time_masks=(0, 3), time_width=30, value=-1.0)
    out = run(op, feats, lengths)["audio"]
    again = run(op, feats, lengths)["audio"]
    assert torch.equal(out, again)
    masked_any = 0
    for i in range(6):
        t = int(lengths[i])
        assert (out[i, :, :, t:] == 1).all()  # padded frames untouched
        freq_rows = (out[i, 0, :, :t] == -1).all(dim=1).sum().item()
        time_cols = (out[i, 0, :, :t] == -1).all(dim=0).sum().item()
        assert freq_rows <= 2 * 10 and time_cols <= 3 * 30
        masked_any += (out[i] == -1).any().item()
    assert masked_any >= 4
    assert not torch.equal(out[0], out[3])  # drawn per sample


def test_waveform_ops_respect_lengths():
    batch, lengths, _ = padded_batch(channels=2)
    gain = run(A.Gain(db=(6.0, 6.0)), batch, lengths)["audio"]
    assert torch.allclose(gain, batch * 10 ** (6 / 20))
    pre = run(A.PreEmphasis(coef=0.97), batch, lengths)["audio"]
    n = LENGTHS[2]
    assert torch.allclose(pre[2, :, 1:n], batch[2, :, 1:n] - 0.97 * batch[2, :, : n - 1])
    assert (pre[2, :, n:] == 0).all() and torch.equal(pre[2, :, 0], batch[2, :, 0])
    norm = run(A.AudioNormalize(), batch, lengths)["audio"]
    for i, m in enumerate(LENGTHS):
        v = norm[i, :, :m]
        assert abs(v.mean().item()) < 1e-5 and abs(v.std(unbiased=False).item() - 1) < 1e-3
        assert (norm[i, :, m:] == 0).all()
    data = run(A.PadTrim(length=2000), batch, lengths)
    assert data["audio"].shape == (4, 2, 2000) and data["audio_lengths"].tolist() == [2000, 2000, 1600, 801]
    data = run(A.PadTrim(length=5000), batch, lengths)
    assert data["audio"].shape == (4, 2, 5000) and data["audio_lengths"].tolist() == list(LENGTHS)


def test_resample_op_matches_torchaudio_per_sample():
    import torchaudio.functional as TAF

    batch, lengths, xs = padded_batch()
    data = run(A.Resample(orig_freq=16000, new_freq=8000), batch, lengths)
    assert data["audio_lengths"].tolist() == [math.ceil(n / 2) for n in LENGTHS]
    for i, x in enumerate(xs):
        alone = TAF.resample(torch.from_numpy(x), 16000, 8000)
        m = alone.shape[-1]
        assert int(data["audio_lengths"][i]) == m
        # away from the end (where the batch sees zero padding, and the sample alone sees its edge)
        torch.testing.assert_close(data["audio"][i, :, : m - 20], alone[:, : m - 20], atol=1e-5, rtol=1e-4)


def test_add_noise_snr_and_determinism():
    t = torch.arange(8000) / SR
    clean = (0.5 * torch.sin(2 * math.pi * 300 * t))[None, None].repeat(4, 1, 1)
    lengths = torch.tensor([8000, 8000, 6000, 4000])
    clean = F.zero_padding(clean, lengths)
    op = A.AddNoise(snr_db=(10.0, 20.0))
    noisy = run(op, clean, lengths)["audio"]
    assert torch.equal(noisy, run(op, clean, lengths)["audio"])
    for i in range(4):
        params = op.sample_params(SampleRNG(0, 0, i, 0), {})
        m = int(lengths[i])
        noise = noisy[i, :, :m] - clean[i, :, :m]
        snr = 10 * math.log10(clean[i, :, :m].pow(2).mean() / noise.pow(2).mean())
        assert abs(snr - params["snr_db"]) < 0.01 and 10 <= snr <= 20
        assert (noisy[i, :, m:] == 0).all()
    # the noise of a sample depends on its key only, not on its batch
    alone = run(op, clean[2:3], lengths[2:3], first_index=2)["audio"]
    torch.testing.assert_close(alone[0], noisy[2])
    white = F.counter_normal(torch.tensor([12345]), (200_000,), torch.device("cpu"))
    assert abs(white.mean().item()) < 0.01 and abs(white.std().item() - 1) < 0.01


def test_add_noise_from_files(tmp_path):
    from mediapipe.synthetic.audio import encode_audio

    rng = np.random.default_rng(1)
    encode_audio(tmp_path / "noise.flac", rng.normal(0, 0.1, 3000).astype(np.float32), SR)
    op = A.AddNoise(snr_db=(5.0, 5.0), noise=(str(tmp_path / "noise.flac"),), sample_rate=SR)
    assert op.placement() is A.Stage.SAMPLE
    x = torch.sin(torch.arange(10000) / 10.0)[None]
    params = op.sample_params(SampleRNG(0, 0, 0, 0), {"shape": (1, 10000)})
    data = {"audio": x}
    op.apply_fields(data, params)
    noise = data["audio"] - x
    snr = 10 * math.log10(x.pow(2).mean() / noise.pow(2).mean())
    assert abs(snr - 5.0) < 0.01 and data["audio"].shape == x.shape


def test_sample_stage_ops():
    x = torch.randn(2, 16000)
    crop = A.RandomTimeCrop(length=4000)
    p = crop.sample_params(SampleRNG(0, 0, 3, 0), {"shape": (2, 16000)})
    y = crop.apply(x, p)
    assert y.shape == (2, 4000) and torch.equal(y, x[:, p["start"] : p["start"] + 4000])
    assert crop.apply(x[:, :100], crop.sample_params(SampleRNG(0, 0, 3, 0), {"shape": (2, 100)})).shape == (2, 100)
    speed = A.SpeedPerturb(factors=(0.9, 1.1))
    for factor in (0.9, 1.1):
        out = speed.apply(x, {"factor": factor})
        assert abs(out.shape[-1] - 16000 / factor) <= 1
    seen = {speed.sample_params(SampleRNG(0, 0, i, 0), {})["factor"] for i in range(20)}
    assert seen == {0.9, 1.1}


def test_nonsilent_region_matches_dali():
    dali = pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn

    rng = np.random.default_rng(3)
    x = np.zeros(20000, np.float32)
    x[5000:12000] = rng.normal(0, 0.3, 7000)
    x[12000:] = rng.normal(0, 1e-5, 8000)  # far below -60 dB

    @dali.pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        a = fn.external_source(source=lambda: [x], batch=True)
        begin, length = fn.nonsilent_region(a, cutoff_db=-60.0, window_length=2048)
        return begin, length

    p = pipe()
    p.build()
    begin, length = (int(np.asarray(o.at(0))) for o in p.run())
    ours = F.nonsilent_region(torch.from_numpy(x)[None], -60.0, 2048)
    assert ours == (begin, length)
    trimmed = A.NonSilentRegion(cutoff_db=-60.0).apply(torch.from_numpy(x)[None], {})
    assert trimmed.shape == (1, length)
    silent = torch.zeros(1, 1000)
    assert torch.equal(A.NonSilentRegion().apply(silent, {}), silent)  # all silent: kept whole


def test_op_config_round_trip():
    from mediapipe.augment import op_from_config

    for op in (A.SpecAugment(freq_masks=(1, 3)), A.LogMelSpectrogram(n_mels=64), A.AddNoise(snr_db=(0, 10)),
               A.Gain(db=(-3, 3)), A.SpeedPerturb(factors=(0.9, 1.0, 1.1))):
        assert op_from_config(op.to_config()) == op


def test_fused_mel_and_specaugment_equal_their_unfused_forms():
    batch, lengths, _ = padded_batch(channels=2)
    bank = (201, 0.0, 8000.0, 80, SR, None, "htk", "cpu")
    spec, frames = F.spectrogram(batch, lengths, n_fft=400, hop_length=160, zero_padding_frames=False)
    mel, mel_frames = F.mel_power_spectrogram(batch, lengths, F.mel_filters_paired(*bank), n_fft=400, hop_length=160)
    assert torch.equal(frames, mel_frames) and mel.shape == (4, 2, 80, spec.shape[-1])
    valid = F.valid_mask(frames, mel.shape[-1])[:, None, None, :]  # padded frames hold no feature
    torch.testing.assert_close(mel * valid, F.mel_scale(spec, F.mel_filters(*bank)) * valid, rtol=1e-4, atol=1e-6)
    assert (mel.masked_select(~valid.expand_as(mel)) == 0).all()  # on the CPU: zero, never computed
    # SpecAugment in one pass against two band passes and a where that restores the padding
    gen = torch.Generator().manual_seed(0)
    feats, frames = torch.randn(6, 1, 80, 300, generator=gen), torch.tensor([300, 250, 120, 300, 40, 1])
    fs, fw = torch.randint(0, 70, (6, 2), generator=gen), torch.randint(0, 11, (6, 2), generator=gen)
    ts, tw = torch.randint(0, 290, (6, 3), generator=gen), torch.randint(0, 31, (6, 3), generator=gen)
    two_pass = F.mask_along(F.mask_along(feats, -2, fs, fw, -5.0), -1, ts, tw, -5.0)
    keep = F.valid_mask(frames, 300)[:, None, None, :]
    expected = torch.where(keep, two_pass, feats)
    out = F.spec_augment(feats, frames, (fs, fw), (ts, tw), -5.0)
    assert torch.equal(out, expected) and (out == -5.0).any() and not torch.equal(out, two_pass)


@pytest.mark.parametrize("center,win_length", [(True, None), (False, None), (True, 300)])
def test_mel_blocks_on_the_cpu_equal_the_whole_batch_kernels(monkeypatch, center, win_length):
    # several blocks per sample, samples shorter than the reflect pad, an empty one, two channels
    monkeypatch.setattr(F, "MEL_BLOCK_FRAMES", 7)
    batch, lengths, _ = padded_batch(lengths=(4000, 3217, 150, 0, 401), channels=2)
    fb = F.mel_filters_paired(201, 0.0, 8000.0, 40, SR, None, "htk", "cpu")
    args = (batch, lengths, fb, 400, 160, win_length, "hann", center)
    blocks, frames = F._mel_power_blocks(*args)
    whole, whole_frames = F._mel_power_whole(*args)
    assert torch.equal(frames, whole_frames) and blocks.shape == whole.shape
    valid = F.valid_mask(frames, whole.shape[-1])[:, None, None, :]
    torch.testing.assert_close(blocks, whole * valid, rtol=1e-5, atol=1e-5)
