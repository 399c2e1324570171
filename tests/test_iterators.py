"""Each ``iter(loader)`` is a pass of its own: its own workers and queues, never mixed with another's."""

from __future__ import annotations

import weakref

import pytest
import torch

from tests.helpers import assert_same, collect, make_pipeline, process_alive


def clone(batch: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


@pytest.mark.parametrize("workers", [0, 2])
def test_two_interleaved_iterators_each_deliver_a_whole_pass(image_folder, workers):
    pipe = make_pipeline(image_folder)
    reference = collect(pipe.loader(num_workers=0))  # epoch 0, uninterrupted
    loader = pipe.loader(num_workers=workers)
    a, b = iter(loader), iter(loader)
    got_a, got_b = [], []
    for step in range(2 * len(reference)):  # a runs ahead of b, then b catches up
        if step % 3 != 2 and len(got_a) < len(reference):
            got_a.append(clone(next(a)))
        elif len(got_b) < len(reference):
            got_b.append(clone(next(b)))
        if len(got_b) == 3:  # the loader's state follows b, the newest pass, not a
            assert loader.state_dict()["sampler"]["position"] == 3
    assert_same(got_a, reference)
    assert_same(got_b, reference)
    for it in (a, b):
        with pytest.raises(StopIteration):
            next(it)
    assert loader.epoch == 1  # b, the current pass, ended epoch 0


@pytest.mark.parametrize("workers", [0, 2])
def test_zip_of_a_loader_with_itself_pairs_equal_batches(image_folder, workers):
    pipe = make_pipeline(image_folder)
    epoch0 = collect(pipe.loader(num_workers=0))
    loader = pipe.loader(num_workers=workers)
    pairs = [(clone(x), clone(y)) for x, y in zip(loader, loader)]
    assert_same([x for x, _ in pairs], epoch0)
    assert_same([y for _, y in pairs], epoch0)
    # the next pass is the next epoch, whole (not an empty rest of epoch 0)
    fresh = pipe.loader(num_workers=0)
    fresh.set_epoch(1)
    assert_same(collect(loader), collect(fresh))


def test_an_iterator_made_mid_pass_starts_at_the_epochs_first_batch_and_the_older_one_goes_on(image_folder):
    """A new iterator is a fresh pass, as torch's DataLoader's: it used to start at the position the
    older one had reached, so a peek, next(iter(loader)), cost the next pass its first batch."""
    pipe = make_pipeline(image_folder)
    reference = collect(pipe.loader(num_workers=0))
    loader = pipe.loader(num_workers=2)
    a = iter(loader)
    first = [clone(next(a)) for _ in range(2)]
    b = iter(loader)  # a has delivered 2 batches of epoch 0: b still starts at batch 0
    assert loader.state_dict()["sampler"]["position"] == 0  # b is the current pass
    from_b = [clone(next(b))]
    rest_a = [clone(x) for x in a]
    from_b += [clone(x) for x in b]
    assert_same(first + rest_a, reference)
    assert_same(from_b, reference)
    assert (loader.epoch, loader.sampler.position) == (1, 0)  # b, the current pass, ended the epoch


def test_set_epoch_while_a_pass_runs_leaves_that_pass_alone(image_folder):
    pipe = make_pipeline(image_folder)
    reference = collect(pipe.loader(num_workers=0))
    loader = pipe.loader(num_workers=0)
    it = iter(loader)
    got = [clone(next(it))]
    loader.set_epoch(5)
    got += [clone(x) for x in it]
    assert_same(got, reference)  # the pass keeps its epoch 0
    assert (loader.epoch, loader.sampler.position) == (5, 0)  # and no longer moves the loader


def test_persistent_workers_are_lent_to_one_iterator_at_a_time(image_folder):
    pipe = make_pipeline(image_folder)
    reference = collect(pipe.loader(num_workers=0))
    loader = pipe.loader(num_workers=2, persistent_workers=True)
    collect(loader)  # epoch 0 starts the persistent workers
    kept = loader._pool
    assert kept is not None and kept.healthy
    loader.set_epoch(0)
    a, b = iter(loader), iter(loader)
    assert a.worker_pids == kept.pids  # a borrows them...
    assert b.worker_pids and set(b.worker_pids).isdisjoint(kept.pids)  # ...b gets workers of its own
    assert loader._pool is None
    got_a, got_b = [clone(x) for x in a], [clone(x) for x in b]
    assert_same(got_a, reference)
    assert_same(got_b, reference)
    assert loader._pool is kept and kept.healthy  # handed back; b's were stopped
    loader.close()
    assert not any(process_alive(p) for p in kept.pids)


def test_closing_or_dropping_an_iterator_stops_its_workers(image_folder):
    import gc

    loader = make_pipeline(image_folder).loader(num_workers=2)
    it = iter(loader)
    next(it)
    pids = it.worker_pids
    assert len(pids) == 2 and all(process_alive(p) for p in pids)
    it.close()
    assert not any(process_alive(p) for p in pids)
    gc.disable()  # what a dropped iterator holds must go without the garbage collector
    try:
        for delivered in (2, 0):  # mid-pass, and before its first batch
            it = iter(loader)
            for _ in range(delivered):
                next(it)
            pids = it.worker_pids
            dropped = weakref.ref(it)
            del it  # no reference cycle: dropping it stops its workers at once
            assert dropped() is None
            assert not any(process_alive(p) for p in pids)
            # a dropped pass keeps what it delivered (a new pass starts at the epoch's first batch)
            assert loader.state_dict()["sampler"]["position"] == delivered
    finally:
        gc.enable()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_script_that_exits_with_a_live_iterator_prints_nothing(image_folder, workers, tmp_path):
    """A loader and an iterator still alive at interpreter exit are finalised quietly: no
    'Exception ignored in __del__' (their modules' globals may already be gone then)."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "import mediapipe as mp\n"
        "from mediapipe import augment as A\n"
        "if __name__ == '__main__':\n"
        f"    pipe = mp.Pipeline(source=mp.loaders.folder({str(image_folder)!r}),\n"
        "                       decode={'image': mp.decoders.image()}, augment=[A.Resize((16, 16))], batch_size=4)\n"
        f"    loader = pipe.loader(num_workers={workers}, persistent_workers={workers > 0}, drop_last=True)\n"
        "    it = iter(loader)\n"
        "    batch = next(it)\n"
        "    print('ok', tuple(batch['image'].shape))\n"
        "    other = iter(loader)\n"
        "    next(other)\n"
        "    for batch in it:\n"
        "        pass\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok (4, 3, 16, 16)"
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
