"""A hostile pass over the FFCV round: the epoch cache, `mp.Schedule` and ``num_workers="auto"``.

Each test is a way a user got wrong data, a crash or a hang from one of them."""

from __future__ import annotations

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.loaders.auto_workers import AutoLoader, WorkerSetting
from mediapipe.stages import epoch_cache as E
from mediapipe.stages.stats import StageStats
from tests.helpers import assert_same, collect, write_image_folder


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("hostile_images"), 8, seed=5)


def cached_pipeline(root, **kwargs) -> mp.Pipeline:
    return mp.Pipeline(source=mp.loaders.folder(root), decode={"image": mp.decoders.image()},
                       augment=[A.Resize(40), A.RandomResizedCrop(24), A.Normalize()], batch_size=4, seed=0,
                       device="cpu", **kwargs)


def unfused(root, **kwargs) -> list[dict]:
    """One epoch without a cache, decoded whole as the cache decodes."""
    pipe = cached_pipeline(root, **kwargs)
    pipe.plan.fused = {}
    return collect(pipe.loader(num_workers=0))


# -- the epoch cache -------------------------------------------------------------------------------
def test_a_decoder_limit_refuses_a_file_whose_entry_a_run_without_it_stored(images, tmp_path):
    cache = mp.EpochCache(tmp_path, max_bytes=1 << 30)
    collect(cached_pipeline(images).loader(num_workers=0, cache=cache))
    with pytest.raises(mp.LimitError):  # what the same pipeline without a cache says
        unfused(images, max_pixels=100)
    limited = cached_pipeline(images, max_pixels=100).loader(num_workers=0, cache=cache)
    with pytest.raises(mp.LimitError):  # was: every sample read from the entries, past the limit
        collect(limited)


def test_two_writers_replacing_one_entry_leave_the_ledger_counting_what_is_on_disk(tmp_path, monkeypatch):
    cache = E.EpochCache(tmp_path, max_bytes=1 << 20)

    def bound() -> E.CacheBinding:
        binding = E.CacheBinding(cache, "0" * 32, ("image",), (), ("image",))
        binding.folder.mkdir(exist_ok=True)
        return binding

    one, other, stats = bound(), bound(), StageStats()
    one.write(1, [["kept"]], {"image": torch.zeros(200_000, dtype=torch.uint8)}, stats)
    one.write(0, [["old"]], {"image": torch.zeros(100_000, dtype=torch.uint8)}, stats)
    write_all, interleaved = E._write_all, []

    def meanwhile(fd, parts):  # the other rank rewrites entry 0 (its file changed) while this one writes it
        if not interleaved:
            interleaved.append(True)
            other.write(0, [["new"]], {"image": torch.ones(10_000, dtype=torch.uint8)}, stats)
        write_all(fd, parts)

    monkeypatch.setattr(E, "_write_all", meanwhile)
    one.write(0, [["new"]], {"image": torch.ones(10_000, dtype=torch.uint8)}, stats)
    assert stats.cache["stored"] == 4
    # was: each writer uncounted the old entry, so the ledger held 90 KB less than the disk (budget overrun)
    assert one._used(one._ledger_fd()) == one.entries_bytes()


def test_a_cache_folder_that_takes_no_writes_is_read_and_its_misses_decoded(images, tmp_path):
    cache = mp.EpochCache(tmp_path, max_bytes=1 << 30)
    filled = cached_pipeline(images).loader(num_workers=0, cache=cache, shuffle=False)
    collect(filled)
    folder = filled.plan.cache.folder
    (folder / "3.mpc").unlink()
    (folder / "ledger").unlink()
    (folder / "ledger").mkdir()  # a ledger no writer can open, as on a read-only or full filesystem
    loader = cached_pipeline(images).loader(num_workers=0, cache=cache, shuffle=False)
    got = collect(loader)  # was: IsADirectoryError from the first miss (EROFS, ENOSPC likewise)
    assert dict(loader.stats.cache) == {"hits": 7, "misses": 1, "skipped": 1}
    pipe = cached_pipeline(images)
    pipe.plan.fused = {}
    assert_same(got, collect(pipe.loader(num_workers=0, shuffle=False)))


# -- num_workers="auto" ------------------------------------------------------------------------------
GRID = [WorkerSetting(1, "process"), WorkerSetting(2, "thread"), WorkerSetting(1, "thread")]


def test_two_passes_of_an_auto_loader_at_once_each_deliver_the_epoch(images):
    def pipe() -> mp.Pipeline:
        return mp.Pipeline(mp.loaders.folder(images), {"image": mp.decoders.image("pillow")},
                           [A.RandomResizedCrop(24), A.HorizontalFlip(), A.Normalize()], batch_size=1, seed=3,
                           device="cpu")

    expected = [b["image"].clone() for b in pipe().loader(num_workers=0)]
    auto = AutoLoader(pipe(), grid=list(GRID))
    auto.trial_batches = 1
    first, second = iter(auto), iter(auto)
    got: tuple[list, list] = ([], [])
    for a, b in zip(first, second):
        got[0].append(a["image"].clone())
        got[1].append(b["image"].clone())
    got[0].extend(b["image"].clone() for b in first)
    got[1].extend(b["image"].clone() for b in second)
    for each in got:
        assert len(each) == len(expected) and all(torch.equal(a, b) for a, b in zip(each, expected))
