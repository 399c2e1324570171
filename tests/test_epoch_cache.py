"""The epoch cache (`mediapipe.stages.epoch_cache`): batches bit-identical with it on or off, the
second epoch read from it, its budget, entries that fail a check, killed writers, a changed file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.loaders.sources.folder import Source
from mediapipe.sample import Blob, SampleRef
from mediapipe.stages import epoch_cache as E
from mediapipe.stages.stats import StageStats
from mediapipe.synthetic import photo_like
from tests.helpers import assert_same, collect, jpeg_bytes, process_alive, write_image_folder

SHORT = 48  # the fixed Resize stored with each image


def make(root, **kwargs) -> mp.Pipeline:
    """A deterministic Resize (stored), then a random crop fused into the decoder without a cache."""
    return mp.Pipeline(source=mp.loaders.folder(root), decode={"image": mp.decoders.image()},
                       augment=[A.Resize(SHORT), A.RandomResizedCrop(32, scale=(0.2, 1.0)), A.HorizontalFlip(),
                                A.Normalize()], batch_size=5, seed=0, device="cpu", **kwargs)


def reference(root, epochs: int = 2, **kwargs) -> list[list[dict]]:
    """Each epoch's batches without a cache, with the same unfused decode the cache makes."""
    pipe = make(root, **kwargs)
    pipe.plan.fused = {}
    loader = pipe.loader(num_workers=0)
    return [collect(loader) for _ in range(epochs)]


def binding(loader) -> E.CacheBinding:
    return loader.plan.cache


def counts_of(loader, run) -> tuple[dict, dict]:
    """What ``run()`` adds to the loader's cache counts and its seconds."""
    cache, seconds = dict(loader.stats.cache), dict(loader.stats.seconds)
    run()
    return ({k: v - cache.get(k, 0) for k, v in loader.stats.cache.items() if v != cache.get(k, 0)},
            {k: v - seconds.get(k, 0) for k, v in loader.stats.seconds.items()})


@pytest.fixture(scope="module")
def expected(image_folder):
    return reference(image_folder)


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_are_the_same_with_the_cache_and_the_second_epoch_is_read(image_folder, expected, tmp_path,
                                                                          workers):
    loader = make(image_folder).loader(num_workers=workers, cache=mp.EpochCache(tmp_path, max_bytes=1 << 30))
    assert make(image_folder).plan.fused and not binding(loader).fused(loader.plan)  # decoded whole with a cache
    first = []
    filled, _ = counts_of(loader, lambda: first.extend(collect(loader)))
    assert filled == {"misses": 24, "stored": 24}
    assert_same(first, expected[0])
    second = []
    read, seconds = counts_of(loader, lambda: second.extend(collect(loader)))
    assert read == {"hits": 24}
    assert seconds.get("decode", 0) == 0 and seconds.get("read", 0) == 0  # no decoder ran, no file was read
    assert_same(second, expected[1])
    # what an entry holds: the decoded image after the stored Resize, before the random crop
    values = binding(loader).read(0, binding(loader).stamp(loader.plan, loader.plan.source.ref(0)), StageStats())
    assert values["image"].dtype == torch.uint8 and min(values["image"].shape[-2:]) == SHORT


def test_a_new_loader_and_another_rank_read_the_entries(image_folder, expected, tmp_path):
    cache = mp.EpochCache(tmp_path, max_bytes=1 << 30)
    collect(make(image_folder).loader(cache=cache))
    loader = make(image_folder).loader(num_workers=2, cache=cache)
    read, _ = counts_of(loader, lambda: assert_same(collect(loader), expected[0]))
    assert read == {"hits": 24}
    ranks = [make(image_folder).loader(cache=cache, rank=r, world_size=2) for r in range(2)]
    assert sum(counts_of(r, lambda r=r: collect(r))[0]["hits"] for r in ranks) == 24


def test_past_the_budget_samples_are_decoded_as_without_a_cache(image_folder, expected, tmp_path):
    full = make(image_folder).loader(cache=mp.EpochCache(tmp_path / "full", max_bytes=1 << 30))
    collect(full)
    total = binding(full).entries_bytes()
    budget = total // 3
    loader = make(image_folder).loader(num_workers=2, cache=mp.EpochCache(tmp_path / "small", max_bytes=budget))
    first = []
    filled, _ = counts_of(loader, lambda: first.extend(collect(loader)))
    assert 0 < filled["stored"] < 24 and filled["stored"] + filled["skipped"] == 24
    assert binding(loader).entries_bytes() <= budget
    second = []
    read, _ = counts_of(loader, lambda: second.extend(collect(loader)))
    assert read["hits"] == filled["stored"] and read["misses"] == 24 - filled["stored"]
    assert_same(first, expected[0])
    assert_same(second, expected[1])


def test_damaged_entries_are_misses_and_are_not_trusted(image_folder, expected, tmp_path):
    cache = mp.EpochCache(tmp_path, max_bytes=1 << 24)
    loader = make(image_folder).loader(cache=cache, shuffle=False)
    collect(loader)
    bound = binding(loader)
    good = bound.path(0).read_bytes()
    torn = bound.path(1).read_bytes()
    bound.path(1).write_bytes(torn[: len(torn) // 2])  # torn
    bound.path(2).write_bytes(os.urandom(len(good)))  # garbage
    flipped = bytearray(bound.path(3).read_bytes())
    flipped[-100] ^= 1  # one bit of the pixels
    bound.path(3).write_bytes(bytes(flipped))
    stamp = bound.stamp(loader.plan, loader.plan.source.ref(4))
    header = json.dumps({"fields": [["image", "uint8", [100000, 100000, 3], [0, 1, 2]]], "format": E.FORMAT,
                         "stamp": stamp}).encode()
    bound.path(4).write_bytes(struct.pack("<8sII", E.MAGIC, len(header), 0) + header + bytes(64))  # claims 30 GB
    with open(bound.path(5), "wb") as f:
        f.truncate(cache.max_bytes + 1)  # larger than the budget admits: never read
    bound.path(6).write_bytes(good)  # another sample's entry: its stamp names another file
    again = make(image_folder).loader(cache=cache, shuffle=False)
    plain = make(image_folder)
    plain.plan.fused = {}
    counts, _ = counts_of(again, lambda: assert_same(collect(again), collect(plain.loader(shuffle=False))))
    assert counts["rejected"] == 5 and counts["misses"] == 6 and counts["hits"] == 18 and counts["stored"] == 6
    assert counts_of(again, lambda: collect(again))[0] == {"hits": 24}  # stored anew


def _entry_header(path) -> dict:
    raw = path.read_bytes()
    _, length, _ = E._PREFIX.unpack(raw[:E._PREFIX.size])
    return json.loads(raw[E._PREFIX.size:E._PREFIX.size + length])


def test_an_entry_is_stored_in_its_memory_order_and_read_back_with_its_strides(tmp_path):
    """A decoder's (C, H, W) view of its (H, W, C) buffer is written without a transposing copy and
    read back with the same strides (the ops after the cache see the layout they see uncached);
    an order that is not a permutation of the dims is a rejected entry."""
    cache = E.EpochCache(tmp_path, max_bytes=1 << 24)
    bound = E.CacheBinding(cache, "0" * 32, ("image",), (), ("image",))
    bound.folder.mkdir()
    chw = torch.from_numpy(photo_like(30, 40, 1)).permute(2, 0, 1)
    stats = StageStats()
    for index, image in enumerate((chw, chw.contiguous())):
        bound.write(index, [["x"]], {"image": image}, stats)
        got = bound.read(index, [["x"]], stats)["image"]
        assert torch.equal(got, image) and got.stride() == image.stride()
    assert _entry_header(bound.path(0))["fields"] == [["image", "uint8", [30, 40, 3], [1, 2, 0]]]
    assert _entry_header(bound.path(1))["fields"] == [["image", "uint8", [3, 30, 40], [0, 1, 2]]]
    raw = bound.path(0).read_bytes()
    bound.path(0).write_bytes(raw.replace(b"[1, 2, 0]", b"[1, 1, 0]"))  # not a permutation
    assert bound.read(0, [["x"]], stats) is None and stats.cache["rejected"] == 1


def _killed_writer(folder: str) -> None:
    """Run in a child: write sample 3's entry, killed (SIGKILL) halfway through its bytes."""
    cache = E.EpochCache(folder, max_bytes=1 << 24)
    bound = E.CacheBinding(cache, "0" * 32, ("image",), (), ("image",))
    bound.folder.mkdir()

    def half(fd, parts):
        os.write(fd, b"".join(bytes(memoryview(p).cast("B")) for p in parts)[:1000])
        os.kill(os.getpid(), signal.SIGKILL)

    E._write_all = half
    bound.write(3, [["x"]], {"image": torch.zeros(3, 40, 40, dtype=torch.uint8)}, StageStats())


def test_a_writer_killed_mid_entry_leaves_no_entry_and_its_temporary_file_is_removed(tmp_path):
    code = f"import tests.test_epoch_cache as t; t._killed_writer({str(tmp_path)!r})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__)))
    assert proc.returncode == -signal.SIGKILL
    folder = tmp_path / ("0" * 32)
    temps = [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert len(temps) == 1 and not (folder / "3.mpc").exists()
    bound = E.CacheBinding(E.EpochCache(tmp_path, max_bytes=1 << 24), "0" * 32, ("image",), (), ("image",))
    stats = StageStats()
    assert bound.read(3, [["x"]], stats) is None and stats.cache == {"misses": 1}
    bound.remove_stale_temps()  # what binding a loader to the cache does
    assert not any(p.name.endswith(".tmp") for p in folder.iterdir())
    live = folder / f".7.{os.getpid()}.abcd.tmp"  # a writer still at work: left alone
    live.write_bytes(b"x")
    bound.remove_stale_temps()
    assert live.exists()


@pytest.mark.timeout(120)
def test_a_worker_killed_mid_epoch_then_a_new_loader_gives_the_same_batches(image_folder, expected, tmp_path):
    cache = mp.EpochCache(tmp_path, max_bytes=1 << 30)
    loader = make(image_folder).loader(num_workers=2, cache=cache)
    it = iter(loader)
    next(it)
    dead = it.worker_pids[0]
    os.kill(dead, signal.SIGKILL)
    while process_alive(dead):
        time.sleep(0.01)
    with pytest.raises(mp.WorkerError):
        for _ in it:
            pass
    again = make(image_folder).loader(num_workers=2, cache=cache)
    first = []
    counts, _ = counts_of(again, lambda: first.extend(collect(again)))
    assert counts.get("rejected", 0) == 0 and counts["hits"] >= 5  # what the killed pass stored is whole
    assert_same(first, expected[0])
    assert_same(collect(again), expected[1])


def test_a_changed_file_is_not_read_from_old_entries(tmp_path):
    root = write_image_folder(tmp_path / "images", 10, seed=3)
    cache = mp.EpochCache(tmp_path / "cache", max_bytes=1 << 30)
    collect(make(root).loader(cache=cache))
    changed = sorted(root.rglob("*.jpg"))[4]
    changed.write_bytes(jpeg_bytes(photo_like(90, 120, 777), quality=90))
    loader = make(root).loader(cache=cache)
    got = []
    counts, _ = counts_of(loader, lambda: got.extend(collect(loader)))
    assert counts == {"hits": 9, "misses": 1, "stored": 1}
    assert_same(got, reference(root, epochs=1)[0])
    shutil.rmtree(root / "class0")  # fewer files: the indices move, the cache key changes with the source
    loader = make(root).loader(cache=cache)
    counts, _ = counts_of(loader, lambda: collect(loader))
    assert "hits" not in counts


def test_max_side_stores_smaller_copies_the_same_every_epoch(image_folder, expected, tmp_path):
    loader = make(image_folder).loader(cache=mp.EpochCache(tmp_path / "a", max_bytes=1 << 30, max_side=40))
    first, second = collect(loader), collect(loader)
    values = binding(loader).read(0, binding(loader).stamp(loader.plan, loader.plan.source.ref(0)), StageStats())
    assert max(values["image"].shape[-2:]) == 40
    other = make(image_folder).loader(cache=mp.EpochCache(tmp_path / "b", max_bytes=1 << 30, max_side=40))
    assert_same(first, collect(other))  # filling or reading, the same batches
    assert_same(second, collect(other))
    assert not torch.equal(first[0]["image"], expected[0][0]["image"])  # not lossless


class _Listed(Source):
    """A source with neither a fingerprint nor a config."""

    def __init__(self, root) -> None:
        self.files = sorted(root.rglob("*.jpg"))

    def __len__(self) -> int:
        return len(self.files)

    def ref(self, index: int) -> SampleRef:
        path = str(self.files[index])
        return SampleRef(index, path, {"image": Blob(path, path)})


def test_bad_cache_arguments_are_refused(image_folder, tmp_path):
    pipe = make(image_folder)
    for bad in (5, True, ""):
        with pytest.raises(ValueError, match="cache=|where="):
            pipe.loader(cache=bad)
    with pytest.raises(ValueError, match="max_bytes"):
        mp.EpochCache(tmp_path, max_bytes=0)
    with pytest.raises(ValueError, match="max_side"):
        mp.EpochCache(tmp_path, max_side=1.5)
    unkeyed = mp.Pipeline(source=_Listed(image_folder), decode={"image": mp.decoders.image()},
                          augment=[A.RandomResizedCrop(32)], batch_size=4, device="cpu")
    with pytest.raises(mp.PipelineError, match="neither a fingerprint nor a config"):
        unkeyed.loader(cache=mp.EpochCache(tmp_path))
    key = binding(pipe.loader(cache=mp.EpochCache(tmp_path / "c"))).key
    shutil.rmtree(tmp_path / "c" / key)  # its lock file and format record
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "c" / key).symlink_to(tmp_path / "elsewhere")  # entries of someone else's choosing
    with pytest.raises(mp.PipelineError, match="not a folder"):
        pipe.loader(cache=mp.EpochCache(tmp_path / "c"))


def test_the_dali_backend_refuses_a_cache(image_folder, tmp_path):
    pytest.importorskip("nvidia.dali")
    with pytest.raises(mp.PipelineError, match="keeps no epoch cache"):
        make(image_folder).loader(backend="dali", cache=mp.EpochCache(tmp_path))


def test_shm_and_a_path_take_the_default_budget(image_folder, tmp_path):
    cache = E.resolve_cache(str(tmp_path))
    assert cache.root == tmp_path and 0 < cache.max_bytes <= shutil.disk_usage(tmp_path).free
    shm = E.resolve_cache("shm")
    assert str(shm.root).startswith(E.SHM) and shm.root.stat().st_mode & 0o777 == 0o700
