"""The video bench runners: small inputs end, the DALI peers say why they are unavailable."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediapipe.bench import video as bv


@pytest.fixture(scope="module")
def one_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench_videos")
    bv.write_video(root / "only.mkv", bv.render_frames(48, 64, 12, seed=1), gop=6)
    return root


def test_run_mediapipe_fills_a_batch_from_one_file_and_stops(one_video):
    out = list(bv.run_mediapipe(one_video, workers=0, device="cpu", batches=2, clip_len=4, stride=2,
                                size=32, batch_size=3))
    assert out == [3, 3]


def test_run_mediapipe_rejects_no_batches_instead_of_spinning(one_video):
    with pytest.raises(ValueError, match="batches=0"):
        next(bv.run_mediapipe(one_video, workers=0, device="cpu", batches=0, batch_size=3))


@pytest.mark.parametrize("runner", [bv.run_dali_cpu, bv.run_dali_gpu])
def test_dali_runners_say_not_available(one_video, runner):
    with pytest.raises(NotImplementedError, match="not available: "):
        next(runner(one_video, workers=1, device="cpu", batches=1))
