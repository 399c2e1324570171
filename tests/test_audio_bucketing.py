"""DurationBucketSampler: budget, coverage, determinism, ranks, resume; durations from sources; a loader run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.loaders.bucketing import DurationBucketSampler, source_durations
from mediapipe.synthetic.audio import encode_audio, speech_like

DURATIONS = np.random.default_rng(0).uniform(2.0, 15.0, 1000)


def flat(batches) -> np.ndarray:
    return np.concatenate([b.indices[: b.valid] for b in batches])


def test_batches_within_budget_and_every_sample_once():
    s = DurationBucketSampler(DURATIONS, 60.0, seed=3, buffer_size=300, num_buckets=8)
    batches = s.batches()
    assert len(s) == len(batches) > 0
    for b in batches:
        assert b.valid == len(b.indices) >= 1
        assert DURATIONS[b.indices].sum() <= 60.0
    assert sorted(flat(batches).tolist()) == list(range(1000))
    assert s.padding_fraction() < 0.15  # buckets keep similar durations together
    sizes = {len(b.indices) for b in batches}
    assert len(sizes) > 3  # short clips, bigger batches


def test_same_seed_same_batches_other_seed_or_epoch_other_batches():
    def plan(seed, epoch=0):
        s = DurationBucketSampler(DURATIONS, 60.0, seed=seed)
        s.set_epoch(epoch)
        return [b.indices.tolist() for b in s.batches()]

    assert plan(1) == plan(1)
    assert plan(1) != plan(2)
    assert plan(1, epoch=0) != plan(1, epoch=1)


def test_max_batch_size_and_overlong_samples():
    d = np.array([1.0] * 50 + [100.0])
    with pytest.warns(UserWarning, match="longer than max_duration"):
        s = DurationBucketSampler(d, 10.0, max_batch_size=4, seed=0)
    batches = s.batches()
    assert max(len(b.indices) for b in batches) <= 4
    assert [b.indices.tolist() for b in batches if 50 in b.indices] == [[50]]
    assert sorted(flat(batches).tolist()) == list(range(51))


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_are_disjoint_cover_everything_and_agree_on_length(world_size):
    d = DURATIONS[:301]
    per_rank = [DurationBucketSampler(d, 45.0, seed=5, rank=r, world_size=world_size).batches()
                for r in range(world_size)]
    seen = [flat(b) for b in per_rank]
    everything = np.concatenate(seen)
    assert len(everything) == len(set(everything.tolist())) == 301
    assert len({len(b) for b in per_rank}) == 1  # DDP ranks step together
    for batches in per_rank:
        assert all(d[b.indices[: b.valid]].sum() <= 45.0 for b in batches)
    dropped = [DurationBucketSampler(d, 45.0, seed=5, rank=r, world_size=world_size, drop_last=True).batches()
               for r in range(world_size)]
    assert len({len(b) for b in dropped}) == 1
    assert not set(flat(dropped[0]).tolist()) & set(flat(dropped[1]).tolist())


def test_state_dict_resumes_and_refuses_a_foreign_checkpoint():
    s = DurationBucketSampler(DURATIONS, 60.0, seed=2)
    s.set_epoch(4)
    s.position = 7
    state = s.state_dict()
    assert json.loads(json.dumps(state)) == state  # positions and settings only
    t = DurationBucketSampler(DURATIONS, 60.0, seed=2)
    t.load_state_dict(state)
    assert (t.epoch, t.position) == (4, 7)
    assert [b.indices.tolist() for b in t.batches()] == [b.indices.tolist() for b in s.batches()]
    with pytest.raises(ValueError, match="max_duration"):
        DurationBucketSampler(DURATIONS, 30.0, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="world_size"):
        DurationBucketSampler(DURATIONS, 60.0, seed=2, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="unexpected keys"):
        t.load_state_dict({**state, "buffer": [1, 2]})


@pytest.fixture(scope="module")
def speech_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("speech")
    rng = np.random.default_rng(0)
    for i, seconds in enumerate(rng.uniform(0.3, 1.5, 10)):
        encode_audio(root / f"u{i:02d}.{'flac' if i % 2 else 'opus'}", speech_like(float(seconds), i), 16000)
    return root


def test_source_durations_from_headers_manifest_and_cache(speech_folder, tmp_path):
    source = mp.loaders.folder(speech_folder)
    cache = tmp_path / "durations.json"
    d = source_durations(source, cache=cache)
    assert cache.exists() and len(json.loads(cache.read_text())) == 10
    decoder = mp.decoders.audio().create()
    for i in range(10):
        blob = source.ref(i).blob("audio")
        assert d[i] == pytest.approx(decoder.probe(blob)["duration"])
        assert 0.3 <= d[i] <= 1.52
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"path": str(p), "duration": 1.0 + k}) + "\n"
                                for k, p in enumerate(sorted(speech_folder.iterdir()))))
    assert source_durations(mp.loaders.manifest(manifest)).tolist() == [1.0 + k for k in range(10)]


def test_loader_with_bucketing_sampler_and_features(speech_folder):
    source = mp.loaders.folder(speech_folder)
    pipe = mp.Pipeline(source=source, decode={"audio": mp.decoders.audio(sample_rate=16000, mono=True)},
                       augment=[A.Gain(db=(-3, 3)), A.LogMelSpectrogram(n_mels=40), A.SpecAugment()],
                       seed=1, device="cpu")
    durations = source_durations(source)
    sampler = DurationBucketSampler(durations, 3.0, seed=1, num_buckets=3)
    loader = pipe.loader(sampler=sampler)
    assert len(loader) == len(sampler.batches())
    seen = []
    for batch in loader:
        frames = batch["audio_lengths"]
        assert batch["audio"].shape[:3] == (len(frames), 1, 40) and batch["audio"].shape[3] == frames.max()
        seconds = durations[batch["index"].numpy()]
        assert seconds.sum() <= 3.0
        # header durations of Opus count its pre-skip: a few frames more than the decoded audio
        assert torch.all((frames - torch.from_numpy(np.round(seconds * 16000) // 160 + 1)).abs() <= 3)
        seen += batch["index"].tolist()
    assert sorted(seen) == list(range(10))
    assert sampler.epoch == 1  # a full pass advances the epoch


def test_loader_resume_mid_epoch_equals_an_uninterrupted_run(speech_folder):
    source = mp.loaders.folder(speech_folder)
    durations = source_durations(source)

    def make():
        pipe = mp.Pipeline(source=source, decode={"audio": mp.decoders.audio(sample_rate=16000, mono=True)},
                           augment=[A.SpeedPerturb(), A.NonSilentRegion(cutoff_db=-50.0),
                                    A.RandomTimeCrop(length=12000), A.AddNoise(snr_db=(10, 20))],
                           seed=4, device="cpu")
        return pipe.loader(sampler=DurationBucketSampler(durations, 2.5, seed=4, num_buckets=2))

    full = [(b["index"].tolist(), b["audio"].clone()) for b in make()]
    assert len(full) >= 3
    first = make()
    it = iter(first)
    next(it)
    state = first.state_dict()
    it.close()
    resumed = make()
    resumed.load_state_dict(state)
    rest = [(b["index"].tolist(), b["audio"]) for b in resumed]
    assert [r[0] for r in rest] == [f[0] for f in full[1:]]
    for (_, a), (_, b) in zip(rest, full[1:]):
        assert torch.equal(a, b)
    for _, audio in full:
        assert audio.shape[-1] <= 12000  # the sample-stage crop ran before the pad-collate


def test_pad_collate_writes_zeros_past_each_length_even_on_a_reused_buffer(monkeypatch):
    """A worker's recycled buffer holds an old batch: padding must be written, not assumed."""
    from mediapipe.stages import collate as collate_module

    monkeypatch.setattr(collate_module.memory, "empty", lambda shape, dtype: torch.full(shape, 7.0, dtype=dtype))
    waves = [torch.arange(1, 1 + 2 * n, dtype=torch.float32).reshape(2, n) for n in (5, 3, 8)]
    samples = [{"audio": waves[0]}, None, {"audio": waves[1]}, {"audio": waves[2]}]
    out = collate_module.collate(samples, {"audio": "pad"})
    assert out["audio"].shape == (4, 2, 8) and out["audio_lengths"].tolist() == [5, 0, 3, 8]
    for row, wave in zip(out["audio"][[0, 2, 3]], waves):
        n = wave.shape[-1]
        assert torch.equal(row[:, :n], wave) and not row[:, n:].any()
    assert not out["audio"][1].any()  # the failed sample is all zeros


@pytest.mark.parametrize("n, world_size", [(1, 2), (2, 4), (3, 8)])
def test_fewer_samples_than_ranks_pad_every_rank_to_one_batch(n, world_size):
    """As DistributedSampler pads: every rank yields one batch, each sample is valid on exactly one
    rank, and a rank without a sample gets a repeated one flagged invalid (it was a ValueError)."""
    d = np.linspace(3.0, 9.0, n)
    per_rank = [DurationBucketSampler(d, 45.0, seed=5, rank=r, world_size=world_size).batches()
                for r in range(world_size)]
    assert [len(b) for b in per_rank] == [1] * world_size
    valid = [int(i) for batches in per_rank for b in batches for i in b.indices[: b.valid]]
    assert sorted(valid) == list(range(n))
    assert sum(b.valid == 0 and len(b.indices) == 1 for batches in per_rank for b in batches) == world_size - n
    dropped = [DurationBucketSampler(d, 45.0, seed=5, rank=r, world_size=world_size, drop_last=True).batches()
               for r in range(world_size)]
    assert [len(b) for b in dropped] == [0] * world_size


def test_a_rank_without_a_sample_gets_a_flagged_batch_from_the_loader(speech_folder):
    source = mp.loaders.folder(speech_folder)
    durations = source_durations(source)[:1]
    pipe = mp.Pipeline(source=mp.loaders.folder(speech_folder), decode={"audio": mp.decoders.audio(sample_rate=16000)},
                       seed=1, device="cpu")
    seen = []
    for rank in range(2):
        sampler = DurationBucketSampler(durations, 30.0, seed=1, rank=rank, world_size=2)
        batches = list(pipe.loader(sampler=sampler, rank=rank, world_size=2, num_workers=0))
        assert len(batches) == 1
        seen.append(batches[0]["valid"].tolist())
    assert sorted(seen) == [[False], [True]]
