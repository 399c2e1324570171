"""Hostile review of the epoch cache's memory-order format (each field stored in its memory order,
read back with its strides) and of the bench's epoch cache rows (mediapipe-cached,
mediapipe-cache-fill): their /dev/shm folders, their long-epoch source, their ratios and reports."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.bench import cache_folder, images, report
from mediapipe.bench.core import Result, ratio_rows
from mediapipe.bench.long_epoch import RepeatedSource
from mediapipe.loaders.sources.folder import Source
from mediapipe.stages import epoch_cache as E
from mediapipe.stages import sample_stage
from mediapipe.stages.checksum import entry_checksum
from mediapipe.stages.stats import StageStats
from mediapipe.synthetic import jpeg_bytes, photo_like


# -- the epoch cache: strides ------------------------------------------------------------------
def _binding(tmp_path: Path) -> E.CacheBinding:
    cache = E.EpochCache(tmp_path, max_bytes=1 << 24)
    bound = E.CacheBinding(cache, "0" * 32, ("image",), (), ("image",))
    bound.folder.mkdir()
    return bound


def _round_trip(bound: E.CacheBinding, value: torch.Tensor, index: int = 0) -> torch.Tensor:
    stats = StageStats()
    bound.write(index, [["x"]], {"image": value}, stats)
    got = bound.read(index, [["x"]], stats)
    assert got is not None and stats.cache == {"stored": 1, "hits": 1}, dict(stats.cache)
    got = got["image"]
    assert got.dtype == value.dtype and got.shape == value.shape and torch.equal(got, value)
    return got


def _dense_layouts():
    """Every memory order of a 4-D tensor with some size-1 dims, each as torch lays it out (the
    strides of size-1 dims included): a dense tensor's strides are what the cache must give back."""
    for shape in ((2, 1, 3, 4), (1, 3, 1, 5), (3, 4, 1, 1), (1, 1, 1, 2)):
        for perm in itertools.permutations(range(4)):
            base = torch.arange(int(np.prod(shape)), dtype=torch.int16).reshape([shape[p] for p in perm])
            yield base.permute([perm.index(d) for d in range(4)])


def test_every_dense_layout_comes_back_with_its_strides_size_1_dims_included(tmp_path):
    """A contiguous (1, H, W) (a greyscale image or a mask after a stored Pad or Resize) came back
    as (1, W, 1): the channels-last strides of a decoder's view, which the ops after the cache
    test (``x.stride(-3) == 1``) to pick their layout, so they saw another layout than uncached."""
    bound = _binding(tmp_path)
    cases = [torch.zeros(1, 5, 6, dtype=torch.uint8), torch.rand(1, 5, 6) > 0.5,
             torch.zeros(5, 6, 1, dtype=torch.uint8).permute(2, 0, 1),  # a decoder's (1, H, W) view
             torch.zeros(2, 1, 5, 6).contiguous(memory_format=torch.channels_last),
             torch.zeros(5, 1, 6, dtype=torch.float16), torch.zeros(5, 6, 1).permute(0, 2, 1),
             *_dense_layouts()]
    for index, value in enumerate(cases):
        got = _round_trip(bound, value, index)
        assert got.stride() == value.stride(), (tuple(value.shape), value.stride(), got.stride())


def test_a_stride_0_dim_comes_back_dense_without_turning_channels_last(tmp_path):
    """An expanded dim (stride 0: a grey image broadcast to 3 channels, numpy's newaxis) cannot
    come back with stride 0; it comes back contiguous (as ``.contiguous()`` gives it), never as
    the channels-last layout (``stride(-3) == 1``) that the ops after the cache treat otherwise."""
    bound = _binding(tmp_path)
    grey = torch.from_numpy(photo_like(20, 30, 1)[..., 0].copy())
    cases = [grey[None].expand(3, -1, -1),  # (0, W, 1)
             torch.from_numpy(photo_like(20, 30, 1)[..., 0][None]),  # numpy newaxis: a size-1 dim of stride 0
             torch.from_numpy(photo_like(20, 30, 1)).permute(2, 0, 1)[:1].expand(3, -1, -1)]  # (0, 3W, 3)
    for index, value in enumerate(cases):
        assert value.stride(0) == 0 and value.stride(-3) != 1
        got = _round_trip(bound, value, index)
        assert got.stride(-3) != 1 and got.is_contiguous(), got.stride()


def _photos(root: Path, count: int = 4) -> Path:
    rows = []
    for i in range(count):
        photo = photo_like(60 + 7 * i, 80 + 5 * i, seed=i)
        (root / f"{i}.jpg").write_bytes(jpeg_bytes(photo, quality=92))
        Image.fromarray(((photo[..., 1] > 128) * 255).astype(np.uint8)).save(root / f"{i}_m.png")
        rows.append({"path": f"{i}.jpg", "mask": f"{i}_m.png", "label": i % 2})
    (root / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return root / "rows.jsonl"


@pytest.mark.parametrize("decode, stored", [
    ({"image": mp.decoders.image(mode="L")}, A.Pad(4)),
    ({"image": mp.decoders.image(), "mask": mp.decoders.mask()}, A.Resize(40)),
    ({"image": mp.decoders.image(), "mask": mp.decoders.mask()}, A.CenterCrop(40)),
])
def test_the_ops_after_the_cache_see_the_layout_they_see_uncached(tmp_path, monkeypatch, decode, stored):
    """What the first random op is handed: the same values and, in which dim is innermost
    (channels last or not), the same layout with the cache on (an epoch reading it) as off."""
    rows = _photos(tmp_path)
    seen: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    tag = ["uncached"]
    real = sample_stage.run_sample_ops

    def spy(plan, ops, data, *args, **kwargs):
        if ops and ops[0].index > 0:  # the ops after the stored one
            seen.setdefault(tag[0], {})[data["index"]] = {n: v for n, v in data.items()
                                                          if isinstance(v, torch.Tensor) and v.ndim == 3}
        return real(plan, ops, data, *args, **kwargs)

    monkeypatch.setattr(sample_stage, "run_sample_ops", spy)

    def make() -> mp.Pipeline:
        return mp.Pipeline(mp.loaders.manifest(rows), decode, [stored, A.RandomResizedCrop(32)], batch_size=2,
                           seed=0, device="cpu")

    plain = make()
    plain.plan.fused = {}
    list(plain.loader(num_workers=0))
    loader = make().loader(num_workers=0, cache=mp.EpochCache(tmp_path / "cache", max_bytes=1 << 26))
    list(loader)
    tag[0] = "cached"
    list(loader)
    assert loader.stats.cache["hits"] == 4
    for index, fields in seen["uncached"].items():
        for name, want in fields.items():
            got = seen["cached"][index][name]
            assert torch.equal(got, want)
            assert (got.stride(-3) == 1) == (want.stride(-3) == 1), (name, want.stride(), got.stride())
            if want.is_contiguous() or want.permute(1, 2, 0).is_contiguous():  # dense: exactly its strides
                assert got.stride() == want.stride(), (name, want.stride(), got.stride())


def _forge(bound: E.CacheBinding, fields) -> None:
    """Entry 0 with a header of these fields and a checksum that matches it (what a forger computes)."""
    header = json.dumps({"format": E.FORMAT, "stamp": [["x"]], "fields": fields}).encode()
    start = E._aligned(E._PREFIX.size + len(header))
    payload = bytes(64)
    crc = entry_checksum(header, [torch.zeros(64, dtype=torch.uint8)])
    bound.path(0).write_bytes(E._PREFIX.pack(E.MAGIC, len(header), crc) + header
                              + bytes(start - E._PREFIX.size - len(header)) + payload)


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [0, 1], [-1, 0, 1], [0.0, 1.0, 2.0], ["0", "1", "2"], [0, "1", 2],
                                   [0, 0, 1], [True, 0, 2], [[0], [1], [2]], None, {"0": 1}, "012", [10 ** 30, 0, 1]])
def test_a_forged_order_is_a_rejected_entry(tmp_path, order):
    bound = _binding(tmp_path)
    _forge(bound, [["image", "uint8", [2, 2, 3], order]])
    stats = StageStats()
    assert bound.read(0, [["x"]], stats) is None and stats.cache == {"rejected": 1, "misses": 1}


@pytest.mark.parametrize("field", [["image", "uint8", [2 ** 32, 2 ** 32, 3], [0, 1, 2]],
                                   ["image", "uint8", [0] + [2 ** 32] * 7, list(range(8))],
                                   ["image", "uint8", [1] * 9, list(range(9))], ["image", "uint8", [2, 2, 3]],
                                   ["image", "uint8", [2, 2, 3], [0, 1, 2], 7], ["image", "uint8", [True, 2, 3], [0, 1, 2]]])
def test_a_forged_shape_is_a_rejected_entry(tmp_path, field):
    bound = _binding(tmp_path)
    _forge(bound, [field])
    stats = StageStats()
    assert bound.read(0, [["x"]], stats) is None and stats.cache == {"rejected": 1, "misses": 1}


def test_a_removed_cache_folder_is_not_made_again_by_a_late_write(tmp_path):
    """A cleared key is made again, but not the cache's own folder: a worker still writing after its
    owner removed the whole folder (the bench's row at close) made it, and its parents, again."""
    root = tmp_path / "cache"
    cache = E.EpochCache(root, max_bytes=1 << 24)
    bound = E.CacheBinding(cache, "0" * 32, ("image",), (), ("image",))
    bound.folder.mkdir()
    image = torch.from_numpy(photo_like(20, 30, 1)).permute(2, 0, 1)
    stats = StageStats()
    bound.write(0, [["x"]], {"image": image}, stats)
    cache.clear()
    bound.write(1, [["x"]], {"image": image}, stats)  # a cleared key: made again
    assert bound.path(1).exists()
    shutil.rmtree(root)
    bound.write(2, [["x"]], {"image": image}, stats)  # the cache itself removed: nothing stored
    assert not root.exists() and stats.cache["stored"] == 2 and stats.cache["skipped"] == 1


@pytest.mark.parametrize("workers", [0, 2])
def test_a_cache_cleared_under_a_live_loader_is_filled_again(image_folder, tmp_path, workers):
    """`EpochCache.clear` removed the key's folder (and its ledger) under the loader that had bound
    it: every sample after was skipped, never stored again, until a new loader was made."""
    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()}, [A.RandomResizedCrop(32)],
                       batch_size=6, seed=0, device="cpu")
    cache = mp.EpochCache(tmp_path, max_bytes=1 << 28)
    loader = pipe.loader(num_workers=workers, cache=cache)
    list(loader)
    cache.clear()
    before = dict(loader.stats.cache)
    list(loader)
    assert {k: v - before.get(k, 0) for k, v in loader.stats.cache.items() if v != before.get(k, 0)} == \
        {"misses": 24, "stored": 24}
    before = dict(loader.stats.cache)
    list(loader)
    assert loader.stats.cache["hits"] - before.get("hits", 0) == 24


# -- the bench's cache rows: their folders ---------------------------------------------------------
DEAD_PID = 2 ** 22 + 12345  # above the kernel's pid_max: never a live process


def _folder_with_entry(path: Path) -> Path:
    path.mkdir()
    (path / "entry").write_bytes(b"x")
    return path


def test_a_folder_named_with_a_non_ascii_digit_does_not_break_the_next_cache_row(tmp_path, monkeypatch):
    """'²'.isdigit() is True and int('²') raises: anyone able to make a folder in /dev/shm made every
    cache row of every user fail to open."""
    monkeypatch.setattr(cache_folder, "SHM", str(tmp_path))
    odd = _folder_with_entry(tmp_path / f"{cache_folder.CACHE_PREFIX}\u00b2-x")
    new = cache_folder.bench_cache_folder()
    try:
        assert new.is_dir() and odd.is_dir()
    finally:
        cache_folder.close_cache_folder(new)


def test_the_sweep_keeps_other_users_folders_links_and_live_locked_folders(tmp_path, monkeypatch):
    """Removed: only a folder of this user's, named like ours, whose process is gone and whose lock
    no process holds. A link named like ours is never followed; another user's folder is theirs;
    a folder whose pid this process cannot see (another pid namespace sharing /dev/shm) but whose
    lock a live process holds is that process's."""
    monkeypatch.setattr(cache_folder, "SHM", str(tmp_path))
    outside = _folder_with_entry(tmp_path / "outside")
    link = tmp_path / f"{cache_folder.CACHE_PREFIX}{DEAD_PID}-link"
    link.symlink_to(outside, target_is_directory=True)
    locked = _folder_with_entry(tmp_path / f"{cache_folder.CACHE_PREFIX}{DEAD_PID}-locked")
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)", str(locked)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        theirs = _folder_with_entry(tmp_path / f"{cache_folder.CACHE_PREFIX}{DEAD_PID}-theirs")
        monkeypatch.setattr(cache_folder.os, "geteuid", lambda: os.getuid() + 1)  # every folder someone else's
        cache_folder.remove_dead_cache_folders(tmp_path)
        assert theirs.is_dir()
        monkeypatch.undo()
        monkeypatch.setattr(cache_folder, "SHM", str(tmp_path))
        cache_folder.remove_dead_cache_folders(tmp_path)
        assert not theirs.exists()  # this user's, its process gone, unlocked
        assert locked.is_dir() and link.is_symlink() and (outside / "entry").exists()
    finally:
        holder.kill()
        holder.wait()
    cache_folder.remove_dead_cache_folders(tmp_path)
    assert not locked.exists() and link.is_symlink() and (outside / "entry").exists()


def _wait_gone(path: Path, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not path.exists()


def test_a_killed_bench_process_folder_is_removed_at_once_not_at_the_next_run(tmp_path):
    """The harness SIGKILLs a row that times out or fails (and every row on Ctrl-C): its folder, the
    whole dataset decoded, stayed in /dev/shm (RAM) until some later cache row opened, maybe never."""
    code = ("import sys, time; from mediapipe.bench import cache_folder; cache_folder.SHM = sys.argv[1]; "
            "f = cache_folder.bench_cache_folder(); (f / 'entry').write_bytes(bytes(1000)); print(f, flush=True); "
            "time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).parent.parent)
    try:
        folder = Path(child.stdout.readline().strip())
        assert folder.parent == tmp_path and (folder / "entry").exists()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert _wait_gone(folder)


def test_a_live_process_folder_outlives_a_killed_one(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_folder, "SHM", str(tmp_path))
    mine = cache_folder.bench_cache_folder()
    (mine / "entry").write_bytes(b"x")
    try:
        cache_folder.remove_dead_cache_folders(tmp_path)
        assert (mine / "entry").exists()
    finally:
        cache_folder.close_cache_folder(mine)
    assert not mine.exists()


def test_a_cache_row_that_fails_to_open_removes_its_folder(image_folder, tmp_path, monkeypatch):
    monkeypatch.setattr(cache_folder, "SHM", str(tmp_path))

    def broken(*args, **kwargs):
        raise KeyboardInterrupt  # or a dataset that cannot be read, a loader that refuses the cache

    monkeypatch.setattr(images, "mediapipe_pipeline", broken)
    for backend in ("mediapipe-cached", "mediapipe-cache-fill"):
        with pytest.raises(KeyboardInterrupt):
            images.open_stream("image-train", backend, image_folder, device="cpu", workers=0, batch_size=4,
                               options={"max_batches": 4})
    assert not list(tmp_path.glob(f"{cache_folder.CACHE_PREFIX}*"))


# -- the bench's cache rows: what they measure -------------------------------------------------------
def test_the_cache_rows_decode_in_the_workers_on_cuda_too(image_folder, tmp_path):
    """On CUDA this library decodes images on the device by default (nvimgcodec), which keeps no
    cache: both cache rows failed there ("cache=: fields ['image'] decode on the device"). They
    decode in the workers, the untimed fill epoch under the same key as the timed passes."""
    cache = mp.EpochCache(tmp_path, max_bytes=1 << 26)
    keys = {}
    for fill in (False, True):
        pipe = images.mediapipe_pipeline("image-train", image_folder, "cuda", 4,
                                         options={"max_batches": 12, "cached": True, "same_samples": not fill})
        assert not pipe.plan.device_fields
        keys[fill] = cache.bind(pipe.plan).key
    first = images.mediapipe_pipeline("image-train", image_folder, "cuda", 4, options={"repeat": False, "cached": True})
    assert cache.bind(first.plan).key == keys[False] != keys[True]


def _stream_loader(monkeypatch) -> list:
    seen: list = []
    monkeypatch.setattr(images, "loader_stages", lambda loader: seen.append(loader) or {})
    return seen


def test_with_real_epochs_the_fill_row_never_reads_the_cache(image_folder, monkeypatch):
    """--real-epochs (repeat=False): the fill row's loader is the dataset itself, epoch after epoch;
    from its second epoch on it read what the first stored (every sample a hit), timed as 'fill'."""
    seen = _stream_loader(monkeypatch)
    stream = images.open_stream("image-train", "mediapipe-cache-fill", image_folder, device="cpu", workers=0,
                                batch_size=4, options={"max_batches": 14, "repeat": False})
    try:
        it = iter(stream)
        for _ in range(14):  # 6 batches an epoch (24 samples): into the third
            next(it)
        stream.stages()
        counts = dict(seen[-1].stats.cache)
    finally:
        stream.close()
    assert counts.get("hits", 0) == 0 and counts["stored"] >= 52, counts


def test_a_cache_that_cannot_hold_the_dataset_is_said_not_measured_as_cached(image_folder, monkeypatch):
    """A small /dev/shm (Docker's default is 64 MB): half its free space is the budget, samples past
    it are skipped, decoded as without a cache; the cached row then timed mostly uncached epochs
    and the fill row decodes without storing, both reported as the cache's rates."""
    monkeypatch.setattr(E, "DEFAULT_SHARE", 1e-15)  # a budget of one byte
    with pytest.raises(NotImplementedError, match="not available: the epoch cache .* held 0 of 24 samples"):
        images.open_stream("image-train", "mediapipe-cached", image_folder, device="cpu", workers=0, batch_size=4,
                           options={"max_batches": 8})
    stream = images.open_stream("image-train", "mediapipe-cache-fill", image_folder, device="cpu", workers=0,
                                batch_size=4, options={"max_batches": 8})
    try:
        with pytest.raises(RuntimeError, match="the epoch cache .* skipped"):
            next(iter(stream))
    finally:
        stream.close()
    assert not list(Path(cache_folder.SHM).glob(f"{cache_folder.CACHE_PREFIX}{os.getpid()}-*"))


# -- the long epoch's fingerprint, the ratios, the reports ---------------------------------------------
class _Described(Source):
    """A source with a given fingerprint and config (both None: neither)."""

    kind = ""

    def __init__(self, fingerprint: str | None, config: dict | None) -> None:
        self._fingerprint, self._config = fingerprint, config

    @property
    def fingerprint(self) -> str | None:  # type: ignore[override]
        return self._fingerprint

    def __len__(self) -> int:
        return 3

    def to_config(self) -> dict:
        if self._config is None:
            raise NotImplementedError
        return self._config


class _Other(_Described):
    kind = ""


def test_the_long_epoch_fingerprint_tells_apart_what_its_inner_sources_key_tells_apart():
    """An epoch cache keys a plain source by its type, fingerprint and config; the long epoch's
    fingerprint kept only the inner fingerprint (else its config), so two datasets a plain key
    tells apart (the same shards under two roots: one fingerprint, two configs) shared one, and an
    inner fingerprint could spell another's config."""
    config = {"kind": "folder", "root": "/a"}

    def fingerprint(inner: Source) -> str | None:
        return RepeatedSource(inner, 3).fingerprint

    apart = [_Described("f", {"root": "/a"}), _Described("f", {"root": "/b"}), _Other("f", {"root": "/a"}),
             _Described(None, config), _Described(json.dumps(config, sort_keys=True), None), _Described("g", None)]
    prints = [fingerprint(s) for s in apart]
    assert None not in prints and len(set(prints)) == len(prints), prints
    assert fingerprint(_Described("f", {"root": "/a"})) == prints[0]  # the same dataset: the same key
    assert RepeatedSource(apart[0], 4).fingerprint != prints[0]
    assert fingerprint(_Described(None, None)) is None


def _row(backend: str, rate: float, data: str, workers: int) -> Result:
    return Result("image-train", backend, "cpu", workers, unit="images", samples_per_s=rate, samples_per_s_min=rate,
                  samples_per_s_max=rate, data=data)


def test_cache_ratios_stay_within_their_data_and_workers_and_old_reports_render():
    rows = [_row(b, rate * (1 + w) * (2 if d == "shards" else 1), d, w)
            for w in (0, 2) for d in ("folder", "shards")
            for b, rate in (("mediapipe", 100.0), ("mediapipe-cached", 300.0), ("mediapipe-cache-fill", 50.0),
                            ("torchvision", 80.0))]
    ratios = ratio_rows(rows)
    cache = {(r["backend"], r["peer"], r["data"], r["workers"]): round(r["ratio"], 3)
             for r in ratios if r["compare"] == "cache"}
    assert len(cache) == 2 * 2 * 2 * 2 and set(cache.values()) == {3.0, 3.75, 0.5, 0.625}
    assert all(r["peer_data"] == r["data"] for r in ratios if r["compare"] == "cache")
    data = [r for r in ratios if r["compare"] == "data"]
    assert {(r["backend"], r["workers"]) for r in data} == {(b, w) for w in (0, 2) for b in
                                                           ("mediapipe", "mediapipe-cached", "mediapipe-cache-fill",
                                                            "torchvision")}
    assert {r["peer"] for r in ratios if r["compare"] == "backend"} == {"torchvision"}
    results = [r.__dict__ | {"stages": {}} for r in rows]
    old = {"results": [r for r in results if r["backend"] in ("mediapipe", "torchvision")],
           "ratios": [{k: v for k, v in r.items() if k != "compare"} for r in ratios
                      if r["compare"] == "backend"]}
    assert "mediapipe" in report.render_table(old) and "mediapipe" in report.render_markdown(old)
    assert not report.cache_lines(old)


def test_the_terminal_report_with_cache_rows_keeps_its_width():
    rows = [_row("mediapipe", 100.0, "folder", 2), _row("mediapipe-cached", 300.0, "folder", 2)]
    text = report.render_table({"results": [r.__dict__ | {"stages": {}} for r in rows], "ratios": ratio_rows(rows)})
    assert "mediapipe-cached is 3.00x mediapipe" in text
    assert max(map(len, text.splitlines())) <= report.WIDTH, max(text.splitlines(), key=len)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_a_field_without_strides_is_skipped_not_an_error(tmp_path):
    """A decoder's side field that is sparse or nested has no strides: writing its entry raised out of
    the loader (which runs without a cache); it is a sample the cache does not keep."""
    bound = _binding(tmp_path)
    for value in (torch.eye(3).to_sparse(), torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])):
        stats = StageStats()
        bound.write(0, [["x"]], {"image": value}, stats)
        assert stats.cache == {"skipped": 1} and not bound.path(0).exists()
