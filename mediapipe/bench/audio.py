"""The audio scenario of ``mediapipe bench``: speech-length clips to 80-bin log-mel with SpecAugment.

Data: 16 kHz mono speech-like clips of 2 to 15 s (formant-like harmonic tones under
syllable envelopes, pauses, a little noise; `mediapipe.synthetic.audio`) in FLAC and Opus. Runners yield
``(samples in batch, audio seconds in batch)`` per batch:

- `run_mediapipe`: mp.Pipeline + DurationBucketSampler + LogMelSpectrogram(80) + SpecAugment;
- `run_naive`: a torch DataLoader over PyAV decode, torchaudio features per sample, pad-collate;
- `run_dali_cpu`: DALI's CPU pipeline (decoders.audio, spectrogram, mel_filter_bank, to_decibels).

A small dataset is seen as one long epoch (``repeat=True``, as the image scenarios do), long
enough for the run's ``batches``: the torch loaders then start their workers once, as over a
real corpus, instead of every few batches (DALI's pipeline never restarts).

Importable without DALI; `run_dali_cpu` raises RuntimeError naming why it cannot run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mediapipe.synthetic.audio import CODECS, encode_audio, speech_like

SAMPLE_RATE = 16000
N_FFT, HOP, N_MELS = 400, 160, 80
MAX_BATCH_SECONDS = 200.0  # about 23 clips of 8.5 s (2 to 15 s)
DALI_FORMATS = ("flac", "wav", "ogg", "opus")  # what fn.decoders.audio reads (libsndfile): not MP3


# -- data ---------------------------------------------------------------------------------


def make_sample_audio(dest: Path, count: int, seed: int, formats: Sequence[str] = ("flac", "opus"),
                      progress: Any = None) -> list[Path]:
    """``count`` speech-like 16 kHz mono clips of 2 to 15 s, cycling through ``formats``; a
    ``manifest.jsonl`` beside them lists each path with its duration. Deterministic in ``seed``;
    files already there are kept."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    seconds = rng.uniform(2.0, 15.0, count)
    paths, rows = [], []
    for i in range(count):
        ext = formats[i % len(formats)]
        path = dest / f"clip{i:05d}.{ext}"
        if not path.exists():
            tmp = path.with_name(f".tmp-{path.name}")
            encode_audio(tmp, speech_like(float(seconds[i]), seed * 1_000_003 + i), SAMPLE_RATE)
            tmp.replace(path)
        paths.append(path)
        rows.append({"path": path.name, "duration": round(float(int(seconds[i] * SAMPLE_RATE)) / SAMPLE_RATE, 6)})
        if progress is not None:  # a bar with update(n), or a callable (done, total)
            progress.update(1) if hasattr(progress, "update") else progress(i + 1, count)
    with open(dest / "manifest.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return paths


def _clips(data: Path, formats: Sequence[str] | None = None) -> list[Path]:
    found = sorted(p for p in Path(data).iterdir() if p.suffix.lstrip(".") in CODECS and not p.name.startswith("."))
    if formats is not None:
        found = [p for p in found if p.suffix.lstrip(".") in formats]
    if not found:
        raise RuntimeError(f"no audio clips in {data}; make them with make_sample_audio")
    return found


# -- mediapipe ----------------------------------------------------------------------------


MAX_PASSES = 100


def passes_for(batches: int | None, per_pass: float, repeat: bool = True) -> int:
    """Passes over the dataset that make one epoch of at least ``batches`` batches (plus one pass of
    slack), given ``per_pass`` batches in one pass; 1 without ``repeat``."""
    if not repeat or not batches or per_pass <= 0:
        return 1
    return max(1, min(MAX_PASSES, int(np.ceil(batches / per_pass)) + 1))


def mediapipe_pipeline(data: Path, device: str = "cpu", seed: int = 0, batches: int | None = None,
                       repeat: bool = False) -> tuple[Any, Any]:
    """(pipeline, sampler): decode to 16 kHz mono, log-mel 80, SpecAugment, batched by duration.
    With ``repeat``, the dataset is repeated into one epoch of at least ``batches`` batches."""
    import mediapipe as mp
    from mediapipe import augment as A
    from mediapipe.bench.long_epoch import RepeatedSource
    from mediapipe.loaders.bucketing import DurationBucketSampler, source_durations

    manifest = Path(data) / "manifest.jsonl"
    source = mp.loaders.manifest(manifest) if manifest.exists() else mp.loaders.folder(data)
    times = passes_for(batches, float(source_durations(source).sum()) / MAX_BATCH_SECONDS, repeat)
    source = RepeatedSource(source, times) if times > 1 else source
    pipe = mp.Pipeline(
        source=source,
        decode={"audio": mp.decoders.audio(sample_rate=SAMPLE_RATE, mono=True)},
        augment=[A.LogMelSpectrogram(n_fft=N_FFT, hop_length=HOP, n_mels=N_MELS, sample_rate=SAMPLE_RATE),
                 A.SpecAugment(freq_masks=(1, 2), freq_width=27, time_masks=(1, 2), time_width=40)],
        seed=seed, device=device,
    )
    sampler = DurationBucketSampler(source_durations(source), MAX_BATCH_SECONDS, seed=seed, num_buckets=32,
                                    buffer_size=2000)
    return pipe, sampler


def run_mediapipe(data: Path, *, workers: int, device: str, batches: int, worker_type: str = "process",
                  repeat: bool = True) -> Iterator[tuple[int, float]]:
    """This library's loader, with process workers (its default) unless ``worker_type`` says threads."""
    pipe, sampler = mediapipe_pipeline(data, device, batches=batches, repeat=repeat)
    loader = pipe.loader(sampler=sampler, num_workers=workers, worker_type=worker_type)
    done = 0
    while done < batches:
        for batch in loader:
            index = batch["index"].cpu().numpy()
            yield len(index), float(sampler.durations[index].sum())
            done += 1
            if done >= batches:
                return


# Batches ready after an idle spell, which the harness drains untimed before a repetition: the
# loader's default prefetch (2 per worker) plus the one it holds ahead for the device.
run_mediapipe.buffered = lambda workers: 2 * max(1, workers) + 1  # type: ignore[attr-defined]


def padding_fraction(data: Path, seed: int = 0, batches: int | None = None) -> float:
    """Share of mediapipe's batches (time x batch) that is padding, from the sampler's plan:
    over one pass of the dataset, or with ``batches`` over the repeated epoch the bench runs."""
    _, sampler = mediapipe_pipeline(data, "cpu", seed, batches=batches, repeat=batches is not None)
    return sampler.padding_fraction()


# -- naive baseline -----------------------------------------------------------------------


class _NaiveDataset:
    """PyAV decode, av.AudioResampler to 16 kHz mono, torchaudio log-mel per sample."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self._mel = None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Any:
        import av
        import torch
        import torchaudio

        if self._mel is None:
            self._mel = torchaudio.transforms.MelSpectrogram(SAMPLE_RATE, n_fft=N_FFT, hop_length=HOP, n_mels=N_MELS)
        resampler = av.AudioResampler(format="fltp", layout="mono", rate=SAMPLE_RATE)
        with av.open(str(self.paths[i])) as container:
            frames = [f.to_ndarray() for fr in container.decode(audio=0) for f in resampler.resample(fr)]
        frames += [f.to_ndarray() for f in resampler.resample(None)]
        x = torch.from_numpy(np.concatenate(frames, axis=1))
        feats = torchaudio.transforms.AmplitudeToDB("power")(self._mel(x))
        feats = torchaudio.transforms.FrequencyMasking(27)(feats)
        feats = torchaudio.transforms.TimeMasking(40)(feats)
        return feats, x.shape[-1]


def _pad_collate(items: list) -> Any:
    import torch

    feats = torch.nn.utils.rnn.pad_sequence([f[0].transpose(0, 1) for f, _ in items], batch_first=True)
    return feats.transpose(1, 2), torch.tensor([n for _, n in items])


def run_naive(data: Path, *, workers: int, device: str, batches: int, batch_size: int = 32, repeat: bool = True
              ) -> Iterator[tuple[int, float]]:
    import torch

    from mediapipe.bench.long_epoch import Repeat

    clips = _clips(data)
    times = passes_for(batches, len(clips) / batch_size, repeat)
    dataset = Repeat(_NaiveDataset(clips), times) if times > 1 else _NaiveDataset(clips)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                         num_workers=workers, collate_fn=_pad_collate,
                                         generator=torch.Generator().manual_seed(0))
    done = 0
    while done < batches:
        for feats, samples in loader:
            feats = feats.to(device)
            yield int(samples.shape[0]), float(samples.sum()) / SAMPLE_RATE
            done += 1
            if done >= batches:
                return


# -- DALI ---------------------------------------------------------------------------------


def _dali_pipeline(data: Path, workers: int, batch_size: int, gpu: bool) -> Any:
    try:
        from nvidia.dali import fn, pipeline_def, types
    except ImportError as err:
        raise RuntimeError(f"DALI is not installed ({err})") from err
    files = [str(p) for p in _clips(data, DALI_FORMATS)]

    @pipeline_def(batch_size=batch_size, num_threads=max(1, workers), device_id=0 if gpu else None, seed=0)
    def pipe():
        encoded, _ = fn.readers.file(files=files, random_shuffle=True, name="reader")
        audio, _ = fn.decoders.audio(encoded, dtype=types.FLOAT, downmix=True, sample_rate=SAMPLE_RATE)
        lengths = audio.shape()
        if gpu:
            audio = audio.gpu()
        spec = fn.spectrogram(audio, nfft=N_FFT, window_length=N_FFT, window_step=HOP)
        mel = fn.mel_filter_bank(spec, sample_rate=SAMPLE_RATE, nfilter=N_MELS)
        db = fn.to_decibels(mel, multiplier=10.0, cutoff_db=-100.0)
        return fn.pad(db, axes=(1,)), lengths

    p = pipe()
    p.build()
    return p


def _run_dali(data: Path, workers: int, batches: int, batch_size: int, gpu: bool) -> Iterator[tuple[int, float]]:
    p = _dali_pipeline(data, workers, batch_size, gpu)  # here, so that a missing DALI raises at the call
    return _dali_batches(p, batches)


def _dali_batches(p: Any, batches: int) -> Iterator[tuple[int, float]]:
    for _ in range(batches):
        _, shapes = p.run()
        n = np.array([np.asarray(shapes.at(i))[0] for i in range(len(shapes))])
        yield len(n), float(n.sum()) / SAMPLE_RATE


def run_dali_cpu(data: Path, *, workers: int, device: str, batches: int, batch_size: int = 32
                 ) -> Iterator[tuple[int, float]]:
    """DALI's CPU audio pipeline: fn.decoders.audio (libsndfile: FLAC, Opus...), spectrogram, mel, dB.

    Fixed batches of ``batch_size`` in a shuffled order; ``workers`` is DALI's thread count."""
    return _run_dali(data, workers, batches, batch_size, gpu=False)


def run_dali_gpu(data: Path, *, workers: int, device: str, batches: int, batch_size: int = 32
                 ) -> Iterator[tuple[int, float]]:
    """As `run_dali_cpu`, with the features on the GPU (DALI decodes audio on the CPU only)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("run_dali_gpu needs a CUDA device; torch.cuda.is_available() is False")
    return _run_dali(data, workers, batches, batch_size, gpu=True)


RUNNERS = {"mediapipe": run_mediapipe, "naive": run_naive, "dali_cpu": run_dali_cpu, "dali_gpu": run_dali_gpu}
