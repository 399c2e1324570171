"""Worker processes: how they start (fork only when no other thread runs), what they receive
(everything pickles), and that they never outlive the training process or leak on any exit."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.base import Op
from tests.helpers import assert_same, collect, make_pipeline, process_alive

ROOT = Path(__file__).resolve().parents[1]


# -- orphans --------------------------------------------------------------------------------
TRAINER = r"""
import multiprocessing, sys, time
import mediapipe as mp
from mediapipe import augment as A

if __name__ == "__main__":
    pipe = mp.Pipeline(mp.loaders.folder(sys.argv[1]), {"image": mp.decoders.image()}, [A.Resize((16, 16))],
                       batch_size=2, device="cpu")
    loader = pipe.loader(num_workers=2, multiprocessing_context=sys.argv[2], persistent_workers=True)
    it = iter(loader)
    next(it)
    pids = [p.pid for p in multiprocessing.active_children()]
    from multiprocessing import forkserver, resource_tracker
    helpers = [getattr(forkserver._forkserver, "_forkserver_pid", None),
               getattr(resource_tracker._resource_tracker, "_pid", None)]
    print("PIDS", *pids, *[p for p in helpers if p], flush=True)
    time.sleep(300)
"""


def _kill_trainer(script: str, tmp_path: Path, *args: str) -> list[int]:
    """Run a trainer script until it prints "PIDS ..." (its workers and helpers), SIGKILL it
    (no cleanup of any kind runs in it) and return those pids."""
    path = tmp_path / "trainer.py"
    path.write_text(script)
    proc = subprocess.Popen([sys.executable, str(path), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        assert line.startswith("PIDS"), proc.stderr.read()
        pids = [int(p) for p in line.split()[1:]]
        assert len(pids) >= 2 and all(process_alive(p) for p in pids)
    finally:
        proc.kill()
        proc.wait()
    return pids


def _assert_gone_within(pids: list[int], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while any(process_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if process_alive(p)]
    for p in left:  # don't leave them behind for the next test
        os.kill(p, signal.SIGKILL)
    assert not left, f"still running {seconds:.0f} s after the trainer was killed: {left} of {pids}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_workers_exit_when_the_training_process_is_killed(image_folder, tmp_path, method):
    _assert_gone_within(_kill_trainer(TRAINER, tmp_path, str(image_folder), method), 10)


# -- start method -----------------------------------------------------------------------------
_LOCK = threading.Lock()


@dataclass(frozen=True)
class _TakesALock(Op):
    """Takes a module-level lock for each sample, as a decoder or a logging handler might."""

    batched = False  # a per-sample kernel: runs in the workers

    def transform(self, x, params, field, canvas_size):
        with _LOCK:
            return x


@pytest.mark.timeout(120)
def test_workers_start_while_another_thread_holds_a_lock_they_need(image_folder):
    """A forked child inherits a lock held by another thread as held, and nothing in the child
    ever releases it: with plain fork, the first sample blocks forever. The loader sees the
    thread and starts its workers from a clean forkserver instead."""
    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()},
                       [A.Resize((16, 16)), _TakesALock()], batch_size=4, device="cpu")
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with _LOCK:
            held.set()
            done.wait(60)

    holder = threading.Thread(target=hold)  # not a daemon: a live thread of the training process
    holder.start()
    try:
        held.wait()
        loader = pipe.loader(num_workers=2, timeout=20)  # a hang would end as a WorkerError, not hang CI
        got = collect(loader)
        assert loader.stats.seconds["startup"] > 0
    finally:
        done.set()
        holder.join()
    assert_same(got, collect(pipe.loader(num_workers=0)))


class _Finalised:
    """Garbage in a reference cycle whose finaliser records the process that ran it (as a
    dropped DALI pipeline's destructor joins threads that exist only in its parent)."""

    def __init__(self, log: Path) -> None:
        self.log, self.me = log, self

    def __del__(self) -> None:
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()}\n")


@dataclass(frozen=True)
class _Collects(Op):
    """Runs the garbage collector in the worker, as any worker does once it has allocated enough."""

    batched = False  # a per-sample kernel: runs in the workers

    def transform(self, x: torch.Tensor, params: dict, field, canvas_size) -> torch.Tensor:
        import gc

        gc.collect()
        return x


@pytest.mark.timeout(120)
def test_forked_workers_never_free_garbage_they_inherited(image_folder, tmp_path):
    import gc

    log = tmp_path / "finalised.txt"
    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()},
                       [A.Resize((16, 16)), _Collects()], batch_size=4, device="cpu")
    gc.disable()  # the garbage stays uncollected in the trainer until the workers fork
    try:
        for _ in range(10):
            _Finalised(log)
        it = iter(pipe.loader(num_workers=2, multiprocessing_context="fork"))
        pids = set(it.worker_pids)
        assert pids
    finally:
        gc.enable()
    assert len(list(it)) == 6
    finalised_in = {int(line) for line in log.read_text().split()} if log.exists() else set()
    assert not finalised_in & pids


def test_fork_only_when_the_process_runs_one_thread():
    from mediapipe.loaders.start_method import default_start_method, os_thread_count

    stop = threading.Event()
    extra = threading.Thread(target=stop.wait)
    extra.start()
    try:
        assert os_thread_count() >= 2
        assert default_start_method() == "forkserver"
    finally:
        stop.set()
        extra.join()
    # a fresh interpreter whose libraries start no thread (OpenBLAS starts its pool at import)
    code = ("from mediapipe.loaders.start_method import default_start_method, os_thread_count; "
            "print(os_thread_count(), default_start_method())")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["1", "fork"]


def test_a_script_without_a_main_guard_is_not_run_again_by_its_workers(image_folder, tmp_path):
    """Workers started by forkserver do not re-run the training script: one that trains at
    module level (no ``if __name__ == "__main__":``) works, and its imports are not paid again."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sys\n"
        "import mediapipe as mp\n"
        "from mediapipe import augment as A\n"
        "print('RUN', flush=True)\n"
        "pipe = mp.Pipeline(mp.loaders.folder(sys.argv[1]), {'image': mp.decoders.image()}, [A.Resize((16, 16))],"
        " batch_size=4, device='cpu')\n"
        "print('BATCHES', len(list(pipe.loader(num_workers=2, multiprocessing_context='forkserver'))))\n")
    out = subprocess.run([sys.executable, str(script), str(image_folder)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["RUN", "BATCHES", "6"]


# -- what workers receive pickles -------------------------------------------------------------
def _sample_ops() -> list[Op]:
    """One instance of every registered op, with the arguments it requires."""
    from mediapipe.augment.base import registered_ops

    required = {"num_classes": 3, "size": 16, "kernel_size": 3, "mean": (0.5, 0.5, 0.5), "std": (0.2, 0.2, 0.2),
                "degrees": 10.0, "clip_len": 4, "sample_rate": 8000, "length": 4000, "factor": 1.1,
                "ops": (A.HorizontalFlip(), A.ColorJitter(0.2))}
    ops = []
    for _, cls in sorted(registered_ops().items()):
        try:
            ops.append(cls())
            continue
        except (TypeError, ValueError):  # an argument without a usable default
            pass
        import inspect

        params = inspect.signature(cls).parameters
        args = {k: v for k, v in required.items() if k in params}
        ops.append(cls(**args))
    return ops


def test_every_op_pickles_to_an_equal_op():
    ops = _sample_ops()
    assert len(ops) > 20
    for op in ops:
        assert pickle.loads(pickle.dumps(op)) == op, type(op).__name__


def test_the_batch_builder_pickles_and_builds_the_same_batch(image_folder, image_manifest, tmp_path):
    import numpy as np

    from mediapipe.dataset.convert import convert
    from mediapipe.stages.batch_builder import BatchBuilder
    from mediapipe.stages.host_batch import BatchTask

    convert(image_folder, tmp_path / "shards", shard_size="8")
    ops = [A.RandomResizedCrop(24), A.HorizontalFlip(), A.ColorJitter(0.2, 0.2, 0.2), A.Normalize(),
           A.MixUp(num_classes=3)]
    for source in (mp.loaders.folder(image_folder), mp.loaders.manifest(image_manifest),
                   mp.loaders.shards(tmp_path / "shards")):
        pipe = mp.Pipeline(source, {"image": mp.decoders.image()}, ops, batch_size=4, seed=5, device="cpu")
        builder = BatchBuilder(pipe.plan, batch_ops="worker")
        builder(BatchTask(0, 0, np.arange(2), 2))  # live decoders: they stay behind
        copy = pickle.loads(pickle.dumps(builder))
        assert copy.plan._decoders is None
        task = BatchTask(3, 1, np.array([5, 1, 7, 2]), 4, rank=1, world_size=2)
        a, b = builder(task), copy(task)
        assert a.data.keys() == b.data.keys()
        for k in a.data:
            assert torch.equal(a.data[k], b.data[k]) if isinstance(a.data[k], torch.Tensor) else a.data[k] == b.data[k]


# -- no leaks on any exit path ----------------------------------------------------------------
def _shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@dataclass(frozen=True)
class _Slow(Op):
    batched = False  # a per-sample kernel: runs in the workers

    def transform(self, x, params, field, canvas_size):
        time.sleep(0.5)
        return x


def _exits(image_folder) -> dict:
    """Ways a pass ends early: each returns the pids of the workers it had."""

    def keyboard_interrupt() -> list[int]:
        pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()},
                           [A.Resize((16, 16)), _Slow()], batch_size=4, device="cpu")
        it = iter(pipe.loader(num_workers=2))
        pids = it.worker_pids
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as Python sets it (an earlier test may not)
        stop = threading.Event()

        def press_ctrl_c() -> None:  # again until it lands: one that lands in a finaliser is ignored by Python
            while not stop.wait(0.3):
                os.kill(os.getpid(), signal.SIGINT)

        presser = threading.Thread(target=press_ctrl_c)
        presser.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                for _ in it:
                    pass
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a press after the first is not a failure
            stop.set()
            presser.join()
            signal.signal(signal.SIGINT, signal.default_int_handler)
        return pids

    def abandoned() -> list[int]:
        it = iter(make_pipeline(image_folder).loader(num_workers=2))
        next(it)
        pids = it.worker_pids
        del it
        return pids

    def loader_deleted() -> list[int]:
        loader = make_pipeline(image_folder).loader(num_workers=2, persistent_workers=True)
        collect(loader)
        pids = loader._pool.pids
        del loader
        return pids

    return {"keyboard_interrupt": keyboard_interrupt, "abandoned": abandoned, "loader_deleted": loader_deleted}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("way", ["keyboard_interrupt", "abandoned", "loader_deleted"])
def test_no_worker_or_shared_memory_outlives_a_pass_however_it_ends(image_folder, way):
    collect(make_pipeline(image_folder).loader(num_workers=2))  # the forkserver and its helpers run now
    before = _shm_entries()
    pids = _exits(image_folder)[way]()
    assert len(pids) == 2

    def ours_listed() -> list:  # (active_children() reaps what the forkserver has reported)
        return [c for c in __import__("multiprocessing").active_children() if c.name.startswith("mediapipe")]

    deadline = time.monotonic() + 30  # a cap, not a wait: a loaded machine reaps late
    while (any(process_alive(p) for p in pids) or ours_listed()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(process_alive(p) for p in pids)
    assert not ours_listed()
    ours = tuple(f"torch_{p}_" for p in (*pids, os.getpid()))  # torch names a segment by its maker's pid
    assert not {e for e in _shm_entries() - before if e.startswith(ours)}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["put", "terminate", "join"])
def test_a_second_ctrl_c_while_the_pool_closes_leaves_no_worker_running_or_unreaped(image_folder, monkeypatch,
                                                                                    where):
    """Ctrl-C while close() asks idle workers to stop (put), stops busy ones (terminate) or waits (join)."""
    import multiprocessing

    if where == "terminate":  # a batch outstanding: close() terminates
        it = iter(make_pipeline(image_folder).loader(num_workers=2))
        next(it)
        pool = it._pool
    else:  # an idle pool: close() asks each worker to stop
        loader = make_pipeline(image_folder).loader(num_workers=2, persistent_workers=True)
        collect(loader)
        pool = loader._pool
    pids = pool.pids
    owner = type(pool.tasks) if where == "put" else type(pool.procs[0])
    real = getattr(owner, where)
    pressed = []

    def interrupted_once(self, *args, **kwargs):
        if not pressed:
            pressed.append(where)
            raise KeyboardInterrupt  # as if Ctrl-C landed there
        return real(self, *args, **kwargs)

    monkeypatch.setattr(owner, where, interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        pool.close()
    monkeypatch.setattr(owner, where, real)
    assert pressed and not any(process_alive(p) for p in pids)
    assert not [c for c in multiprocessing.active_children() if c.name.startswith("mediapipe")]
    assert all(q._closed for q in [pool.tasks, *pool.control, pool.results])


@pytest.mark.timeout(120)
def test_a_ctrl_c_while_a_pass_closes_hands_the_persistent_workers_back(image_folder, monkeypatch):
    """Ctrl-C while a pass stops its batch stream: its workers still go back to the loader (which stops
    them, the pass being left early), and the next pass is lent persistent workers again."""
    from mediapipe.loaders import workers

    loader = make_pipeline(image_folder).loader(num_workers=2, persistent_workers=True)
    collect(loader)
    pids = loader._pool.pids
    real_map = workers.ProcessPool.map

    class InterruptedOnClose:
        def __init__(self, batches):
            self.batches = batches

        def __iter__(self):
            return self

        def __next__(self):
            return next(self.batches)

        def close(self):
            self.batches.close()
            raise KeyboardInterrupt

    monkeypatch.setattr(workers.ProcessPool, "map", lambda self, *a: InterruptedOnClose(real_map(self, *a)))
    it = iter(loader)
    next(it)
    left_early = it.worker_pids
    with pytest.raises(KeyboardInterrupt):
        it.close()
    monkeypatch.setattr(workers.ProcessPool, "map", real_map)
    assert not any(process_alive(p) for p in left_early)
    again = iter(loader)
    lent = again.worker_pids
    assert again._persistent and len(lent) == 2 and not set(lent) & set(pids)
    reference = make_pipeline(image_folder).loader(num_workers=0)
    reference.set_epoch(1)  # the first pass delivered epoch 0; the one left early was epoch 1's
    assert_same(collect(again), collect(reference))
    assert loader._pool is not None and loader._pool.pids == lent  # kept for the next pass


@pytest.mark.timeout(120)
def test_an_error_in_a_worker_stops_every_worker(tmp_path):
    from tests.helpers import write_image_folder

    write_image_folder(tmp_path, 8, classes=1, seed=4)
    (tmp_path / "class0" / "zz_bad.jpg").write_bytes(b"not a jpeg")
    pipe = mp.Pipeline(mp.loaders.folder(tmp_path), {"image": mp.decoders.image()}, [A.Resize((16, 16))],
                       batch_size=3, device="cpu")
    loader = pipe.loader(num_workers=2, shuffle=False)
    it = iter(loader)
    pids = it.worker_pids
    with pytest.raises(mp.DecodeError, match="zz_bad.jpg"):
        for _ in it:
            pass
    assert not any(process_alive(p) for p in pids)


# -- a worker killed, a pass left early: the next pass still gives the right batches ----------
@pytest.mark.timeout(120)
def test_a_killed_persistent_worker_is_replaced_by_the_next_pass(image_folder):
    pipe = make_pipeline(image_folder)
    reference = collect(pipe.loader(num_workers=0))
    loader = pipe.loader(num_workers=2, persistent_workers=True)
    collect(loader)
    dead = loader._pool.pids[0]
    os.kill(dead, signal.SIGKILL)  # between epochs (the OOM killer...): the next pass must not hang on it
    while process_alive(dead):
        time.sleep(0.01)
    loader.set_epoch(0)
    assert_same(collect(loader), reference)
    loader.set_epoch(0)
    it = iter(loader)
    next(it)
    pids = it.worker_pids  # (an ended pass lists none)
    dead = pids[1]
    os.kill(dead, signal.SIGKILL)  # during a pass: an error, not a hang
    while process_alive(dead):
        time.sleep(0.01)
    with pytest.raises(mp.WorkerError, match="exited unexpectedly"):
        for _ in it:
            pass
    assert loader._pool is None and not any(process_alive(p) for p in pids)
    resumed = collect(loader)  # from where the loader was, with new workers
    assert_same(resumed, reference[len(reference) - len(resumed):])


def test_leaving_a_persistent_pass_early_then_resuming(image_folder):
    pipe = make_pipeline(image_folder)
    reference = collect(pipe.loader(num_workers=0))
    loader = pipe.loader(num_workers=2, persistent_workers=True)
    got = []
    for batch in loader:
        got.append({k: v.clone() for k, v in batch.items()})
        if len(got) == 2:
            break
    state = loader.state_dict()
    assert_same(collect(loader), reference)  # a new pass starts at the epoch's first batch
    loader.load_state_dict(state)
    got += collect(loader)  # and after load_state_dict where the state says
    assert_same(got, reference)
    again = pipe.loader(num_workers=2, persistent_workers=True)
    again.load_state_dict(state)
    assert_same(collect(again), reference[2:])
    loader.close()
    again.close()


def test_a_forked_copy_of_a_loader_leaves_its_workers_alone(image_folder):
    """A process forked from the trainer (a user's fork, another library's worker) holds a
    copy of the loader; closing that copy mid-pass must not stop the trainer's workers."""
    pipe = make_pipeline(image_folder)
    reference = collect(pipe.loader(num_workers=0))
    loader = pipe.loader(num_workers=2)
    it = iter(loader)
    got = [{k: v.clone() for k, v in next(it).items()}]
    pids = it.worker_pids
    child = os.fork()
    if child == 0:  # pragma: no cover - the child only closes its copy and leaves
        try:
            it.close()  # batches in flight: a pool of its own would be terminated
        except BaseException:  # noqa: BLE001 - whatever it raised, what counts is what it did
            pass
        os._exit(0)
    os.waitpid(child, 0)
    assert all(process_alive(p) for p in pids)
    got += collect(it)
    assert_same(got, reference)


# -- interpreter exit --------------------------------------------------------------------------
EXIT_SCRIPT = r"""
import gc, sys
import mediapipe as mp
from mediapipe import augment as A

if __name__ == "__main__":
    pipe = mp.Pipeline(mp.loaders.folder(sys.argv[1]), {"image": mp.decoders.image()}, [A.Resize((16, 16))],
                       batch_size=4, device="cpu")
    loader = pipe.loader(num_workers=2, multiprocessing_context="forkserver")
    if sys.argv[2] == "cycle":  # a trainer object in a reference cycle holds the pass: the GC's, at exit
        gc.disable()
        trainer = {"loader": loader}
        trainer["self"] = trainer
        trainer["it"] = iter(loader)
        del trainer
    else:  # a pass made and never started, alive at exit (its workers may still be starting)
        it = iter(loader)
    print("done", flush=True)
"""


@pytest.mark.timeout(200)
@pytest.mark.parametrize("held", ["cycle", "global"])
def test_a_script_ending_with_a_pass_alive_exits_at_once_and_quietly(image_folder, tmp_path, held):
    """A pool closed by a finaliser during interpreter shutdown used to put its stop message on a
    queue, which starts a thread then, and waited for it forever; a worker still starting
    when multiprocessing's exit handler unlinked the queues' semaphores printed a traceback."""
    script = tmp_path / "exits.py"
    script.write_text(EXIT_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(image_folder), held], capture_output=True, text=True,
                          timeout=150, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    assert "Traceback" not in done.stderr, done.stderr


BUSY_TRAINER = r"""
import sys, threading, time
from dataclasses import dataclass
import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.base import Op


@dataclass(frozen=True)
class Busy(Op):
    batched = False  # a per-sample kernel: runs in the workers

    def transform(self, x, params, field, canvas_size):
        time.sleep(30)  # a long batch: the worker is inside it, with more batches queued, when the trainer dies
        return x


def start():
    pipe = mp.Pipeline(mp.loaders.folder(sys.argv[1]), {"image": mp.decoders.image()}, [A.Resize((16, 16)), Busy()],
                       batch_size=2, device="cpu")
    method = "fork" if sys.argv[2] == "fork_in_thread" else sys.argv[2]
    it = iter(pipe.loader(num_workers=2, multiprocessing_context=method))
    threading.Thread(target=next, args=(it,), daemon=True).start()  # tasks go out; the workers start on them
    time.sleep(3)
    print("PIDS", *it.worker_pids, flush=True)
    time.sleep(300)


if __name__ == "__main__":
    if sys.argv[2] == "fork_in_thread":  # forked by a thread other than the main one: no parent-death signal
        threading.Thread(target=start).start()
    else:
        start()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["forkserver", "fork_in_thread"])
def test_busy_workers_exit_when_the_training_process_is_killed(image_folder, tmp_path, method):
    """Workers in the middle of a long batch, more batches queued: a forkserver's workers used
    to finish every queued batch first (the forkserver, their parent, outlives the trainer
    until they exit), and so did workers forked from a thread (no parent-death signal)."""
    pids = _kill_trainer(BUSY_TRAINER, tmp_path, str(image_folder), method)
    assert len(pids) == 2
    _assert_gone_within(pids, 8)  # each worker sleeps 30 s inside its batch


# -- loaders in other processes ------------------------------------------------------------------
def _in_forked_child(fn) -> tuple[int, str]:
    """Run ``fn`` in a forked child (no more than 60 s); (its exit code, what it wrote)."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out:
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through ``out`` and leaves
            code = 1
            try:
                signal.alarm(60)  # a hang ends the child, and the test, instead of CI
                out.write(str(fn()))
                code = 0
            except BaseException as err:  # noqa: BLE001 - reported to the parent
                out.write(f"{type(err).__name__}: {err}")
            finally:
                out.flush()
                os._exit(code)
        _, status = os.waitpid(child, 0)
        out.seek(0)
        return os.waitstatus_to_exitcode(status), out.read()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("worker_type", ["process", "thread"])
def test_a_pass_used_in_a_forked_child_is_refused_and_the_parent_goes_on(image_folder, worker_type):
    """A pass's workers are its process's: a forked copy of the pass used to wait forever for
    threads that do not exist in the child, or stop on a bare AssertionError with processes."""
    pipe = make_pipeline(image_folder)
    reference = collect(pipe.loader(num_workers=0))
    it = iter(pipe.loader(num_workers=2, worker_type=worker_type))
    got = [{k: v.clone() for k, v in next(it).items()}]
    code, said = _in_forked_child(lambda: next(it))
    assert code == 1 and said.startswith("WorkerError") and f"process {os.getpid()}" in said, said
    got += collect(it)
    assert_same(got, reference)


@pytest.mark.timeout(180)
def test_a_forked_child_starts_its_own_forkserver(image_folder):
    """A process forked after its parent started the forkserver inherits multiprocessing's record
    of it; its first forkserver pool used to fail with ChildProcessError (that server is not its
    child)."""
    from mediapipe.loaders.start_method import warm_start

    pipe = make_pipeline(image_folder)
    reference = [b["index"].tolist() for b in pipe.loader(num_workers=0)]
    warm_start("forkserver")  # this process's forkserver runs
    code, said = _in_forked_child(lambda: [b["index"].tolist() for b in
                                           pipe.loader(num_workers=2, multiprocessing_context="forkserver")])
    assert code == 0, said
    assert said == str(reference)


def _loader_in_a_daemon(queue, root) -> None:
    pipe = make_pipeline(root)
    try:
        pipe.loader(num_workers=2)
        queue.put("no error")
    except Exception as err:  # noqa: BLE001 - reported to the test
        queue.put(f"{type(err).__name__}: {err}")
    queue.put([b["index"].tolist() for b in pipe.loader(num_workers=2, worker_type="thread")])


@pytest.mark.timeout(180)
def test_a_loader_in_a_daemonic_process_says_what_to_do(image_folder):
    """multiprocessing refuses children to a daemonic process (a Pool worker) with a bare
    AssertionError at the first pass; the loader says so when it is made, and threads work."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_loader_in_a_daemon, args=(queue, image_folder), daemon=True)
    proc.start()
    try:
        said, batches = queue.get(timeout=120), queue.get(timeout=120)
    finally:
        proc.join(10)
    assert said.startswith("WorkerError") and "daemonic" in said and "worker_type='thread'" in said, said
    assert batches == [b["index"].tolist() for b in make_pipeline(image_folder).loader(num_workers=0)]


@dataclass(frozen=True)
class _CrashesInC(Op):
    """Reads address 0 through ctypes in the sample stage: a segfault in native code, as a
    decoder's library might on a hostile file."""

    batched = False  # a per-sample kernel: runs in the workers

    def transform(self, x, params, field, canvas_size):
        import ctypes
        import faulthandler

        if os.environ.get("MEDIAPIPE_TEST_MAIN") != str(os.getpid()):
            faulthandler.disable()  # pytest's handler, inherited, would dump this crash on the terminal
            ctypes.string_at(0)
        return x


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_worker_that_segfaults_is_named_with_its_signal(image_folder, monkeypatch, method):
    monkeypatch.setenv("MEDIAPIPE_TEST_MAIN", str(os.getpid()))
    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()},
                       [A.Resize((16, 16)), _CrashesInC()], batch_size=4, device="cpu")
    it = iter(pipe.loader(num_workers=2, multiprocessing_context=method))
    pids = it.worker_pids
    with pytest.raises(mp.WorkerError, match=r"exited unexpectedly killed by SIGSEGV \(a crash in native code"):
        next(it)
    assert not any(process_alive(p) for p in pids)  # the other worker is stopped too


@pytest.mark.timeout(120)
def test_a_stopped_worker_ends_the_pass_at_the_timeout_and_is_killed(image_folder):
    """SIGSTOP (a debugger, a frozen cgroup): the worker lives but delivers nothing. With
    ``timeout`` the pass ends with a WorkerError, and closing it kills the stopped workers
    (SIGTERM stays pending on a stopped process). Batches a worker had already sent when it
    stopped used to hold the consumer forever, whatever the timeout: receiving one fetches its
    tensors' file descriptors from the worker that made it."""
    # the timeout covers the first batch too (the workers' start): long enough for a loaded CI machine
    loader = make_pipeline(image_folder, batch_size=2).loader(num_workers=2, timeout=5)
    it = iter(loader)
    next(it)
    time.sleep(1.0)  # the workers finish the batches in flight and send them; nobody takes them yet
    pids = it.worker_pids
    for p in pids:
        os.kill(p, signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(mp.WorkerError, match="no batch from the loader workers in 5 s"):
        for _ in it:
            pass
    assert time.monotonic() - t0 < 30
    assert not any(process_alive(p) for p in pids)


@pytest.mark.timeout(120)
def test_closing_workers_that_do_not_stop_waits_one_deadline_for_all_not_one_each(image_folder, monkeypatch):
    """Stopped workers (SIGTERM stays pending) are waited for JOIN_SECONDS together, then killed
    together: closing 4 of them waits no longer than 2 (it waited JOIN_SECONDS for each in turn)."""
    from mediapipe.loaders import workers

    it = iter(make_pipeline(image_folder, batch_size=2).loader(num_workers=4))
    next(it)
    pool, pids = it._pool, it.worker_pids
    for p in pids:
        os.kill(p, signal.SIGSTOP)
    process_type = type(pool.procs[0])
    join, waits = process_type.join, []

    def timed_join(self, timeout=None):
        t0 = time.monotonic()
        try:
            return join(self, timeout)
        finally:
            waits.append((self.pid, timeout, time.monotonic() - t0))

    monkeypatch.setattr(process_type, "join", timed_join)
    pool.close()
    monkeypatch.setattr(process_type, "join", join)
    assert not any(process_alive(p) for p in pids)
    ours = [(timeout, spent) for pid, timeout, spent in waits if pid in pids]  # (not another pool's, collected now)
    assert all(timeout is not None for timeout, _ in ours)
    first_round = [timeout for timeout, _ in ours[: len(pids)]]  # before any kill: one shared deadline
    assert sum(first_round) <= workers.JOIN_SECONDS * len(pids) / 2
    assert sum(spent for _, spent in ours) < 2 * workers.JOIN_SECONDS + 5  # (5: a loaded machine's reaping)


@pytest.mark.timeout(60)
def test_a_stuck_thread_worker_ends_the_pass_at_the_timeout(image_folder):
    """A read or decode that never returns in a thread worker (a hung network mount): with
    ``timeout`` the pass ends with a WorkerError instead of waiting forever (it did, as torch's
    DataLoader does with threads); the stuck thread is left to finish on its own."""
    loader = make_pipeline(image_folder, batch_size=2).loader(num_workers=2, worker_type="thread", timeout=3)
    build, release = loader.builder, threading.Event()

    def stuck_after_the_first(task):
        if task.number >= 1:
            release.wait(30)
        return build(task)

    loader.builder = stuck_after_the_first
    t0, delivered = time.monotonic(), 0
    with pytest.raises(mp.WorkerError, match="thread workers in 3 s"):
        for _ in loader:
            delivered += 1
    assert time.monotonic() - t0 < 15 and delivered <= 1
    release.set()
