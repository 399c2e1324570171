"""Ray's lifetime: the local Ray the library starts lives as long as the last Ray loader using it
(closing or dropping the loader that started it stops nothing the others use); a Ray the user
started (``ray.init()`` before, or ``ray_address=``) is never shut down; and a driver killed by
SIGKILL leaves no process of its Ray session behind.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from tests.helpers import assert_same, write_image_folder

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("ray-life"), 20, scale=0.3)


@pytest.fixture
def no_ray():
    """No Ray connected when the test starts (an earlier module's may be), none left after it."""
    if ray.is_initialized():
        ray.shutdown()
    yield
    gc.collect()
    if ray.is_initialized():
        ray.shutdown()


def make_pipeline(root) -> mp.Pipeline:
    return mp.Pipeline(source=mp.loaders.folder(root), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(24, scale=(0.3, 1.0)), A.HorizontalFlip(), A.Normalize()],
                       batch_size=4, seed=3, device="cpu")


def ray_loader(pipe, **kwargs):
    kwargs.setdefault("num_workers", 2)
    kwargs.setdefault("timeout", 60)
    return pipe.loader(backend="ray", **kwargs)


def clone(batch: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


# -- processes, read from ps and /proc --------------------------------------------------------
def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line), from ps."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        pid, ppid, *args = line.split(None, 2)
        table[int(pid)] = (int(ppid), args[0] if args else "")
    return table


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (None once it is gone): tells a pid reused apart."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def descendants(root: int, table: dict[int, tuple[int, str]]) -> set[int]:
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


def started_by_raylet(raylet: int) -> set[int]:
    """Processes whose environment names ``raylet`` as theirs (its agents and workers, orphaned or not)."""
    marker = f"RAY_RAYLET_PID={raylet}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def child_processes() -> set[int]:
    """This process's children, but the ps that lists them."""
    return {pid for pid, (ppid, args) in process_table().items() if ppid == os.getpid() and not args.startswith("ps ")}


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)
    return condition()


# -- the tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("let_go", ["close", "drop"])
def test_letting_go_of_the_loader_that_started_ray_stops_nothing_the_others_use(no_ray, images, let_go):
    """A validation loader made once per epoch, say: the first Ray loader starts the local Ray, a
    second joins it; closing or dropping the first leaves the second delivering every batch (and
    a third joining the same Ray); Ray stops with the last of them, and its processes with it."""
    pipe = make_pipeline(images)
    local = pipe.loader(num_workers=0)
    want, want_next = [clone(b) for b in local], [clone(b) for b in local]  # epochs 0 and 1
    children = child_processes()
    first = ray_loader(pipe)
    first_pass = iter(first)
    next(first_pass)  # the first loader started the local Ray and its actors
    assert ray.is_initialized()
    node = ray.get_runtime_context().get_node_id()
    second = ray_loader(pipe)
    second_pass = iter(second)
    got = [clone(next(second_pass))]  # the second has batches in flight on the shared actors
    if let_go == "close":
        first_pass.close()
        first.close()
    else:
        del first, first_pass
        gc.collect()
    got += [clone(b) for b in second_pass]
    assert_same(want, got)
    assert ray.is_initialized() and ray.get_runtime_context().get_node_id() == node
    third = ray_loader(pipe)  # joins the same Ray, after its starter is gone
    assert_same(want, [clone(b) for b in third])
    assert ray.get_runtime_context().get_node_id() == node
    second.close()
    assert ray.is_initialized()
    assert_same(want_next, [clone(b) for b in third])  # its next epoch, after the second closed
    third.close()
    assert not ray.is_initialized()  # the last one closed: the Ray the library started is shut down
    # its daemons and the watchdog that guards them are gone (nothing left as this process's children)
    assert wait_until(lambda: child_processes() <= children, 15), child_processes() - children


def test_the_ray_a_loader_starts_runs_its_actors_at_normal_priority(no_ray, images, monkeypatch):
    """Ray starts its workers at niceness 15 by default: a loader's actors would then starve behind
    any busy process of normal priority (the training's). The Ray a loader starts runs them at 0."""
    monkeypatch.delenv("RAY_worker_niceness", raising=False)  # (the tests' own setting, conftest's)
    pipe = make_pipeline(images)
    loader = ray_loader(pipe)
    try:
        batches = iter(loader)
        next(batches)
        table = process_table()
        actors = [pid for pid in descendants(os.getpid(), table) if table[pid][1].startswith("ray::")]
        assert actors, "no Ray worker process among this process's descendants"
        assert {pid: os.getpriority(os.PRIO_PROCESS, pid) for pid in actors} == dict.fromkeys(actors, 0)
    finally:
        loader.close()


def test_a_ray_the_user_started_is_never_shut_down(no_ray, images):
    """A cluster the loaders reach through ``ray_address=`` keeps running after they close (they
    only disconnect, with the last of them), and a Ray this process connected itself
    (``ray.init()`` before the loaders) is still connected after they close."""
    pipe = make_pipeline(images)
    want = [clone(b) for b in pipe.loader(num_workers=0)]
    cluster = cluster_utils.Cluster(initialize_head=True,
                                    head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        first = ray_loader(pipe, ray_address=cluster.address, num_workers=1)  # (one actor: a faster start)
        next(iter(first))  # the first loader connected this process to the cluster
        second = ray_loader(pipe, ray_address=cluster.address, num_workers=1)
        second_pass = iter(second)
        got = [clone(next(second_pass))]
        first.close()  # the one that connected: the second keeps its connection
        got += [clone(b) for b in second_pass]
        assert_same(want, got)
        assert ray.is_initialized()
        second.close()
        assert not ray.is_initialized()  # disconnected with the last loader ...
        assert cluster.remaining_processes_alive()  # ... and the cluster never shut down

        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)  # the user's own
        node = ray.get_runtime_context().get_node_id()
        loader = ray_loader(pipe, num_workers=1)
        assert_same(want, [clone(b) for b in loader])
        loader.close()
        dropped = ray_loader(pipe, num_workers=1)
        next(iter(dropped))
        del dropped
        gc.collect()
        assert ray.is_initialized() and ray.get_runtime_context().get_node_id() == node
        assert ray.get(ray.remote(lambda: 7).options(num_cpus=0).remote(), timeout=60) == 7
        assert cluster.remaining_processes_alive()
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def test_a_loader_after_the_user_shut_ray_down_starts_afresh_and_the_old_one_closes_quietly(no_ray, images):
    """The user shuts down the Ray a loader uses (at the end of an epoch, say): a new loader gets
    a local Ray and actors of its own, not the dead session's (a new local Ray reuses its job
    id), and closing the old loader neither stops the new one's nor starts yet another Ray."""
    pipe = make_pipeline(images)
    local = pipe.loader(num_workers=0)
    want, want_next = [clone(b) for b in local], [clone(b) for b in local]  # epochs 0 and 1
    old = ray_loader(pipe)
    next(iter(old))  # the library's local Ray, and actors, for the old loader
    ray.shutdown()
    new = ray_loader(pipe)
    assert_same(want, [clone(b) for b in new])
    old.close()
    assert ray.is_initialized()  # the new loader's Ray
    assert_same(want_next, [clone(b) for b in new])  # its actors are still up
    new.close()
    assert not ray.is_initialized()


def test_a_loader_that_joined_the_ray_a_convert_run_started_outlives_the_run(no_ray, images, tmp_path):
    """``convert --engine ray`` and the Ray loaders share the Ray the library starts: the run
    that started it ends, and a loader that joined it mid-run still delivers every batch."""
    from mediapipe.dataset.convert import convert
    from mediapipe.dataset.transcode import TranscodeOptions

    pipe = make_pipeline(images)
    want = [clone(b) for b in pipe.loader(num_workers=0)]
    joined: list = []

    def join_once(manifest, result) -> None:  # between two shards: the run's Ray is up
        if not joined and result is not None:
            loader = ray_loader(pipe, num_workers=1, num_cpus_per_worker=0)  # (the run holds the CPUs)
            batches = iter(loader)
            joined.append((loader, batches, [clone(next(batches))]))

    convert(images, tmp_path / "out", shard_size=10, engine="ray", workers=2,
            options=TranscodeOptions(image_max_side=64), on_commit=join_once)
    loader, batches, got = joined[0]
    assert ray.is_initialized()  # the run is over, its Ray still used
    got += [clone(b) for b in batches]
    assert_same(want, got)
    loader.close()
    assert not ray.is_initialized()


DRIVER = """
import sys, time, mediapipe as mp, ray
pipe = mp.Pipeline(source=mp.loaders.folder(sys.argv[1]), decode={"image": mp.decoders.image()},
                   collate={"image": "list"}, batch_size=4, seed=3, device="cpu")
loader = pipe.loader(backend="ray", num_workers=1, timeout=60)
batches = iter(loader)
next(batches)
node = ray._private.worker.global_worker.node
print("READY", node.session_name, node.all_processes["raylet"][0].process.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads processes from /proc")
def test_a_driver_killed_by_sigkill_leaves_no_process_of_its_ray_session(images):
    """The training process dies without a word (SIGKILL, the OOM killer): within a bounded
    time nothing of its Ray session (daemons, agents, actors) is left running."""
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(images)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    session: set[tuple[int, str | None]] = set()
    try:
        line = driver.stdout.readline()  # (the test's timeout bounds a driver that never gets there)
        assert line.startswith("READY"), line
        _, session_name, raylet = line.split()
        time.sleep(1.0)  # the raylet's agents are up
        table = process_table()
        pids = (descendants(driver.pid, table) | started_by_raylet(int(raylet))
                | {pid for pid, (_, args) in table.items() if session_name in args})
        session = {(pid, start_time(pid)) for pid in pids}
        names = " ".join(table[pid][1] for pid in pids if pid in table)
        assert "raylet" in names and "gcs_server" in names, names

        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)

        def left() -> set[int]:
            now = process_table()
            alive = {pid for pid, started in session if started is not None and start_time(pid) == started}
            alive |= started_by_raylet(int(raylet))
            alive |= {pid for pid, (_, args) in now.items() if session_name in args and "<defunct>" not in args}
            return {pid for pid in alive if pid in now and "<defunct>" not in now[pid][1]}

        assert wait_until(lambda: not left(), 20), {pid: process_table().get(pid) for pid in left()}
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for pid, started in session:  # kill whatever outlived the test's bound
            if started is not None and start_time(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
