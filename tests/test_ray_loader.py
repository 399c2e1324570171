"""pipe.loader(backend="ray"): the local loader's batches, resume, errors and stats, bounded
in-flight batches, and faults (an actor killed, a node removed) that cost time, not data.

One small `ray.cluster_utils.Cluster` (nodes of one CPU each) serves the whole module.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mediapipe as mp
from mediapipe import augment as A
from tests.helpers import assert_same, collect, state_after, write_image_folder

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(images):
    """A head node and one more, one CPU each (a third node comes and goes in the fault test),
    and a loader that keeps two actors up for the module: the tests' loaders share them (a
    Ray loader's actors stop when the last loader using them goes)."""
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False, configure_logging=False)
    keeper = make_pipeline(images).loader(backend="ray", num_workers=2)
    keeper.actors()
    deadline = time.monotonic() + 120
    while len(keeper.worker_pids) < 2 and time.monotonic() < deadline:  # both up before any test counts
        time.sleep(0.2)
    try:
        yield c
    finally:
        keeper.close()
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_image_folder(tmp_path_factory.mktemp("ray-images"), 20, scale=0.3)


def make_pipeline(root, batch_size: int = 4, **kwargs) -> mp.Pipeline:
    return mp.Pipeline(source=mp.loaders.folder(root), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(24, scale=(0.3, 1.0)), A.HorizontalFlip(), A.Normalize()],
                       batch_size=batch_size, seed=3, device="cpu", **kwargs)


def ray_loader(pipe, **kwargs):
    kwargs.setdefault("num_workers", 2)
    kwargs.setdefault("timeout", 60)
    return pipe.loader(backend="ray", **kwargs)


def test_import_mediapipe_does_not_import_ray():
    code = ("import sys, mediapipe, mediapipe.pipeline, mediapipe.loaders, mediapipe.loaders.loader; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_batches_equal_the_local_loaders_for_each_rank(cluster, images):
    pipe = make_pipeline(images)
    for rank, in_workers in ((0, True), (1, False)):  # the batch stage in the actors, then here
        local = collect(pipe.loader(num_workers=0, rank=rank, world_size=2))
        loader = ray_loader(pipe, rank=rank, world_size=2, batch_ops_in_workers=in_workers)
        try:
            got = collect(loader)
            assert loader.epoch == 1
            assert_same(local, got)
            assert loader.stats.batches == len(local) and loader.stats.samples == sum(len(b["index"]) for b in local)
            assert loader.stats.seconds["decode"] > 0  # the actors' stage seconds come back with each batch
        finally:
            loader.close()


def test_batches_in_the_object_store_equal_the_local_loaders(cluster, images):
    """Float batches of 4 x 3 x 96 x 96 (442 KB: the object store's, not inlined in the reply),
    written by the actors into buffers they recycle from batch to batch."""
    pipe = mp.Pipeline(source=mp.loaders.folder(images), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(96), A.HorizontalFlip(), A.Normalize()],
                       batch_size=4, seed=5, device="cpu")
    want = collect(pipe.loader(num_workers=0))
    loader = ray_loader(pipe)
    try:
        got = []
        for batch in loader:
            got.append(batch)  # every batch kept alive, none cloned
            time.sleep(0.02)
        assert got[0]["image"].nbytes > 100 << 10
        assert_same(want, got)
    finally:
        loader.close()


def test_resume_mid_epoch_and_next_epoch(cluster, images):
    pipe = make_pipeline(images)
    local = pipe.loader(num_workers=0)
    epoch0, epoch1 = collect(local), collect(local)
    loader = ray_loader(pipe)
    try:
        state = state_after(loader, 2)
    finally:
        loader.close()
    resumed = ray_loader(pipe)
    resumed.load_state_dict(state)
    try:
        assert_same(epoch0[2:], collect(resumed))
        assert_same(epoch1, collect(resumed))  # the epoch advanced by itself
    finally:
        resumed.close()


def test_on_error_skip_and_replace_count_like_the_local_loader_and_raise_names_the_file(cluster, tmp_path):
    root = write_image_folder(tmp_path / "imgs", 12, scale=0.3)
    bad = sorted(root.rglob("*.jpg"))[5]
    bad.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    for policy in ("skip", "replace"):
        pipe = make_pipeline(root, on_error=policy)
        local = pipe.loader(num_workers=0)
        want = collect(local)
        loader = ray_loader(pipe)
        try:
            assert_same(want, collect(loader))  # the same stand-in (or empty slot), drawn by the same key
            assert loader.stats.errors == local.stats.errors and sum(loader.stats.errors.values()) == 1
            assert str(bad) in loader.stats.failed[0]
        finally:
            loader.close()
    loader = ray_loader(make_pipeline(root))
    try:
        with pytest.raises(mp.DecodeError) as err:
            collect(loader)
        assert err.value.path == str(bad)  # the builder's own error, not Ray's wrapper
    finally:
        loader.close()


def test_in_flight_batches_are_bounded(cluster, images):
    pipe = make_pipeline(images)
    loader = ray_loader(pipe, max_in_flight=2)
    pool = loader.actors()
    submitted, delivered, most = [], [0], [0]
    submit = pool.submit

    def counting(builder, task, timeout):
        submitted.append(task.number)
        most[0] = max(most[0], len(submitted) - delivered[0])
        return submit(builder, task, timeout)

    pool.submit = counting
    try:
        for _ in loader:
            time.sleep(0.05)  # a slow consumer: the actors must wait for it, not run ahead
            delivered[0] += 1
        # two in Ray, plus the one batch the iterator finishes ahead of the consumer (as the local loader does)
        assert most[0] <= 2 + 1 and len(submitted) == delivered[0] == len(loader)
    finally:
        del pool.submit  # (the pool is shared with the other tests' loaders)
        loader.close()


def test_two_iterators_on_one_loader_each_get_every_batch(cluster, images):
    pipe = make_pipeline(images)
    want = collect(pipe.loader(num_workers=0))
    loader = ray_loader(pipe)
    try:
        a, b = iter(loader), iter(loader)
        got_a, got_b = [], []
        for x, y in zip(a, b):
            got_a.append(x)
            got_b.append(y)
        assert_same(want, collect(got_a))
        assert_same(want, collect(got_b))
    finally:
        loader.close()


def test_a_killed_actor_costs_time_not_data_and_resume_after_it(cluster, images):
    armed, fired, driver = str(images.parent / "kill-armed"), str(images.parent / "kill-fired"), os.getpid()

    class _Slow(A.Normalize):  # (local: pickled by value, as a script's own op would be)
        """Normalize, slowly; once armed, the first actor to reach this point kills itself: it dies
        mid-batch whatever the machine's load (an actor whose batches were all built would lose nothing).
        The kernel itself is slowed: the flip before it is absorbed, so `apply_fields` is not called."""

        def _normalize(self, x, **mirror):
            time.sleep(0.3)
            if os.getpid() != driver and os.path.exists(armed):
                try:
                    os.close(os.open(fired, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:  # another actor died already
                    pass
                else:
                    os.kill(os.getpid(), signal.SIGKILL)
            return super()._normalize(x, **mirror)

    pipe = mp.Pipeline(source=mp.loaders.folder(images), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(24, scale=(0.3, 1.0)), A.HorizontalFlip(), _Slow()],
                       batch_size=4, seed=3, device="cpu")
    want = collect(pipe.loader(num_workers=0))
    loader = ray_loader(pipe)
    try:
        it = iter(loader)
        got = [next(it)]
        pool = loader.actors()
        replaced = pool.replaced
        Path(armed).touch()  # the next batch built dies with its actor
        got += list(it)
        assert os.path.exists(fired)
        assert_same(want, collect(got))  # none missing, none twice, same values
        assert pool.replaced > replaced and loader.rebuilt >= 1
        # resume after a fault: a state taken after it continues where it says
        state = state_after(loader, 3)
        os.kill(loader.worker_pids[-1], signal.SIGKILL)
    finally:
        loader.close()
    resumed = ray_loader(pipe)
    resumed.load_state_dict(state)
    try:
        local = pipe.loader(num_workers=0)
        local.set_epoch(1)
        assert_same(collect(local)[3:], collect(resumed))
    finally:
        resumed.close()


def test_a_batch_that_kills_every_actor_fails_after_max_retries(cluster, images):
    class _Crash(A.Normalize):  # (local: pickled by value, as a script's own op would be)
        """An op whose kernel kills its process (a decoder's segfault, as the actor sees it)."""

        def apply_fields(self, data, params):
            os.kill(os.getpid(), signal.SIGKILL)

    pipe = mp.Pipeline(source=mp.loaders.folder(images), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(24), _Crash()], batch_size=4, seed=0, device="cpu")
    loader = ray_loader(pipe, max_retries=1, num_workers=1)
    try:
        with pytest.raises(mp.WorkerError, match="lost 2 times"):
            collect(loader)
    finally:
        loader.close()


def test_a_node_removed_mid_epoch_loses_no_batch(cluster, images):
    pipe = make_pipeline(images, batch_size=2)
    want = collect(pipe.loader(num_workers=0))
    node = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    loader = ray_loader(pipe, num_workers=3)  # one actor per CPU: one of them lives on the new node
    try:
        pool = loader.actors()
        deadline = time.monotonic() + 60
        while len(pool.nodes) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert node.node_id in pool.nodes
        it = iter(loader)
        got = [next(it)]  # every actor holds batches of the epoch now
        cluster.remove_node(node)
        got += list(it)
        indices = [int(i) for b in got for i in b["index"]]
        assert len(indices) == len(set(indices)) == 20  # none missing, none twice
        assert_same(want, collect(got))
        assert loader.rebuilt >= 1  # the removed node's batches were built again elsewhere
    finally:
        loader.close()


def alive_actors() -> int:
    return sum(1 for a in ray._private.state.actors().values() if a["State"] == "ALIVE")


def driver_references() -> int:
    return len(ray._private.worker.global_worker.core_worker.get_all_reference_counts())


def wait_until(condition, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)
    return condition()


def settled_references(seconds: float = 30) -> int:
    """The driver's reference count once earlier tests' references are released (Ray frees
    them asynchronously): the same count twice, half a second apart."""
    gc.collect()
    last, deadline = driver_references(), time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = driver_references()
        if now == last:
            break
        last = now
    return last


def test_a_loader_dropped_mid_epoch_leaves_no_actor_and_no_object(cluster, images):
    pipe = make_pipeline(images)
    actors = alive_actors()
    for _ in range(2):
        references = settled_references()
        # its own pool (actors of no CPU: the module's loaders hold the cluster's), no other user
        loader = ray_loader(pipe, num_cpus_per_worker=0)
        it = iter(loader)
        next(it), next(it)  # batches in flight, the builder in the object store
        assert wait_until(lambda: alive_actors() == actors + 2)
        assert driver_references() > references
        del it, loader  # dropped, not closed
        gc.collect()
        assert wait_until(lambda: alive_actors() == actors), alive_actors()
        # no batch, builder or actor handle held any more
        assert wait_until(lambda baseline=references: driver_references() <= baseline), (driver_references(), references)


def test_two_ranks_on_one_cluster_get_disjoint_batches_equal_to_the_local_loaders(cluster, images):
    pipe = make_pipeline(images)
    local = [collect(pipe.loader(num_workers=0, rank=r, world_size=2)) for r in (0, 1)]
    loaders = [ray_loader(pipe, rank=r, world_size=2) for r in (0, 1)]
    try:
        got: list[list[dict]] = [[], []]
        for a, b in zip(*loaders):  # both ranks' batches in flight on the same actors at once
            got[0].append({k: v.clone() for k, v in a.items()})
            got[1].append({k: v.clone() for k, v in b.items()})
        for r in (0, 1):
            assert_same(local[r], got[r])
        seen = [{int(i) for b in got[r] for i in b["index"]} for r in (0, 1)]
        assert not seen[0] & seen[1] and seen[0] | seen[1] == set(range(20))
    finally:
        for loader in loaders:
            loader.close()


def test_an_address_where_no_cluster_answers_is_refused_in_bounded_time(images):
    """(In a process of its own: this one is connected to the test cluster.) Nothing listens
    on the port; a stray RAY_ADDRESS naming it does not stop ray_address=None starting a local Ray."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = f"""
import time, mediapipe as mp
pipe = mp.Pipeline(source=mp.loaders.folder({str(images)!r}), decode={{"image": mp.decoders.image()}},
                   collate={{"image": "list"}}, batch_size=4, seed=3, device="cpu")
for address in ("127.0.0.1:{port}", "ray://127.0.0.1:{port}", "auto"):
    t0 = time.monotonic()
    try:
        next(iter(pipe.loader(backend="ray", ray_address=address, num_workers=1)))
    except ConnectionError as err:
        assert "no Ray cluster answers at 127.0.0.1:{port}" in str(err), err
        assert time.monotonic() - t0 < 30, time.monotonic() - t0
    else:
        raise SystemExit(f"{{address}}: connected")
loader = pipe.loader(backend="ray", num_workers=1, timeout=60)
print(sum(len(b["index"]) for b in loader))
loader.close()
"""
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "20"
