"""Repeated augmentation (DeiT, torchvision's references/classification/sampler.py ``RASampler``):
``pipe.loader(repeated_augmentations=k)`` reads each sample k times per epoch, each repeat with its
own draws, spread over ranks as torchvision's sampler spreads them, with ``len()`` and resume
consistent. The oracle for the spread is torchvision's arithmetic, written out below on our
epoch's permutation (torchvision's reference sampler is a script of its repository, not of the
torchvision package)."""

from __future__ import annotations

import json
import math
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.errors import PipelineError
from mediapipe.loaders.samplers import RepeatedAugmentationSampler
from tests.helpers import assert_same, collect, run_two_gloo_ranks, state_after, write_image_folder

N = 7  # samples in the folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_image_folder(tmp_path_factory.mktemp("ra"), N, classes=2, scale=0.3)


def pipeline(root: Path, batch_size: int = 4) -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image()},
                       [A.RandomResizedCrop(24, scale=(0.2, 1.0)), A.HorizontalFlip(), A.ColorJitter(0.4, 0.4)],
                       batch_size=batch_size, seed=5, device="cpu")


def torchvision_rasampler_full(order: list[int], repetitions: int, num_replicas: int, rank: int) -> list[int]:
    """torchvision's RASampler before its cut to the dataset's length: the slots of ``rank``."""
    num_samples = int(math.ceil(len(order) * float(repetitions) / num_replicas))
    total_size = num_samples * num_replicas
    indices = [ele for ele in order for i in range(repetitions)]
    indices += indices[: (total_size - len(indices))]
    return indices[rank:total_size:num_replicas]


def torchvision_rasampler(order: list[int], repetitions: int, num_replicas: int, rank: int) -> list[int]:
    """torchvision's RASampler.__iter__ and __len__ on the permutation ``order`` (its code, as data)."""
    num_samples = int(math.ceil(len(order) * float(repetitions) / num_replicas))
    total_size = num_samples * num_replicas
    num_selected_samples = int(math.floor(len(order) // 256 * 256 / num_replicas))
    indices = [ele for ele in order for i in range(repetitions)]
    indices += indices[: (total_size - len(indices))]
    assert len(indices) == total_size
    indices = indices[rank:total_size:num_replicas]
    assert len(indices) == num_samples
    return indices[:num_selected_samples]


def sample_sequence(sampler: RepeatedAugmentationSampler) -> list[int]:
    return [int(i) % sampler.num_samples for b in sampler.batches() for i in b.indices[: b.valid]]


# -- the spread over ranks, against torchvision's arithmetic ----------------------------------------
@pytest.mark.parametrize(("n", "k", "world"), [(10, 3, 1), (10, 3, 2), (7, 3, 4), (5, 2, 3), (600, 4, 3), (300, 3, 8)])
def test_each_rank_reads_what_torchvisions_rasampler_gives_it(n, k, world):
    for rank in range(world):
        ours = RepeatedAugmentationSampler(n, 8, repeats=k, seed=1, rank=rank, world_size=world)
        theirs = torchvision_rasampler_full(ours.order().tolist(), k, world, rank)
        assert sample_sequence(ours) == theirs and len(theirs) == math.ceil(n * k / world)  # every repeat read
        assert len(ours) == math.ceil(len(theirs) / 8)
        if n >= 256:  # torchvision's own epoch: its first floor(N // 256 * 256 / W) slots
            short = RepeatedAugmentationSampler(n, 8, repeats=k, epoch_length="dataset", seed=1, rank=rank,
                                                world_size=world)
            cut = torchvision_rasampler(ours.order().tolist(), k, world, rank)
            assert sample_sequence(short) == cut and len(cut) == n // 256 * 256 // world
            assert len(short) == math.ceil(len(cut) / 8)


def test_repeats_of_a_sample_go_to_different_ranks_and_each_sample_k_times_per_epoch():
    n, k, world = 12, 3, 3
    per_rank = [RepeatedAugmentationSampler(n, 4, repeats=k, seed=2, rank=r, world_size=world) for r in range(world)]
    where = {}
    for rank, sampler in enumerate(per_rank):
        for b in sampler.batches():
            for index in b.indices[: b.valid].tolist():
                where.setdefault(index % n, []).append(rank)
    assert all(sorted(ranks) == [0, 1, 2] for ranks in where.values()) and len(where) == n
    draw_indices = [int(i) for s in per_rank for b in s.batches() for i in b.indices]
    assert len(set(draw_indices)) == n * k  # each repeat its own draw index


def test_drop_and_pad_keep_every_rank_in_step():
    drop = [RepeatedAugmentationSampler(7, 4, repeats=3, rank=r, world_size=2, last_batch="drop") for r in (0, 1)]
    assert [len(s) for s in drop] == [2, 2] and all(b.valid == 4 for s in drop for b in s.batches())
    assert drop[0].samples_per_rank() == 10  # floor(21 / 2)
    pad = [RepeatedAugmentationSampler(7, 4, repeats=3, rank=r, world_size=2, last_batch="pad") for r in (0, 1)]
    assert [len(s) for s in pad] == [3, 3] and pad[0].may_pad
    assert [b.valid for b in pad[1].batches()] == [4, 4, 3]  # 11 slots: the last batch filled, flagged
    partial = RepeatedAugmentationSampler(7, 4, repeats=3, rank=1, world_size=2)
    assert not partial.may_pad and [b.valid for b in partial.batches()] == [4, 4, 3]


def test_torchvisions_epoch_needs_256_samples():
    with pytest.raises(ValueError, match="epoch_length='dataset'.*256"):
        RepeatedAugmentationSampler(100, 8, repeats=3, epoch_length="dataset")
    for bad, match in [({"repeats": 0}, "repeats=0"), ({"repeats": 2.0}, "repeats=2.0"),
                       ({"epoch_length": "short"}, "epoch_length")]:
        with pytest.raises(ValueError, match=match):
            RepeatedAugmentationSampler(10, 2, **bad)


# -- through the loader: counts, distinct repeats, resume ---------------------------------------------
def test_the_loader_reads_each_sample_k_times_with_a_draw_of_its_own(folder):
    pipe = pipeline(folder)
    loader = pipe.loader(num_workers=0, repeated_augmentations=3)
    assert len(loader) == math.ceil(N * 3 / 4)
    batches = collect(loader)
    assert len(batches) == len(loader)
    index = torch.cat([b["index"] for b in batches])
    assert Counter((index % N).tolist()) == {i: 3 for i in range(N)}
    images = torch.cat([b["image"] for b in batches])
    for i in range(N):
        repeats = images[index % N == i]
        assert all(not torch.equal(repeats[a], repeats[b]) for a in range(3) for b in range(a + 1, 3)), i
    labels = torch.cat([b["label"] for b in batches])
    truth = torch.tensor([pipe.source.ref(i).label for i in range(N)])
    assert torch.equal(labels, truth[index % N])
    # the repeats' epoch is a new one each epoch, and 1 repeat is the plain loader
    assert not torch.equal(torch.cat([b["index"] for b in collect(loader)]), index)
    assert_same(collect(pipe.loader(num_workers=0)), collect(pipe.loader(num_workers=0, repeated_augmentations=1)))


def test_the_same_batches_with_workers_and_after_a_resume(folder):
    pipe = pipeline(folder)
    whole = collect(pipe.loader(num_workers=0, repeated_augmentations=2))
    assert_same(whole, collect(pipe.loader(num_workers=2, repeated_augmentations=2)))
    state = state_after(pipe.loader(num_workers=0, repeated_augmentations=2), 2)
    assert state["sampler"]["repeats"] == 2 and state["sampler"]["position"] == 2
    resumed = pipe.loader(num_workers=0, repeated_augmentations=2)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    assert_same(whole[2:], collect(resumed))
    other = pipe.loader(num_workers=0, repeated_augmentations=3)
    with pytest.raises(ValueError, match="repeats=2, this run repeats=3"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="repeats=None"):
        other.load_state_dict(state_after(pipe.loader(num_workers=0), 1))


def test_a_sampler_of_ones_own_and_bad_values(folder):
    pipe = pipeline(folder)
    sampler = RepeatedAugmentationSampler(N, 4, repeats=2, seed=pipe.seed)
    assert_same(collect(pipe.loader(num_workers=0, sampler=sampler)),
                collect(pipe.loader(num_workers=0, repeated_augmentations=2)))
    with pytest.raises(PipelineError, match="give one of them"):
        pipe.loader(sampler=RepeatedAugmentationSampler(N, 4), repeated_augmentations=2)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="repeated_augmentations"):
            pipe.loader(repeated_augmentations=bad)


def test_the_dali_backend_reads_the_same_repeats(folder):
    pytest.importorskip("nvidia.dali")
    pipe = pipeline(folder)
    dali = collect(pipe.loader(backend="dali", repeated_augmentations=3, rng="keyed"))
    torch_ = collect(pipe.loader(num_workers=0, repeated_augmentations=3))
    assert len(dali) == len(torch_) == math.ceil(N * 3 / 4)
    for a, b in zip(dali, torch_):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["label"], b["label"])
        assert a["image"].shape == b["image"].shape


RANKS = textwrap.dedent("""
    import json, sys
    import torch.distributed as dist
    import mediapipe as mp
    from mediapipe import augment as A

    dist.init_process_group("gloo")
    pipe = mp.Pipeline(mp.loaders.folder(sys.argv[1]), {"image": mp.decoders.image()},
                       [A.RandomResizedCrop(24), A.HorizontalFlip()], batch_size=3, seed=5, device="cpu")
    loader = pipe.loader(num_workers=0, repeated_augmentations=3)  # ranks from the process group
    out = {"rank": dist.get_rank(), "len": len(loader), "epochs": []}
    for epoch in range(2):
        loader.set_epoch(epoch)
        out["epochs"].append([[int(i) for i in b["index"]] + [float(b["image"].float().mean())] for b in loader])
    print("RESULT " + json.dumps(out))
    dist.destroy_process_group()
""")


def test_two_gloo_ranks_share_the_repeats_as_torchvisions_sampler_does(folder, tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    results = run_two_gloo_ranks(script, str(folder))
    per_rank = math.ceil(N * 3 / 2)  # 11: 21 repeats and one wrapped slot
    assert [r["len"] for r in results] == [math.ceil(per_rank / 3)] * 2
    for epoch in range(2):
        order = np.random.default_rng([5, epoch]).permutation(N).tolist()
        seen = []
        for r in results:
            batches = r["epochs"][epoch]
            indices = [i for b in batches for i in b[:-1]]
            assert [i % N for i in indices] == torchvision_rasampler_full(order, 3, 2, r["rank"])
            seen += indices
        counts = Counter(i % N for i in seen)
        assert counts == {**{i: 3 for i in range(N)}, order[0]: 4}  # the wrapped slot repeats the head
        assert len(set(seen)) == len(seen)  # the extra repeat has draws of its own too
    assert results[0]["epochs"][0] != results[0]["epochs"][1]
