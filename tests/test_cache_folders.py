"""The epoch cache's key folders are not left behind: a folder of another entry format that no live
loader holds is removed when a cache is bound, `EpochCache.prune` removes every folder no live loader
holds, and neither touches a folder a loader (in this process or another) still holds."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time

import mediapipe as mp
from mediapipe.stages import cache_folders as F
from mediapipe.stages import epoch_cache as E
from tests.helpers import assert_same, collect
from tests.test_epoch_cache import make, reference


def old_folder(root, name: str, record: object | None = None, age: float = 0.0):
    """A key folder as another library version left it: an entry, a ledger, its ``format`` record
    (None: none, as before records), its times ``age`` seconds back."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "0.mpc").write_bytes(b"MPEC" + bytes(1000))
    (folder / "ledger").write_bytes((1004).to_bytes(8, "little"))
    if record is not None:
        (folder / F.RECORD).write_text(record if isinstance(record, str) else json.dumps(record))
    then = time.time() - age
    os.utime(folder, (then, then))
    return folder


def test_binding_removes_other_formats_unheld_folders_and_keeps_this_formats(image_folder, tmp_path):
    unrecorded_old = old_folder(tmp_path, "a" * 32, age=F.STALE_UNRECORDED + 60)
    unrecorded_recent = old_folder(tmp_path, "b" * 32)  # perhaps an older library's live loader: kept
    older_format = old_folder(tmp_path, "c" * 32, {"format": E.FORMAT - 1})
    damaged_record = old_folder(tmp_path, "d" * 32, "{not json")
    other_pipeline = old_folder(tmp_path, "e" * 32, {"format": E.FORMAT}, age=10 * F.STALE_UNRECORDED)
    not_a_key = old_folder(tmp_path, "my-notes", {"format": 1}, age=10 * F.STALE_UNRECORDED)
    loader = make(image_folder).loader(cache=mp.EpochCache(tmp_path, max_bytes=1 << 30))
    assert not unrecorded_old.exists() and not older_format.exists() and not damaged_record.exists()
    assert unrecorded_recent.exists() and other_pipeline.exists() and not_a_key.exists()
    own = loader.plan.cache.folder
    assert json.loads((own / F.RECORD).read_text()) == {"format": E.FORMAT}
    assert_same(collect(loader), reference(image_folder, epochs=1)[0])  # the extra files are not entries
    assert loader.plan.cache.entries_bytes() == sum(p.stat().st_size for p in own.glob("*.mpc"))


def test_prune_keeps_what_live_loaders_hold_and_removes_the_rest(image_folder, tmp_path):
    cache = mp.EpochCache(tmp_path, max_bytes=1 << 30)
    other_pipeline = old_folder(tmp_path, "e" * 32, {"format": E.FORMAT})
    loader = make(image_folder).loader(num_workers=2, cache=cache)
    collect(loader)  # entries written by the workers
    held = loader.plan.cache.folder
    assert cache.prune() == ["e" * 32]
    assert held.is_dir() and not other_pipeline.exists()
    hits = dict(loader.stats.cache)
    collect(loader)
    assert loader.stats.cache["hits"] - hits.get("hits", 0) == 24  # nothing of the held folder was removed
    del loader
    gc.collect()
    assert cache.prune() == [held.name] and not held.exists()


HOLDER = """
import sys, time
import mediapipe as mp
from tests.test_epoch_cache import make
loader = make(sys.argv[1]).loader(cache=mp.EpochCache(sys.argv[2], max_bytes=1 << 30))
print(loader.plan.cache.key, flush=True)
time.sleep(60)
"""


def test_a_folder_another_process_holds_is_kept_until_that_process_is_gone(image_folder, tmp_path):
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(image_folder), str(tmp_path)],
                             stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    try:
        key = child.stdout.readline().strip()
        assert len(key) == 32, key
        (tmp_path / key / F.RECORD).write_text(json.dumps({"format": E.FORMAT - 1}))  # even another format's
        cache = mp.EpochCache(tmp_path, max_bytes=1 << 30)
        assert cache.prune() == [] and (tmp_path / key).is_dir()
    finally:
        child.kill()
        child.wait(timeout=30)
    assert cache.prune() == [key] and not (tmp_path / key).exists()  # SIGKILL released its hold


def test_a_folder_whose_lock_file_cannot_be_opened_is_read_without_a_hold(image_folder, tmp_path):
    cache = mp.EpochCache(tmp_path, max_bytes=1 << 30)
    collect(make(image_folder).loader(cache=cache))
    gc.collect()
    folder = next(p for p in tmp_path.iterdir() if F.KEY.match(p.name))
    (folder / F.USERS).unlink()
    (folder / F.USERS).mkdir()  # as on a read-only folder: no lock file can be opened
    loader = make(image_folder).loader(cache=cache)
    hits = dict(loader.stats.cache)
    collect(loader)
    assert loader.stats.cache["hits"] - hits.get("hits", 0) == 24 and loader.plan.cache._users is None


def test_without_the_cache_folders_lock_a_folder_pruned_while_made_is_made_again(image_folder, tmp_path,
                                                                                 monkeypatch):
    (tmp_path / F.ROOT_LOCK).mkdir()  # no lock file can be taken: binders and pruners are not kept apart
    cache, pruner = mp.EpochCache(tmp_path, max_bytes=1 << 30), mp.EpochCache(tmp_path, max_bytes=1 << 30)
    real, fired = F.own_folder, []

    def made_then_pruned(path, *args, **kwargs):
        real(path, *args, **kwargs)
        if F.KEY.match(os.path.basename(path)) and not fired:
            fired.append(pruner.prune())  # another process's prune() in the window before the hold

    monkeypatch.setattr(F, "own_folder", made_then_pruned)
    binding = cache.bind(make(image_folder).plan)
    assert fired == [[binding.key]]  # removed once, then made again and held
    assert binding._users is not None and binding.folder.is_dir()
    assert pruner.prune() == []
