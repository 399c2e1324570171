"""Loader trust (issue 23): a sampler handed to the loader under DDP is split by the loader's
ranks (or refused), never read whole on every rank; and a peek, ``next(iter(loader))``, never
costs the next pass a batch, on the torch, DALI and Ray loaders alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.errors import PipelineError
from mediapipe.loaders import sampling
from mediapipe.loaders.bucketing import DurationBucketSampler
from mediapipe.loaders.samplers import EpochBatchSampler, PlannedBatch
from tests.helpers import assert_same, collect, run_two_gloo_ranks, write_image_folder

# -- fixtures: the README's datasets, small ------------------------------------------------


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    return write_image_folder(tmp_path_factory.mktemp("trust-images"), 22, scale=0.2)


@pytest.fixture(scope="module")
def parquet_file(images, tmp_path_factory) -> Path:
    """22 JPEGs with labels in a Parquet file of row groups of 4 (the README's Parquet example)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    files = sorted(images.rglob("*.jpg"))
    table = pa.table({"image": pa.array([p.read_bytes() for p in files], pa.binary()),
                      "label": pa.array([i % 3 for i in range(len(files))], pa.int64())})
    path = tmp_path_factory.mktemp("trust-parquet") / "train.parquet"
    pq.write_table(table, path, row_group_size=4)
    return path


@pytest.fixture(scope="module")
def speech_manifest(tmp_path_factory) -> Path:
    """A NeMo manifest of 13 short speech-like WAV clips (the README's bucketing example)."""
    sf = pytest.importorskip("soundfile")
    root = tmp_path_factory.mktemp("trust-speech")
    rng = np.random.default_rng(5)
    rows = []
    for i in range(13):
        seconds = float(rng.uniform(0.2, 0.9))
        t = np.arange(int(seconds * 16000)) / 16000
        wave = 0.3 * np.sin(2 * np.pi * (180 + 40 * i) * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
        wave += 0.01 * rng.standard_normal(len(t))
        path = root / f"utt{i:02d}.wav"
        sf.write(path, wave.astype(np.float32), 16000)
        rows.append({"audio_filepath": str(path), "duration": len(t) / 16000, "text": f"clip {i}"})
    manifest = root / "manifest.json"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return manifest


def image_pipeline(source, batch_size: int = 4, seed: int = 0) -> mp.Pipeline:
    return mp.Pipeline(source=source, decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(16, scale=(0.3, 1.0)), A.HorizontalFlip()],
                       batch_size=batch_size, seed=seed, device="cpu")


# -- item 5: a sampler under two gloo ranks -------------------------------------------------

RANK_SCRIPT = r"""
import json, sys
from datetime import timedelta
import torch.distributed as dist
import mediapipe as mp
from mediapipe import augment as A
from mediapipe.errors import PipelineError
from mediapipe.loaders.samplers import EpochBatchSampler

parquet_path, manifest_path, image_root = sys.argv[1:4]

def image_pipe(source):
    return mp.Pipeline(source=source, decode={"image": mp.decoders.image()}, augment=[A.Resize((16, 16))],
                       batch_size=4, seed=0, device="cpu")

early = image_pipe(mp.loaders.folder(image_root)).loader()  # built before the process group exists
dist.init_process_group("gloo", timeout=timedelta(seconds=60))

def read(loader, epochs=2):
    out = {"len": len(loader), "epochs": []}
    for epoch in range(epochs):
        seen, steps = [], 0
        for batch in loader:
            valid = batch.get("valid")
            index = batch["index"] if valid is None else batch["index"][valid]
            seen += index.tolist()
            steps += 1
        out["epochs"].append({"seen": seen, "steps": steps})
    return out

def planned(loader):  # what a loader reads (the Ray loader's tasks come from this plan)
    return {"len": len(loader), "epochs": [{"seen": [int(i) for b in loader.sampler.batches()
                                                      for i in b.indices[: b.valid]],
                                            "steps": len(loader.sampler.batches())}]}

pq = mp.loaders.parquet(parquet_path, columns={"image": "image", "label": "label"})
nemo = mp.loaders.nemo(manifest_path)
audio = mp.Pipeline(source=nemo, decode={"audio": mp.decoders.audio(sample_rate=16000)}, batch_size=1, seed=0,
                    device="cpu")
runs = {
    "window_sampler": read(image_pipe(pq).loader(num_workers=1, sampler=pq.window_sampler(batch_size=4, window=2,
                                                                                         seed=0))),
    "duration_buckets": read(audio.loader(sampler=mp.loaders.DurationBucketSampler(
        mp.loaders.source_durations(nemo), max_duration=1.5, seed=0))),
    "epoch_sampler": read(image_pipe(pq).loader(sampler=EpochBatchSampler(len(pq), 4, seed=2))),
    "dali_window_sampler": read(image_pipe(pq).loader(backend="dali", sampler=pq.window_sampler(batch_size=4,
                                                                                               seed=0))),
    "ray_duration_buckets": planned(audio.loader(backend="ray", sampler=mp.loaders.DurationBucketSampler(
        mp.loaders.source_durations(nemo), max_duration=1.5, seed=0))),
}
errors = {}
try:
    image_pipe(pq).loader(sampler=pq.window_sampler(batch_size=4, rank=0, world_size=1))
except PipelineError as e:
    errors["explicit"] = str(e)
try:
    next(iter(early))
except PipelineError as e:
    errors["early"] = str(e)
out = {"rank": dist.get_rank(), "runs": runs, "errors": errors}
dist.barrier()
dist.destroy_process_group()
print("RESULT " + json.dumps(out))
"""


@pytest.mark.timeout(300)
def test_readme_samplers_under_two_gloo_ranks_read_each_sample_once_per_epoch(parquet_file, speech_manifest,
                                                                              images, tmp_path):
    pytest.importorskip("nvidia.dali")
    pytest.importorskip("ray")
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    ranks = run_two_gloo_ranks(script, str(parquet_file), str(speech_manifest), str(images))
    counts = {"window_sampler": 22, "duration_buckets": 13, "epoch_sampler": 22, "dali_window_sampler": 22,
              "ray_duration_buckets": 13}
    for name, count in counts.items():
        a, b = ranks[0]["runs"][name], ranks[1]["runs"][name]
        assert a["len"] == b["len"], name  # DDP steps together
        for ea, eb in zip(a["epochs"], b["epochs"], strict=True):
            assert ea["steps"] == eb["steps"] == a["len"], name
            assert sorted(ea["seen"] + eb["seen"]) == list(range(count)), name  # each sample once, not twice
    for r in ranks:
        explicit = r["errors"]["explicit"]
        assert "rank 0 of 1" in explicit and f"rank {r['rank']} of 2" in explicit
        assert f"rank {r['rank']} of 2" in r["errors"]["early"] and "init_process_group" in r["errors"]["early"]


# -- item 5: one rule in build_sampler, for each sampler type -------------------------------


class PlainSampler:
    """A user's sampler that does not say which rank's batches it plans."""

    def __init__(self, n: int) -> None:
        self.n, self.epoch, self.position = n, 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.position = epoch, 0

    def batches(self) -> list[PlannedBatch]:
        return [PlannedBatch(np.arange(i, min(i + 4, self.n)), min(4, self.n - i)) for i in range(0, self.n, 4)]

    def __len__(self) -> int:
        return len(self.batches())

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = state["epoch"], state["position"]


def test_a_sampler_without_ranks_is_given_the_loaders_and_an_explicit_one_must_agree(images):
    pipe = image_pipeline(mp.loaders.folder(images))
    n = len(pipe.source)
    unset = EpochBatchSampler(n, 4, seed=1)
    assert sampling.build_sampler(pipe, rank=1, world_size=2, sampler=unset) is unset
    assert (unset.rank, unset.world_size) == (1, 2)
    mine = [int(i) for b in unset.batches() for i in b.indices[: b.valid]]
    other = EpochBatchSampler(n, 4, seed=1, rank=0, world_size=2)
    assert sorted(mine + [int(i) for b in other.batches() for i in b.indices[: b.valid]]) == list(range(n))
    agreeing = EpochBatchSampler(n, 4, rank=1, world_size=2)
    assert sampling.build_sampler(pipe, rank=1, world_size=2, sampler=agreeing) is agreeing
    with pytest.raises(PipelineError, match=r"rank 0 of 2.*rank 1 of 2"):
        sampling.build_sampler(pipe, rank=1, world_size=2, sampler=EpochBatchSampler(n, 4, rank=0, world_size=2))
    with pytest.raises(PipelineError, match=r"PlainSampler.*rank 1 of 2"):
        sampling.build_sampler(pipe, rank=1, world_size=2, sampler=PlainSampler(n))
    plain = PlainSampler(n)  # one process: nothing to split, so a plain sampler is fine
    assert sampling.build_sampler(pipe, rank=0, world_size=1, sampler=plain) is plain


def test_duration_buckets_given_ranks_plan_again(images):
    durations = np.random.default_rng(3).uniform(0.5, 2.0, 40)
    sampler = DurationBucketSampler(durations, 4.0, num_buckets=3, seed=2)
    whole = sampler.batches()  # planned (and cached) as rank 0 of 1 before the loader gives it its ranks
    pipe = image_pipeline(mp.loaders.folder(images))
    sampling.build_sampler(pipe, rank=1, world_size=2, sampler=sampler)
    assert (sampler.rank, sampler.world_size) == (1, 2) and len(sampler) < len(whole)
    explicit = DurationBucketSampler(durations, 4.0, num_buckets=3, seed=2, rank=0, world_size=2)
    got = [int(i) for s in (sampler, explicit) for b in s.batches() for i in b.indices[: b.valid]]
    assert sorted(got) == list(range(40))
    with pytest.raises(PipelineError, match="rank 0 of 2"):
        sampling.build_sampler(pipe, rank=1, world_size=2, sampler=explicit)


def test_a_source_split_by_rank_wants_a_sampler_of_rank_0_of_1(images):
    source = mp.loaders.folder(images)
    source.split_by_rank = True  # this rank's part already: read whole
    pipe = image_pipeline(source)
    unset = EpochBatchSampler(len(source), 4)
    sampling.build_sampler(pipe, rank=1, world_size=2, sampler=unset)
    assert (unset.rank, unset.world_size) == (0, 1)
    with pytest.raises(PipelineError, match="rank 1 of 2"):
        sampling.build_sampler(pipe, rank=1, world_size=2, sampler=EpochBatchSampler(len(source), 4, rank=1,
                                                                                      world_size=2))


# -- item 15: a peek never costs a batch --------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_peek_then_a_pass_gives_the_whole_epoch(images, workers):
    pipe = image_pipeline(mp.loaders.folder(images))
    reference = collect(pipe.loader(num_workers=0))
    loader = pipe.loader(num_workers=workers)
    peek = collect([next(iter(loader))])
    assert_same(peek, reference[:1])
    assert loader.epoch == 0  # an abandoned pass does not advance the epoch
    assert_same(collect(loader), reference)  # from the first batch, not the second
    assert loader.epoch == 1  # a pass delivered to its end does
    epoch1 = pipe.loader(num_workers=0)
    epoch1.set_epoch(1)
    assert_same(collect(loader), collect(epoch1))


def test_a_pass_delivered_to_its_last_batch_advances_the_epoch_without_stop_iteration(images):
    pipe = image_pipeline(mp.loaders.folder(images))
    loader = pipe.loader(num_workers=0)
    epoch1 = pipe.loader(num_workers=0)
    epoch1.set_epoch(1)
    it = iter(loader)
    for _ in range(len(loader)):  # as zip(range(len(loader)), loader) does: StopIteration never raised
        next(it)
    assert_same(collect(loader), collect(epoch1))


def test_state_dict_mid_pass_still_resumes_and_load_state_dict_sets_the_next_pass(images):
    pipe = image_pipeline(mp.loaders.folder(images))
    reference = collect(pipe.loader(num_workers=0))
    loader = pipe.loader(num_workers=0)
    it = iter(loader)
    for _ in range(2):
        next(it)
    state = loader.state_dict()
    assert (state["sampler"]["epoch"], state["sampler"]["position"]) == (0, 2)  # the current pass's position
    resumed = pipe.loader(num_workers=0)
    resumed.load_state_dict(state)
    assert_same(collect(resumed), reference[2:])  # loaded: the next pass starts there
    loader.load_state_dict(state)
    again = iter(loader)
    assert_same(collect([next(again)]), reference[2:3])
    assert loader.state_dict()["sampler"]["position"] == 3
    assert_same(collect(loader), reference)  # the load was used by the pass before: this one starts afresh


def test_dali_a_peek_then_a_pass_gives_the_whole_epoch(images):
    pytest.importorskip("nvidia.dali")
    pipe = mp.Pipeline(source=mp.loaders.folder(images), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(24), A.HorizontalFlip(), A.Normalize()], batch_size=4, seed=3,
                       device="cpu")
    reference = collect(pipe.loader(backend="dali"))
    loader = pipe.loader(backend="dali")
    peek = collect([next(iter(loader))])
    assert_same(peek, reference[:1])
    assert loader.epoch == 0
    assert_same(collect(loader), reference)  # DALI's draws too: a fresh pipeline for the epoch's start
    assert loader.epoch == 1
    state_pass = iter(loader)
    next(state_pass)
    state = loader.state_dict()
    del state_pass
    resumed = pipe.loader(backend="dali")
    resumed.load_state_dict(state)
    fresh = pipe.loader(backend="dali")
    fresh.set_epoch(1)
    epoch1 = collect(fresh)
    assert len(epoch1) == len(reference)
    assert [b["index"].tolist() for b in resumed] == [b["index"].tolist() for b in epoch1[1:]]


@pytest.mark.timeout(180)
def test_ray_a_peek_then_a_pass_gives_the_whole_epoch(images):
    pytest.importorskip("ray")  # a Ray already running in this process is shared: the loader closes only its share
    pipe = image_pipeline(mp.loaders.folder(images))
    reference = collect(pipe.loader(num_workers=0))
    loader = pipe.loader(backend="ray", num_workers=1, timeout=60)
    try:
        assert_same(collect([next(iter(loader))]), reference[:1])
        assert loader.epoch == 0
        assert_same(collect(loader), reference)
        assert loader.epoch == 1
    finally:
        loader.close()
