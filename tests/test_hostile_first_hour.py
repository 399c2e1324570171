"""Issue 28's first-hour changes attacked as a hostile newcomer would: `sample-data` into a file, a
stale staging folder of a killed run, two runs on one folder, an empty --only; an augment that is a
lambda or a torch module; what `verify` claims on a dataset it could not read whole."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest
import torch

import mediapipe as mp
from mediapipe.cli import main as cli
from mediapipe.cli import sample_data
from mediapipe.errors import PipelineError
from tests.helpers import write_image_folder


# -- sample-data ----------------------------------------------------------------------------------
def test_sample_data_into_a_file_is_an_error_naming_it_not_a_traceback(tmp_path: Path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for target in (afile, afile / "sub"):
        assert cli(["sample-data", str(target), "--only", "train.rec"]) == 2
        err = capsys.readouterr().err
        assert "mediapipe sample-data: error:" in err and str(target) in err and "Traceback" not in err


def test_sample_data_only_with_no_name_is_refused(tmp_path: Path, capsys):
    assert cli(["sample-data", str(tmp_path / "d"), "--only", " , "]) == 2
    assert "--only" in capsys.readouterr().err and not (tmp_path / "d").exists()


def _dead_pid() -> int:
    pid = 2 ** 22 - 7
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


def test_sample_data_removes_a_killed_runs_staging_folder_and_keeps_a_live_ones(tmp_path: Path):
    stale, live = tmp_path / f".sample-data-{_dead_pid()}", tmp_path / f".sample-data-{os.getppid()}"
    for folder in (stale, live):
        (folder / "train").mkdir(parents=True)
    assert sample_data.write_sample_data(tmp_path, []) == 0
    assert not stale.exists() and live.exists()


def test_two_sample_data_runs_on_one_folder_take_turns(tmp_path: Path):
    """A second run waits for the first (a lock in DIR) instead of both replacing the same folders."""
    held = os.open(tmp_path, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        result: list[int] = []
        second = threading.Thread(target=lambda: result.append(sample_data.write_sample_data(tmp_path, [])))
        second.start()
        time.sleep(0.5)
        assert second.is_alive() and not result  # waiting for the lock
        fcntl.flock(held, fcntl.LOCK_UN)
    finally:
        os.close(held)
    second.join(10)
    assert result == [0]


# -- augment that is not a list of ops ------------------------------------------------------------
@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_image_folder(tmp_path_factory.mktemp("hostile-first-hour"), 4, classes=2)


@pytest.mark.parametrize("augment, name", [
    (lambda x: x, "function"), (torch.nn.ReLU(), "ReLU"), ("HorizontalFlip", "str"), ({"flip": mp.augment.HorizontalFlip()}, "dict"), (mp.augment.HorizontalFlip, "HorizontalFlip"),
])
def test_an_augment_that_is_not_a_list_of_ops_is_a_pipeline_error_naming_it(images: Path, augment, name):
    with pytest.raises(PipelineError, match=f"augment is .*{name}.*not a list of ops"):
        mp.Pipeline(mp.loaders.folder(images), {"image": mp.decoders.image()}, augment, batch_size=2, device="cpu")


@pytest.mark.parametrize("op, hint", [
    (lambda x: x, "function"), (torch.nn.Identity(), "torch.nn.Module"), (mp.augment.HorizontalFlip, r"HorizontalFlip\(\)"),
])
def test_a_function_module_or_op_class_in_the_list_says_what_to_do(images: Path, op, hint):
    with pytest.raises(PipelineError, match=f"augment\\[1\\] is .*not an op: .*{hint}"):
        mp.Pipeline(mp.loaders.folder(images), {"image": mp.decoders.image()}, [mp.augment.HorizontalFlip(), op],
                    batch_size=2, device="cpu").loader(num_workers=1)


# -- verify ---------------------------------------------------------------------------------------
def test_verify_of_a_dataset_missing_a_shard_does_not_claim_it_decoded_every_sample(tmp_path: Path, capsys):
    images = write_image_folder(tmp_path / "images", 6)
    out = tmp_path / "out"
    assert cli(["convert", str(images), str(out), "--workers", "1", "--no-progress", "--shard-size", "4"]) == 0
    sorted(out.rglob("*.tar"))[0].unlink()
    capsys.readouterr()
    assert cli(["verify", str(out)]) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert "decoded every member" not in said or "could read" in said
    assert "2 of the manifest's 6 samples" in said
