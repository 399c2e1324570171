"""Hostile checks of the strict one-decode image transcode (`transcode_image`,
`decode_jpeg_strict`) and of the local engine's worker processes (`convert_local.Workers`).

A lossless JPEG (SOF3) must not crash the interpreter (libjpeg-turbo ignores a reduced scale
for it and writes the full image into the smaller buffer), a multi-picture file (MPO) whose
first picture is damaged is refused like a damaged JPEG, and a tiny image is never decoded at
another scale than Pillow's draft picks."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from mediapipe.dataset import convert_local
from mediapipe.dataset.transcode import (
    TranscodeError,
    TranscodeOptions,
    decode_jpeg_strict,
    fit_size,
    transcode_image,
)
from mediapipe.synthetic import photo_like


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def decoded(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def lossless_jpeg(pixels: np.ndarray) -> bytes:
    """A lossless (SOF3) JPEG of ``pixels``, by FFmpeg's ljpeg encoder."""
    import av

    ctx = av.CodecContext.create("ljpeg", "w")
    ctx.width, ctx.height, ctx.pix_fmt, ctx.time_base = pixels.shape[1], pixels.shape[0], "yuvj444p", Fraction(1, 25)
    frame = av.VideoFrame.from_ndarray(pixels, format="rgb24").reformat(format="yuvj444p")
    data = bytes((ctx.encode(frame) + ctx.encode(None))[0])
    assert b"\xff\xc3" in data and b"\xff\xc0" not in data
    return data


def in_a_fresh_interpreter(code: str, data: bytes) -> subprocess.CompletedProcess:
    """``code`` run with ``data`` on its stdin, in a child: a crash kills the child, not the tests."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], input=data, capture_output=True,
                          timeout=120)


LOSSLESS_CASES = """
    import io, sys
    from PIL import Image
    from mediapipe.dataset.transcode import TranscodeOptions, check_jpeg, decode_jpeg_strict, transcode_image
    data = sys.stdin.buffer.read()
    check_jpeg(data)
    decode_jpeg_strict(data, "RGB", (160, 120), (40, 30))
    for options in (TranscodeOptions(), TranscodeOptions(reencode=True), TranscodeOptions(image_max_side=40)):
        ext, out, meta = transcode_image(data, options)
        print(meta["width"], meta["height"], meta["copied"], Image.open(io.BytesIO(out)).size)
"""


def test_a_lossless_jpeg_does_not_crash_the_interpreter() -> None:
    pixels = photo_like(120, 160, 5)
    data = lossless_jpeg(pixels)
    done = in_a_fresh_interpreter(LOSSLESS_CASES, data)
    assert done.returncode == 0, (done.returncode, done.stderr.decode()[-2000:])
    # never copied (a loader's reduced decode would meet the same bug), resized where asked
    assert done.stdout.decode().split("\n")[:3] == ["160 120 False (160, 120)", "160 120 False (160, 120)",
                                                    "40 30 False (40, 30)"]


def test_a_lossless_jpeg_is_decoded_at_full_scale_as_pillow_does() -> None:
    pixels = photo_like(120, 160, 5)
    data = lossless_jpeg(pixels)
    done = in_a_fresh_interpreter("""
        import sys
        import numpy as np
        from mediapipe.dataset.transcode import decode_jpeg_strict
        sys.stdout.buffer.write(np.asarray(decode_jpeg_strict(sys.stdin.buffer.read(), "RGB", (160, 120), (40, 30))
                                           .convert("RGB")).tobytes())
    """, data)
    assert done.returncode == 0, (done.returncode, done.stderr.decode()[-2000:])
    assert np.frombuffer(done.stdout, np.uint8).reshape(120, 160, 3).tobytes() == decoded(data).tobytes()


def mpo(first: np.ndarray, second: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(first).save(buf, format="MPO", save_all=True, append_images=[Image.fromarray(second)], quality=90)
    return buf.getvalue()


def test_an_mpo_whose_first_picture_is_damaged_is_refused() -> None:
    pixels = photo_like(240, 320, 7)
    data = mpo(pixels, pixels[::-1].copy())
    with Image.open(io.BytesIO(data)) as im:
        assert im.format == "MPO"
    middle = data.index(b"\xff\xda") + 5000
    damaged = data[:middle] + bytes(3000) + data[middle + 3000:]  # the first picture's scan zeroed: grey below
    for options in (TranscodeOptions(), TranscodeOptions(image_max_side=100)):
        with pytest.raises(TranscodeError, match=r"^image: damaged JPEG \(.+\)$"):
            transcode_image(damaged, options)


@pytest.mark.parametrize("max_side", [None, 100])
def test_a_sound_mpo_is_written_as_before(max_side: int | None) -> None:
    """As the Pillow path wrote it: the first picture decoded in full (no draft), LANCZOS, q90."""
    pixels = photo_like(240, 320, 7)
    data = mpo(pixels, pixels[::-1].copy())
    options = TranscodeOptions(image_max_side=max_side)
    with Image.open(io.BytesIO(data)) as im:
        target = fit_size(*im.size, max_side)
        out = ImageOps.exif_transpose(im)
        if out.size != target:
            out = out.resize(target, Image.Resampling.LANCZOS)
        buf = io.BytesIO()
        out.save(buf, format="JPEG", quality=options.jpeg_quality, icc_profile=im.info.get("icc_profile"))
    assert transcode_image(data, options)[1] == buf.getvalue()


def test_a_tiny_jpeg_is_decoded_at_the_scale_draft_picks_or_in_full() -> None:
    """TurboJPEG scales by the largest M/8 whose image fits the size asked: for a few-pixel image
    that is not the 1/2, 1/4 or 1/8 that Pillow's draft picks (3x3 asked for 2x2 gets 3/8)."""
    rng = np.random.default_rng(0)
    wrong = []
    for side in range(2, 9):
        pixels = rng.integers(0, 255, (side, side, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
        data = buf.getvalue()
        full = decoded(data)
        for max_side in range(1, side):
            wanted = fit_size(side, side, max_side)
            with Image.open(io.BytesIO(data)) as im:
                im.draft("RGB", wanted)
                draft = np.asarray(im.convert("RGB"))
            ours = np.asarray(decode_jpeg_strict(data, "RGB", (side, side), wanted).convert("RGB"))
            if not (ours.shape == draft.shape and np.array_equal(ours, draft)) and not np.array_equal(ours, full):
                wrong.append((side, max_side))
    assert wrong == []



def declaring(data: bytes, width: int, height: int) -> bytes:
    """``data`` with its frame header declaring ``width`` x ``height``: the scan left as it is."""
    sof = data.index(b"\xff\xc0")
    return data[:sof + 5] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + data[sof + 9:]


@pytest.mark.parametrize("options", [TranscodeOptions(), TranscodeOptions(reencode=True),
                                     TranscodeOptions(image_max_side=500)])
def test_a_small_file_declaring_a_huge_image_is_refused_before_it_is_decoded(
        options: TranscodeOptions, monkeypatch: pytest.MonkeyPatch) -> None:
    """12000 x 12000 is under Pillow's DecompressionBombError bound: the strict decode allocated
    the whole image (4 bytes a pixel) before libjpeg found the data short; the check before it (1/8 scale)
    cost 1/64 of that. The header's claim is weighed against the file's size first, as the loaders do."""
    buf = io.BytesIO()
    Image.fromarray(photo_like(240, 320, 7)).save(buf, format="JPEG", quality=90)
    data = declaring(buf.getvalue(), 12000, 12000)
    import simplejpeg

    def no_decode(*args, **kwargs):
        raise AssertionError("decoded")

    monkeypatch.setattr(simplejpeg, "decode_jpeg", no_decode)
    with pytest.raises(TranscodeError, match=r"^image: truncated or corrupt: the header declares 12000x12000 pixels"):
        transcode_image(data, options)

# -- the local engine's workers ------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def run_script(code: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=str(ROOT))


BIG_JOBS_AND_RESULTS = """
    from mediapipe.dataset import convert_local
    convert_local.convert_item = lambda text, size: (len(text), bytes(size))  # patched in before the fork
    pool = convert_local.Workers(2)
    try:
        jobs = iter([("t" * 200_000, 3_000_000) for _ in range(10)])  # a long text field; a large image out
        print(sum(n for n, _ in pool.imap(jobs, 8)))
    finally:
        pool.close()
"""


def test_a_large_job_and_a_large_result_do_not_deadlock() -> None:
    """The parent sending a job larger than its pipe holds, while the worker sends a result larger
    than its own pipe holds, waited on each other for ever."""
    try:
        done = run_script(BIG_JOBS_AND_RESULTS, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("Workers.imap hung: parent and worker both blocked in send")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(10 * 200_000)]


KILLED_MID_ITEM = """
    import os, signal, time
    from mediapipe.dataset import convert_local
    def slow(seconds, _):
        time.sleep(seconds)
        return seconds
    convert_local.convert_item = slow
    pool = convert_local.Workers(2)
    print(" ".join(str(p.pid) for p in pool.procs), flush=True)
    results = pool.imap(iter([(60.0, None), (60.0, None)]), 4)
    import threading
    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    next(results)
"""


def test_workers_mid_item_die_with_a_killed_parent() -> None:
    """A worker converting a long video outlived a SIGKILLed parent until the item was done
    (holding the caller's stdout open and a CPU busy); the kernel now kills it with the parent."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(KILLED_MID_ITEM)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(ROOT))
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.05)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


INTERRUPTED_AT_A_FORK = """
    import os, signal
    from mediapipe.dataset import convert_local
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background job inherits SIGINT ignored)
    fired = []
    def ctrl_c_now():  # Ctrl-C arriving while a worker is forked
        if not fired:
            fired.append(1)
            os.kill(os.getpid(), signal.SIGINT)
    os.register_at_fork(before=ctrl_c_now)
    try:
        pool = convert_local.Workers(2)
    except KeyboardInterrupt:
        print("interrupted")
    else:
        print("carried on")
        pool.close()
"""


def test_ctrl_c_while_workers_start_is_not_lost() -> None:
    """Python runs the SIGINT handler inside the at-fork hooks, which swallow its KeyboardInterrupt:
    a Ctrl-C during a worker's fork was lost and the conversion carried on."""
    done = run_script(INTERRUPTED_AT_A_FORK)
    assert done.stdout.split() == ["interrupted"], (done.stdout, done.stderr[-2000:])


def slow_echo(kind: str, _: object) -> str:
    return raise_in_worker(kind)


class TwoArguments(Exception):
    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a} and {b}")


class HoldsALock(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def raise_in_worker(kind: str) -> str:
    if kind == "key":
        return {}["missing"]
    if kind == "two":
        raise TwoArguments("this", "that")
    if kind == "lock":
        raise HoldsALock("cannot be pickled")
    return kind


@pytest.fixture
def raising(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(convert_local, "convert_item", slow_echo)


def test_an_escaped_exception_keeps_the_workers_traceback(raising: None) -> None:
    pool = convert_local.Workers(2)
    try:
        with pytest.raises(KeyError, match="missing") as caught:
            list(pool.imap(iter([("ok", None), ("key", None)]), 4))
    finally:
        pool.close()
    assert "raise_in_worker" in str(caught.value.__cause__)  # as multiprocessing.Pool gave it


@pytest.mark.parametrize("kind,message", [("two", r"TwoArguments: this and that"),
                                          ("lock", r"HoldsALock: cannot be pickled")])
def test_an_exception_that_cannot_cross_the_pipe_is_named_not_a_dead_worker(raising: None, kind: str,
                                                                            message: str) -> None:
    """One that cannot be pickled killed the worker ("worker process died"), one that cannot be
    rebuilt was a TypeError about its __init__: each is now a RuntimeError naming it."""
    pool = convert_local.Workers(2)
    try:
        with pytest.raises(RuntimeError, match=message):
            list(pool.imap(iter([("ok", None), (kind, None)]), 4))
        assert all(proc.is_alive() for proc in pool.procs)
    finally:
        pool.close()


def deaf_to_sigterm(seconds: float, _: object) -> float:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as some libraries install a handler of their own
    time.sleep(seconds)
    return seconds


def test_close_does_not_wait_for_ever_on_a_worker_that_ignores_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(convert_local, "convert_item", deaf_to_sigterm)
    monkeypatch.setattr(convert_local, "TERMINATE_WAIT_S", 0.5)
    pool = convert_local.Workers(2)
    results = pool.imap(iter([(0.0, None), (60.0, None), (60.0, None)]), 4)
    assert next(results) == 0.0
    time.sleep(0.3)  # the others are asleep, SIGTERM ignored
    start = time.monotonic()
    pool.close()
    assert time.monotonic() - start < 20
    assert all(not proc.is_alive() for proc in pool.procs)
