"""Hostile review of the Ray lifetime, the process-wide state (Pillow's guard, SVT_LOG) and the
NVDEC choice: Ray's state belongs to the process that connected it (a forked copy of the driver
neither hangs on nor stops the driver's Ray; a process another thread starts while Ray starts is
not taken for one of Ray's daemons and killed with them); Pillow's guard refusing a file says
which limit to raise; a value of SVT_LOG the user sets while an encoder of ours is open is kept;
on a machine without CUDA a video pipeline never starts CUDA.
"""

from __future__ import annotations

import gc
import os
import struct
import subprocess
import sys
import threading
import time
import warnings
import zlib

import pytest

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.decoders import registry
from mediapipe.decoders.base import Limits
from mediapipe.errors import LimitError
from mediapipe.sample import Blob
from tests.helpers import write_image_folder


# -- Pillow's decompression-bomb guard: the message names the limit to raise -------------------
def png_header(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` x ``height`` (Pillow's open reads only this header)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("backend", ["pillow", "turbo"])
def test_an_image_above_both_limits_names_max_pixels_not_pillows_guard(backend):
    # 200M pixels: above the default max_pixels (178956970) and Pillow's error threshold alike;
    # raising Image.MAX_IMAGE_PIXELS, as the message said, would not decode it
    decoder = registry.create("image", backend, limits=Limits())
    with pytest.raises(LimitError, match="above max_pixels=178956970") as err:
        decoder.probe(Blob("huge.png", data=png_header(20000, 10000)))
    assert "huge.png" in str(err.value)
    assert "raise Image.MAX_IMAGE_PIXELS" not in str(err.value)


def test_max_pixels_none_with_a_huge_png_names_pillows_guard_and_how_to_raise_it():
    decoder = registry.create("image", "pillow", limits=Limits(max_pixels=None))
    with pytest.raises(LimitError, match=r"Image.MAX_IMAGE_PIXELS=89478485.*max_pixels=None allows") as err:
        decoder.probe(Blob("huge.png", data=png_header(20000, 10000)))
    assert "huge.png" in str(err.value)


@pytest.mark.parametrize("backend", ["pillow", "turbo"])
def test_pillows_warning_made_an_error_is_a_limit_error_not_an_unreadable_image(backend):
    # 90M pixels: within max_pixels, above Image.MAX_IMAGE_PIXELS (Pillow warns); a program that
    # turns warnings into errors got "not a readable image", a DecodeError that says the file is bad
    decoder = registry.create("image", backend, limits=Limits())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(LimitError, match="DecompressionBombWarning.*warnings filter") as err:
            decoder.probe(Blob("big.png", data=png_header(10000, 9000)))
    assert "not a readable image" not in str(err.value) and "big.png" in str(err.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert decoder.probe(Blob("big.png", data=png_header(10000, 9000))) == {"height": 9000, "width": 10000}


# -- SVT_LOG ----------------------------------------------------------------------------------
def test_svt_log_the_user_sets_while_an_encoder_is_open_is_kept(monkeypatch):
    from mediapipe.encoder_logs import quiet_svt

    monkeypatch.delenv("SVT_LOG", raising=False)
    with quiet_svt():
        assert os.environ["SVT_LOG"] == "1"
        os.environ["SVT_LOG"] = "3"  # the user's, meanwhile (another thread)
    assert os.environ.get("SVT_LOG") == "3"
    with quiet_svt():
        pass
    assert os.environ.get("SVT_LOG") == "3"


def test_svt_log_is_restored_when_the_encoder_raises(monkeypatch):
    from mediapipe.encoder_logs import quiet_svt

    monkeypatch.delenv("SVT_LOG", raising=False)
    with pytest.raises(ZeroDivisionError), quiet_svt():
        1 / 0  # noqa: B018
    assert "SVT_LOG" not in os.environ


# -- NVDEC: a machine without CUDA starts no CUDA ----------------------------------------------
def test_a_video_pipeline_on_a_cpu_machine_picks_pyav_and_starts_no_cuda(tmp_path):
    pytest.importorskip("av")
    from mediapipe.synthetic.video import render_frames, write_video

    for i in range(2):
        (tmp_path / "a").mkdir(exist_ok=True)
        write_video(tmp_path / "a" / f"v{i}.ivf", render_frames(32, 48, 8, seed=i), gop=4)
    script = f"""
import torch, mediapipe as mp
from mediapipe.decoders.registry import decoder_class
assert not torch.cuda.is_available()
pipe = mp.Pipeline(mp.loaders.folder({str(tmp_path)!r}), {{"video": mp.decoders.video(clip_len=4)}},
                   batch_size=2, device="cpu")
assert decoder_class("video", "auto", None).name == "pyav"
assert not pipe.plan.workers_use_cuda
for workers in (0, 2):
    loader = pipe.loader(num_workers=workers, shuffle=False)
    shapes = [tuple(b["video"].shape) for b in loader]
    assert shapes and all(s[1] == 4 for s in shapes), shapes
    assert not loader.stats.fallbacks, loader.stats.fallbacks
print("CUDA", torch.cuda.is_initialized())
"""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CUDA False" in done.stdout, done.stdout


# -- Ray: its state belongs to the process that connected it ------------------------------------
def test_ray_of_the_library_belongs_to_its_driver(tmp_path):
    """A forked copy of the driver that closes (or drops) its copy of a loader hung in Ray's
    kill_actor and stopped nothing it should; using the copy is refused, not a hang. A process
    another thread started while ray.init ran was taken for one of Ray's daemons: the watchdog
    SIGKILLed it 5 s after Ray shut down."""
    ray = pytest.importorskip("ray")
    from mediapipe.errors import WorkerError
    from mediapipe.loaders import ray_connection as rl

    if ray.is_initialized():
        ray.shutdown()
    root = write_image_folder(tmp_path / "images", 8, scale=0.2)
    pipe = mp.Pipeline(source=mp.loaders.folder(root), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(16), A.Normalize()], batch_size=4, seed=1, device="cpu")
    loader = pipe.loader(backend="ray", num_workers=1, timeout=60, shuffle=False)
    bystander: list[subprocess.Popen] = []

    def start_bystander() -> None:
        time.sleep(0.3)  # while ray.init runs (seconds)
        bystander.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]))

    thread = threading.Thread(target=start_bystander)
    thread.start()
    try:
        first = [b["image"].clone() for b in loader]
        thread.join()
        assert rl._OWN_RAY is not None and rl._OWN_RAY.watchdog is not None
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # the forked copy: closing its loader must not touch Ray; using it is refused
            code = 0
            try:
                loader.close()
                try:
                    next(iter(pipe.loader(backend="ray", num_workers=1)))
                    code = 3
                except WorkerError as err:
                    code = 0 if "forked" in str(err) else 4
            except BaseException:  # noqa: BLE001
                code = 5
            os.write(write, bytes([code]))
            os._exit(0)
        os.close(write)
        status, deadline = None, time.monotonic() + 30
        while status is None and time.monotonic() < deadline:
            pid, code = os.waitpid(child, os.WNOHANG)
            status = code if pid else None
            time.sleep(0.1)
        if status is None:
            os.kill(child, 9)
            os.waitpid(child, 0)
        assert status is not None, "the forked copy hung closing its copy of the loader"
        assert os.read(read, 1) == b"\0"
        again = [b["image"].clone() for b in loader]  # the driver's Ray and actors still work
        assert [a.shape for a in again] == [a.shape for a in first]  # (epoch 1: other draws)
        loader.close()
        assert not ray.is_initialized()
        assert bystander and bystander[0].poll() is None, "the watchdog killed a process that was not Ray's"
    finally:
        thread.join()
        for p in bystander:
            p.kill()
            p.wait()
        loader.close()
        gc.collect()

