"""Hostile review of the epoch cache's key-folder records and holds (`format`, `users`,
`EpochCache.prune`, bind-time removal of other formats' folders): what a hostile folder, a concurrent
pruner, `EpochCache.clear` or a long-lived process does to them. The tests that fail are findings;
the others guard attacks the code survives."""

from __future__ import annotations

import fcntl
import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.stages import cache_folders as F
from mediapipe.stages import epoch_cache as E
from tests.helpers import assert_same, collect, write_image_folder
from tests.test_epoch_cache import make, reference

REPO = str(Path(__file__).resolve().parent.parent)
BIG = 1 << 30


@pytest.fixture(scope="module")
def imgs(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("hostile-folders") / "imgs", 24)


def keys(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if F.KEY.match(p.name)}


def plain(imgs) -> mp.Pipeline:
    """Another pipeline (another key) over the same images."""
    return mp.Pipeline(source=mp.loaders.folder(imgs), decode={"image": mp.decoders.image()}, batch_size=5, seed=0,
                       device="cpu")


def finishes(fn, fifo: Path | None = None, seconds: float = 2.0) -> bool:
    """Whether ``fn()`` returns (or raises) within ``seconds``; a call stuck opening ``fifo`` is let go
    (a writer opened on it) so that no thread is left blocked."""
    done = threading.Event()

    def run():
        try:
            fn()
        except BaseException:
            pass
        finally:
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    finished = done.wait(seconds)
    if not finished and fifo is not None:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        try:
            done.wait(10)
        finally:
            os.close(fd)
    return finished


def cache_fds(root: Path) -> list[str]:
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(str(root)):
            out.append(target)
    return out


# -- findings: hangs on hostile lock files ----------------------------------------------------
def test_bind_does_not_hang_on_a_fifo_users_in_its_own_folder(imgs, tmp_path):
    """`CacheBinding.hold` opens ``users`` O_RDONLY without O_NONBLOCK: a FIFO there blocks the loader's
    construction until some process opens it for writing (forever)."""
    cache = mp.EpochCache(tmp_path, max_bytes=BIG)
    key = make(imgs).loader(cache=cache).plan.cache.key
    gc.collect()
    users = tmp_path / key / F.USERS
    users.unlink()
    os.mkfifo(users)
    assert finishes(lambda: make(imgs).loader(cache=cache), fifo=users), "bind hung on a FIFO 'users'"


def test_bind_does_not_hang_on_a_fifo_users_in_another_formats_folder(imgs, tmp_path):
    """Bind-time removal (`EpochCache._remove`) opens every chosen folder's ``users`` the same way: one
    stale folder with a FIFO ``users`` hangs every new loader on that root."""
    folder = tmp_path / ("a" * 32)
    folder.mkdir()
    (folder / F.RECORD).write_text(json.dumps({"format": E.FORMAT - 1}))
    os.mkfifo(folder / F.USERS)
    cache = mp.EpochCache(tmp_path, max_bytes=BIG)
    assert finishes(lambda: make(imgs).loader(cache=cache), fifo=folder / F.USERS), \
        "bind hung on another format's FIFO 'users'"


def test_prune_does_not_hang_on_a_fifo_users(tmp_path):
    folder = tmp_path / ("b" * 32)
    folder.mkdir()
    os.mkfifo(folder / F.USERS)
    cache = mp.EpochCache(tmp_path, max_bytes=BIG)
    assert finishes(cache.prune, fifo=folder / F.USERS), "prune() hung on a FIFO 'users'"


def test_bind_does_not_wait_forever_on_a_users_lock_held_exclusively(imgs, tmp_path):
    """`hold` takes LOCK_SH blocking: a pruner stopped (Ctrl-Z, SIGSTOP, a debugger) in its rmtree, or
    any process holding LOCK_EX on ``users``, blocks every new loader of that key indefinitely. A
    bounded wait (LOCK_NB polled to a deadline, then read unheld or fail with a message) would not."""
    cache = mp.EpochCache(tmp_path, max_bytes=BIG)
    key = make(imgs).loader(cache=cache).plan.cache.key
    gc.collect()
    fd = os.open(tmp_path / key / F.USERS, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a pruner mid-removal holds it
        done = threading.Event()
        threading.Thread(target=lambda: (make(imgs).loader(cache=cache), done.set()), daemon=True).start()
        finished = done.wait(2)
    finally:
        os.close(fd)  # lets the stuck bind go on
    assert finished, "bind waited without bound on another process's exclusive lock on 'users'"


# -- findings: a live loader's folder that nobody holds ---------------------------------------
def test_a_loader_after_clear_still_holds_its_folder(imgs, tmp_path):
    """After `EpochCache.clear`, `CacheBinding.write` makes the key's folder again (`_own_folder`)
    with neither a ``users`` lock nor a ``format`` record: the live loader's refilled folder is then
    held by nobody and any `prune()` (another job's) removes it under the loader."""
    cache = mp.EpochCache(tmp_path, max_bytes=BIG)
    loader = make(imgs).loader(cache=cache)
    collect(loader)
    key = loader.plan.cache.key
    cache.clear()
    collect(loader)  # refills the folder
    assert (tmp_path / key).is_dir()
    assert mp.EpochCache(tmp_path, max_bytes=BIG).prune() == [], "prune() removed a live loader's folder"
    assert (tmp_path / key / F.RECORD).exists(), "the refilled folder has no format record"
    hits = dict(loader.stats.cache)
    collect(loader)
    assert loader.stats.cache["hits"] - hits.get("hits", 0) == 24


def test_a_refilled_folder_after_clear_is_not_taken_for_another_formats(imgs, tmp_path):
    """The same folder, left without a record, is 'another format's' to every other binder once it has
    taken no write for `STALE_UNRECORDED` seconds (later epochs only read), and being unheld it is
    removed while its loader is live."""
    cache = mp.EpochCache(tmp_path, max_bytes=BIG)
    loader = make(imgs).loader(cache=cache)
    collect(loader)
    key = loader.plan.cache.key
    cache.clear()
    collect(loader)
    then = time.time() - 2 * F.STALE_UNRECORDED  # its epochs since only read: no write touched it
    os.utime(tmp_path / key, (then, then))
    plain(imgs).loader(cache=mp.EpochCache(tmp_path, max_bytes=BIG))  # another pipeline's loader binds
    assert (tmp_path / key).is_dir(), "another pipeline's bind removed a live loader's folder"


def test_bind_survives_a_pruner_between_making_and_locking_its_folder(imgs, tmp_path, monkeypatch):
    """`hold` retries when the ``users`` it locked was unlinked, but not when a pruner removed the whole
    folder before ``users`` was opened: the open fails (ENOENT), `hold` returns unheld ('a read-only
    folder'), and `remove_stale_temps` then raises FileNotFoundError out of `bind`."""
    cache, pruner = mp.EpochCache(tmp_path, max_bytes=BIG), mp.EpochCache(tmp_path, max_bytes=BIG)
    real = F.own_folder
    fired = []

    def own_then_pruned(path, *args, **kwargs):
        real(path, *args, **kwargs)
        if F.KEY.match(Path(path).name) and not fired:
            fired.append(pruner.prune())  # another process's prune() runs in this window

    monkeypatch.setattr(F, "own_folder", own_then_pruned)
    binding = cache.bind(make(imgs).plan)
    # was: the pruner removed the fresh folder and bind raised; now binders make and hold a folder
    # under the cache folder's lock (shared), which a pruner takes exclusively: it removes nothing
    assert fired == [[]]
    assert binding._users is not None and binding.folder.is_dir()


PRUNER = """
import sys, time
import mediapipe as mp
cache = mp.EpochCache(sys.argv[1], max_bytes=1 << 30)
print("ready", flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    cache.prune()
"""


def test_binding_while_another_process_prunes_never_raises(imgs, tmp_path):
    """The same race for real: one process prunes in a loop, this one binds in a loop (each binding
    dropped before the next). Some binds raise FileNotFoundError (about 1 in 70 here)."""
    plan, cache = make(imgs).plan, mp.EpochCache(tmp_path, max_bytes=BIG)
    child = subprocess.Popen([sys.executable, "-c", PRUNER, str(tmp_path), "2.5"], stdout=subprocess.PIPE, text=True,
                             cwd=REPO)
    errors, binds = [], 0
    try:
        assert child.stdout.readline().strip() == "ready"
        end = time.time() + 1.5
        while time.time() < end:
            try:
                binding = cache.bind(plan)
                binds += 1
                del binding
            except Exception as err:
                errors.append(repr(err))
    finally:
        child.kill()
        child.wait(timeout=30)
    assert binds > 100
    assert not errors, f"{len(errors)} of {binds + len(errors)} binds failed, e.g. {errors[0]}"


# -- findings: leaks and noise --------------------------------------------------------------
def test_dropped_loaders_leave_no_descriptors_open(imgs, tmp_path):
    """`CacheBinding.__del__` closes the ``users`` descriptor but not the ledger's: each dropped loader
    that wrote an entry in this process leaves one descriptor open (also each epoch of a `Schedule`d
    stored op, whose binding is made again per epoch)."""
    gc.collect()
    for i in range(6):
        loader = make(imgs).loader(cache=mp.EpochCache(tmp_path / f"root{i}", max_bytes=BIG))
        collect(loader)  # writes: opens the ledger in this process
        del loader
    gc.collect()
    assert cache_fds(tmp_path) == []


EXITER = """
import sys
import mediapipe as mp
from tests.test_epoch_cache import make
loader = make(sys.argv[1]).loader(cache=mp.EpochCache(sys.argv[2], max_bytes=1 << 30))
"""


def test_a_script_that_ends_with_a_live_loader_prints_no_exception(imgs, tmp_path):
    """`CacheBinding.__del__` runs at interpreter exit after ``os`` is torn down: every script that
    ends with a cached loader alive prints 'Exception ignored in: CacheBinding.__del__ ...
    AttributeError: 'NoneType' object has no attribute 'getpid''."""
    out = subprocess.run([sys.executable, "-c", EXITER, str(imgs), str(tmp_path)], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Exception ignored" not in out.stderr, out.stderr


def test_fork_workers_do_not_keep_another_loaders_folder_held(imgs, tmp_path):
    """A forked worker inherits every ``users`` descriptor of its parent, other loaders' too: with
    persistent workers, a loader dropped in the parent stays held (prune() cannot remove it) as long
    as another loader's workers live."""
    cache = mp.EpochCache(tmp_path, max_bytes=BIG)
    other = plain(imgs).loader(cache=cache)
    other_key = other.plan.cache.key
    loader = make(imgs).loader(num_workers=2, persistent_workers=True, multiprocessing_context="fork", cache=cache)
    it = iter(loader)
    next(it)  # workers forked while ``other`` lives
    del other
    gc.collect()
    try:
        assert cache.prune() == [other_key]
    finally:
        for _ in it:
            pass
        del it, loader
        gc.collect()


def test_prune_of_a_removed_cache_folder_removes_nothing(tmp_path):
    root = tmp_path / "cache"
    cache = mp.EpochCache(root, max_bytes=BIG)
    shutil.rmtree(root)  # e.g. /dev/shm emptied, or rm -rf by hand
    assert cache.prune() == []


# -- guards: attacks the code survives -------------------------------------------------------
def test_hostile_format_records_neither_hang_nor_read_unbounded(imgs, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text(json.dumps({"format": E.FORMAT}))
    root = tmp_path / "cache"
    root.mkdir()
    kinds = ["fifo", "zero", "huge", "dir", "link"]
    for i, kind in enumerate(kinds):
        record = root / (str(i) * 32) / F.RECORD
        record.parent.mkdir()
        if kind == "fifo":
            os.mkfifo(record)
        elif kind == "zero":
            os.symlink("/dev/zero", record)
        elif kind == "huge":
            with open(record, "wb") as f:
                f.truncate(1 << 34)  # sparse 16 GiB
        elif kind == "dir":
            record.mkdir()
        else:
            os.symlink(outside / "keep.txt", record)
    cache = mp.EpochCache(root, max_bytes=BIG)
    assert finishes(lambda: make(imgs).loader(cache=cache), seconds=10)
    assert keys(root) & {str(i) * 32 for i in range(len(kinds))} == set()  # unreadable records: removed
    assert (outside / "keep.txt").read_text() == json.dumps({"format": E.FORMAT})


def test_key_named_links_and_linked_lock_files_are_left_alone(imgs, tmp_path):
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / F.RECORD).write_text(json.dumps({"format": 1}))
    (outside / "dir" / "0.mpc").write_bytes(b"precious")
    (outside / "lockfile").write_bytes(b"precious")
    root = tmp_path / "cache"
    root.mkdir()
    os.symlink(outside / "dir", root / ("c" * 32))  # a link named like a key, to another format's folder
    linked = root / ("d" * 32)
    linked.mkdir()
    (linked / F.RECORD).write_text(json.dumps({"format": 1}))
    os.symlink(outside / "lockfile", linked / F.USERS)  # its lock file a link out of the root
    cache = mp.EpochCache(root, max_bytes=BIG)
    loader = make(imgs).loader(cache=cache)
    assert cache.prune() == []  # the loader holds its own; the link is no key folder; the linked users: unlockable
    cache.clear()
    assert (outside / "dir" / "0.mpc").read_bytes() == b"precious" and (outside / "dir" / F.RECORD).exists()
    assert (outside / "lockfile").read_bytes() == b"precious"
    assert (root / ("c" * 32)).is_symlink()
    del loader


def test_own_folder_with_a_linked_users_is_read_unheld_and_the_target_untouched(imgs, tmp_path):
    cache = mp.EpochCache(tmp_path / "cache", max_bytes=BIG)
    key = make(imgs).loader(cache=cache).plan.cache.key
    gc.collect()
    target = tmp_path / "target"
    target.write_bytes(b"precious")
    users = tmp_path / "cache" / key / F.USERS
    users.unlink()
    os.symlink(target, users)
    loader = make(imgs).loader(cache=cache)
    assert loader.plan.cache._users is None
    assert_same(collect(loader), reference(imgs, epochs=1)[0])
    assert target.read_bytes() == b"precious"


def scheduled(imgs) -> mp.Pipeline:
    """The stored Resize's size a `Schedule` (constant over the epochs run): bound again per epoch."""
    return mp.Pipeline(source=mp.loaders.folder(imgs), decode={"image": mp.decoders.image()},
                       augment=[A.Resize(mp.Schedule({0: 48, 100: 56})), A.RandomResizedCrop(32, scale=(0.2, 1.0)),
                                A.Normalize()], batch_size=5, seed=0, device="cpu")


@pytest.mark.parametrize("pipe, options", [
    (make, {"num_workers": 2, "multiprocessing_context": "fork"}),
    (make, {"num_workers": 2, "multiprocessing_context": "forkserver"}),
    (make, {"num_workers": 2, "worker_type": "thread"}),
    (scheduled, {"num_workers": 2, "persistent_workers": True}),
], ids=["fork", "forkserver", "thread", "schedule-persistent"])
def test_prune_mid_epoch_and_between_epochs_keeps_a_live_loaders_folder(imgs, tmp_path, pipe, options):
    cache, pruner = mp.EpochCache(tmp_path, max_bytes=BIG), mp.EpochCache(tmp_path, max_bytes=BIG)
    loader = pipe(imgs).loader(cache=cache, **options)
    first = collect(loader)
    hits = dict(loader.stats.cache)
    it = iter(loader)
    second = [{k: v.clone() if hasattr(v, "clone") else v for k, v in next(it).items()}]
    assert pruner.prune() == []
    second += [{k: v.clone() if hasattr(v, "clone") else v for k, v in b.items()} for b in it]
    assert pruner.prune() == []
    assert loader.stats.cache["hits"] - hits.get("hits", 0) == 24
    if pipe is make:
        expected = reference(imgs, epochs=2)
        assert_same(first, expected[0])
        assert_same(second, expected[1])


def test_two_loaders_of_one_pipeline_hold_until_both_are_dropped(imgs, tmp_path):
    cache = mp.EpochCache(tmp_path, max_bytes=BIG)
    pipe = make(imgs)
    a, b = pipe.loader(cache=cache), pipe.loader(cache=cache)
    key = a.plan.cache.key
    assert b.plan.cache.key == key
    del a
    gc.collect()
    assert cache.prune() == [] and (tmp_path / key).is_dir()
    del b
    gc.collect()
    assert cache.prune() == [key]


KILLED = """
import sys, time
import mediapipe as mp
from tests.test_epoch_cache import make
loader = make(sys.argv[1]).loader(num_workers=2, persistent_workers=True, multiprocessing_context="fork",
                                  cache=mp.EpochCache(sys.argv[2], max_bytes=1 << 30))
it = iter(loader)
next(it)
print(loader.plan.cache.key, flush=True)
time.sleep(60)
"""


def test_a_sigkilled_loader_with_fork_workers_releases_its_hold(imgs, tmp_path):
    child = subprocess.Popen([sys.executable, "-c", KILLED, str(imgs), str(tmp_path)], stdout=subprocess.PIPE,
                             text=True, cwd=REPO)
    try:
        key = child.stdout.readline().strip()
        assert len(key) == 32, key
        cache = mp.EpochCache(tmp_path, max_bytes=BIG)
        assert cache.prune() == []
    finally:
        child.kill()
        child.wait(timeout=30)
    end, removed = time.time() + 5, []
    while time.time() < end and not removed:  # its workers see their parent gone
        removed = cache.prune()
        time.sleep(0.05)
    assert removed == [key]


def test_a_scheduled_stored_op_makes_only_the_folders_its_epochs_fill(imgs, tmp_path):
    """The loader's own plan, whose stored Resize holds the `Schedule` itself, makes no folder: each
    epoch's plan binds the key of that epoch's size, and only those folders exist, each with entries."""
    pipe = mp.Pipeline(source=mp.loaders.folder(imgs), decode={"image": mp.decoders.image()},
                       augment=[A.Resize(mp.Schedule({0: 48, 1: 56})), A.CenterCrop(40), A.Normalize()],
                       batch_size=6, seed=0, device="cpu")
    loader = pipe.loader(cache=mp.EpochCache(tmp_path, max_bytes=BIG))
    assert keys(tmp_path) == set()
    for _ in range(2):
        assert {b["image"].shape[-1] for b in collect(loader)} == {40}
    found = keys(tmp_path)
    assert len(found) == 2
    for key in found:
        assert len(list((tmp_path / key).glob("*.mpc"))) == 24
