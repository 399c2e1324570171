"""Ranks: every rank gets the same number of batches under every last_batch, each sample is read
by exactly one rank, per-batch draws differ by rank, and one sampler builder resolves it all."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.loaders.samplers import EpochBatchSampler

CASES = [(10, 4, 2), (21, 2, 5), (24, 3, 5), (7, 3, 4), (16, 4, 4), (9, 2, 1), (5, 5, 3), (13, 1, 4),
         (3, 4, 2), (1, 3, 1), (5, 8, 4)]  # (the last three: fewer samples than ranks)


@pytest.mark.parametrize("last_batch", ["partial", "drop", "pad"])
@pytest.mark.parametrize(("n", "world", "batch"), CASES)
def test_every_rank_gets_len_batches_and_every_sample_once(n, world, batch, last_batch):
    samplers = [EpochBatchSampler(n, batch, seed=3, rank=r, world_size=world, last_batch=last_batch)
                for r in range(world)]
    for s in samplers:
        s.set_epoch(2)
    planned = [s.batches() for s in samplers]
    assert len({len(p) for p in planned}) == 1  # equal counts: no rank waits in an all-reduce
    assert all(len(s) == len(p) for s, p in zip(samplers, planned))  # len() is what each rank gets
    assert len({tuple(len(b.indices) for b in p) for p in planned}) == 1  # and the same batch sizes
    real = [int(i) for p in planned for b in p for i in b.indices[: b.valid]]
    assert len(real) == len(set(real))  # no sample twice among the real ones
    if last_batch == "drop":
        assert all(b.valid == len(b.indices) == batch for p in planned for b in p)
        assert len(real) == world * ((n // world) // batch * batch)
    else:
        assert sorted(real) == list(range(n))  # every sample, once per epoch
        padding = sum(len(b.indices) - b.valid for p in planned for b in p)
        slots = -(-n // world)
        assert padding == world * (-(-slots // batch) * batch if last_batch == "pad" else slots) - n
    if last_batch == "pad":
        assert all(len(b.indices) == batch for p in planned for b in p)


@pytest.mark.parametrize(("n", "world", "max_duration"), [(10, 4, 3.0), (37, 3, 5.0), (50, 2, 2.5), (8, 8, 4.0)])
def test_duration_buckets_still_give_every_rank_the_same_count(n, world, max_duration):
    durations = np.random.default_rng(n).uniform(0.3, 2.0, n)
    samplers = [mp.loaders.DurationBucketSampler(durations, max_duration, num_buckets=4, seed=1, rank=r,
                                                 world_size=world) for r in range(world)]
    planned = [s.batches() for s in samplers]
    assert len({len(p) for p in planned}) == 1 and all(len(s) == len(p) for s, p in zip(samplers, planned))
    real = sorted(int(i) for p in planned for b in p for i in b.indices[: b.valid])
    assert real == list(range(n))
    assert all(s.may_pad for s in samplers) == (world > 1)


@pytest.fixture(scope="module")
def ten_images(image_folder, tmp_path_factory):
    path = tmp_path_factory.mktemp("ten") / "ten.jsonl"
    files = sorted(image_folder.rglob("*.jpg"))[:10]
    path.write_text("".join(json.dumps({"path": str(p), "label": i % 3}) + "\n" for i, p in enumerate(files)))
    return path


@pytest.mark.parametrize("last_batch", ["partial", "drop", "pad"])
def test_ten_samples_four_ranks_batch_two(ten_images, last_batch):
    """The case that hung DDP: ranks got 2, 2, 1, 1 batches under the default last_batch."""
    pipe = mp.Pipeline(mp.loaders.manifest(ten_images), {"image": mp.decoders.image()}, [A.Resize((16, 16))],
                       batch_size=2, seed=1, device="cpu")
    counts, lengths, real = [], [], []
    for rank in range(4):
        loader = pipe.loader(rank=rank, world_size=4, last_batch=last_batch)
        batches = list(loader)
        counts.append(len(batches))
        lengths.append(len(loader))
        mine = []
        for b in batches:
            assert ("valid" in b) == (last_batch != "drop")  # on every batch when padding can happen
            valid = b.get("valid", torch.ones(len(b["index"]), dtype=torch.bool))
            mine += b["index"][valid].tolist()
        assert loader.stats.samples == len(mine)  # padding is not counted as read samples
        real += mine
    assert counts == lengths == [{"partial": 2, "drop": 1, "pad": 2}[last_batch]] * 4
    assert sorted(real) == (list(range(10)) if last_batch != "drop" else sorted(real))
    assert len(real) == len(set(real)) == {"partial": 10, "drop": 8, "pad": 10}[last_batch]


def test_fewer_samples_than_ranks(ten_images):
    """3 samples, 4 ranks (a small validation set on many GPUs): every rank gets one batch, as
    torch's DistributedSampler gives; the rank without a sample of its own repeats another's,
    flagged invalid. It used to be a ValueError on every rank."""
    lines = ten_images.read_text().splitlines()[:3]
    three = ten_images.parent / "three.jsonl"
    three.write_text("\n".join(lines) + "\n")
    pipe = mp.Pipeline(mp.loaders.manifest(three), {"image": mp.decoders.image()}, [A.Resize((16, 16))],
                       batch_size=2, seed=1, device="cpu")
    real = []
    for rank in range(4):
        loader = pipe.loader(rank=rank, world_size=4, num_workers=0)
        (batch,) = list(loader)
        assert len(loader) == 1 and batch["image"].shape == (1, 3, 16, 16)
        assert batch["valid"].tolist() == [rank < 3]
        real += batch["index"][batch["valid"]].tolist()
    assert sorted(real) == [0, 1, 2]
    for rank in range(4):  # "drop": no rank has a whole batch, so none gets one, and the loader says so
        with pytest.warns(UserWarning, match=r"no batch .* 3 samples over 4 ranks: 0 per rank"):
            assert list(pipe.loader(rank=rank, world_size=4, last_batch="drop")) == []


@pytest.mark.parametrize("last_batch", ["partial", "drop", "pad"])
def test_shards_read_by_rank_give_every_rank_the_same_number_of_batches(image_folder, tmp_path, last_batch):
    """3 shards of 8 on 2 ranks: rank 0 reads 16 samples, rank 1 reads 8. Each loader used to plan
    its own part alone (4 batches and 2): DDP's all-reduce at step 3 waited for ever. Now every
    rank reads the largest part's slots (the smallest with "drop"), padding flagged invalid."""
    from mediapipe.dataset.convert import convert

    convert(image_folder, tmp_path / "shards", shard_size=8)
    whole = mp.loaders.shards(tmp_path / "shards")
    counts, lengths, real = [], [], []
    for rank in range(2):
        part = whole.for_rank(rank, 2)
        assert part.rank_samples == (16, 8)
        pipe = mp.Pipeline(part, {"image": mp.decoders.image()}, [A.Resize((16, 16))], batch_size=3, seed=1,
                           device="cpu")
        loader = pipe.loader(rank=rank, world_size=2, last_batch=last_batch)
        batches = list(loader)
        counts.append(len(batches))
        lengths.append(len(loader))
        for b in batches:
            assert ("valid" in b) == (last_batch != "drop")
            valid = b.get("valid", torch.ones(len(b["index"]), dtype=torch.bool))
            real += [part.ref(i).key for i in b["index"][valid].tolist()]
    assert counts == lengths == [{"partial": 6, "drop": 2, "pad": 6}[last_batch]] * 2
    assert len(real) == len(set(real)) == {"partial": 24, "drop": 12, "pad": 24}[last_batch]


# -- per-batch draws ------------------------------------------------------------------------
def _mix_pipeline(image_folder) -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()},
                       [A.Resize((16, 16)), A.MixUp(num_classes=3), A.CutMix(num_classes=3)],
                       batch_size=4, seed=2, device="cpu")


def test_per_batch_draws_differ_by_rank_and_repeat(image_folder):
    from mediapipe.rng import batch_rng
    from mediapipe.stages.batch_builder import BatchBuilder
    from mediapipe.stages.host_batch import BatchTask

    pipe = _mix_pipeline(image_folder)
    builder = BatchBuilder(pipe.plan)  # the batch ops' parameters stay in the host batch

    def draws(number: int, rank: int, world: int) -> tuple:
        params = builder(BatchTask(number, 1, np.arange(4), 4, rank=rank, world_size=world)).params
        return float(params[1]["lam"]), float(params[2]["lam"]), float(params[2]["center_x"])

    ranks = [draws(3, r, 4) for r in range(4)]
    assert len(set(ranks)) == 4  # every rank its own lambda and box at the same step
    assert ranks == [draws(3, r, 4) for r in range(4)]  # and the same again: keyed
    # one rank keeps the key it had: (seed, epoch, batch number, op)
    mixup = pipe.augment[1]
    assert draws(3, 0, 1)[0] == mixup.batch_params(batch_rng(2, 1, 3, 1), 4)["lam"]
    assert draws(3, 0, 1) != draws(3, 0, 2)  # rank 0 of 2 is not rank 0 of 1: global batch 6, not 3


def test_the_loader_passes_its_rank_to_the_batch_tasks(image_folder):
    pipe = _mix_pipeline(image_folder)
    loader = pipe.loader(rank=1, world_size=2, shuffle=False, num_workers=0)
    tasks = []
    builder = loader.builder
    loader.builder = lambda task: tasks.append(task) or builder(task)
    labels = [b["label"] for b in loader]
    assert [(t.rank, t.world_size) for t in tasks] == [(1, 2)] * len(labels)
    assert [t.draw_number for t in tasks] == [2 * i + 1 for i in range(len(labels))]


# -- one sampler builder --------------------------------------------------------------------
def test_build_sampler_resolves_drop_last_ranks_and_a_source_split_by_rank(image_folder, monkeypatch):
    from mediapipe.loaders import sampling

    pipe = _mix_pipeline(image_folder)
    s = sampling.build_sampler(pipe, rank=2, world_size=3, drop_last=True, last_batch="pad")
    assert (s.rank, s.world_size, s.last_batch) == (2, 3, "drop")
    s = sampling.build_sampler(pipe, drop_last=False, last_batch="pad")
    assert (s.rank, s.world_size, s.last_batch) == (0, 1, "pad")
    monkeypatch.setattr(sampling, "distributed_rank_and_size", lambda: (1, 4))
    s = sampling.build_sampler(pipe)
    assert (s.rank, s.world_size, s.last_batch) == (1, 4, "partial")
    pipe.source.split_by_rank = True  # the source is this rank's part already: read all of it
    s = sampling.build_sampler(pipe, rank=1, world_size=4)
    assert (s.rank, s.world_size) == (0, 1)
    ranks = sampling.resolve_ranks(pipe.source)
    assert ranks == sampling.Ranks(1, 4, split_by_source=True)  # per-batch draws still differ by rank
    given = EpochBatchSampler(len(pipe.source), 4)
    assert sampling.build_sampler(pipe, sampler=given) is given
    with pytest.raises(ValueError, match="last_batch"):
        sampling.build_sampler(pipe, last_batch="keep")
