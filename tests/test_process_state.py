"""The library leaves the program's process-wide settings as it found them: Pillow's bomb guard
(``Image.MAX_IMAGE_PIXELS``) and the environment (``SVT_LOG``); its own bounds live in `Limits`."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

import pytest
from PIL import Image

from mediapipe.decoders import DecodeHint, Limits, create
from mediapipe.encoder_logs import quiet_svt
from mediapipe.errors import LimitError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic import photo_like


def test_importing_and_decoding_leave_pillows_guard_and_the_environment_alone():
    script = """
import os
from PIL import Image
before, env = Image.MAX_IMAGE_PIXELS, dict(os.environ)
import mediapipe as mp
import mediapipe.decoders.image_pillow, mediapipe.dataset.transcode, mediapipe.synthetic.video, mediapipe.decoders.video_nvdec
from mediapipe.synthetic import jpeg_bytes, photo_like
from mediapipe.dataset.transcode import TranscodeOptions, transcode_image
transcode_image(jpeg_bytes(photo_like(40, 60, seed=1)), TranscodeOptions(reencode=True))
assert Image.MAX_IMAGE_PIXELS == before, Image.MAX_IMAGE_PIXELS
changed = {k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k)}
assert not changed, changed
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "SVT_LOG"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_pillows_guard_as_the_program_set_it_is_a_limit_error_naming_the_file(monkeypatch):
    buf = io.BytesIO()
    Image.fromarray(photo_like(64, 64, seed=2)).save(buf, format="PNG")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # the program's own, stricter guard
    decoder = create("image", "pillow", limits=Limits())
    with pytest.raises(LimitError, match=r"big\.png.*MAX_IMAGE_PIXELS") as err:
        decoder.decode(Blob("big.png", data=buf.getvalue()), DecodeHint(), SampleRNG(0, 0, 0, 0), {})
    assert err.value.path == "big.png"
    assert Image.MAX_IMAGE_PIXELS == 1000


def test_quiet_svt_sets_svt_log_only_while_an_encoder_is_open(monkeypatch):
    monkeypatch.delenv("SVT_LOG", raising=False)
    with quiet_svt():
        assert os.environ["SVT_LOG"] == "1"
        with quiet_svt():
            assert os.environ["SVT_LOG"] == "1"
        assert os.environ["SVT_LOG"] == "1"  # the outer encoder is still open
    assert "SVT_LOG" not in os.environ
    monkeypatch.setenv("SVT_LOG", "4")  # the user's own choice wins and survives
    with quiet_svt():
        assert os.environ["SVT_LOG"] == "4"
    assert os.environ["SVT_LOG"] == "4"


def test_quiet_svt_from_many_threads_restores_the_environment(monkeypatch):
    monkeypatch.delenv("SVT_LOG", raising=False)
    barrier = threading.Barrier(8)
    seen: list[str | None] = []

    def encode() -> None:
        for _ in range(50):
            with quiet_svt():
                seen.append(os.environ.get("SVT_LOG"))
            barrier.wait() if _ == 0 else None

    threads = [threading.Thread(target=encode) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert set(seen) == {"1"} and len(seen) == 400
    assert "SVT_LOG" not in os.environ


def test_a_video_encoded_by_the_library_is_quiet_and_leaves_no_variable(tmp_path):
    pytest.importorskip("av")
    script = f"""
import os
from mediapipe.synthetic.video import render_frames, write_video
write_video(__import__("pathlib").Path({str(tmp_path / 'v.mkv')!r}), render_frames(32, 48, 4, seed=0), gop=4)
assert "SVT_LOG" not in os.environ
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "SVT_LOG"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert "SVT [config]" not in out.stderr and "Svt[info]" not in out.stderr, out.stderr[:500]
