"""A lossless (SOF3) JPEG in a training folder: libjpeg-turbo ignores a reduced scale for such a
frame and writes the whole image into the buffer TurboJPEG sized for that scale (a heap overrun
that kills the interpreter). The loader's decoders decode it at full scale, then crop and resize
as for any image: the same pixels as a full decode."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mediapipe.synthetic import photo_like
from tests.test_hostile_convert_fast import lossless_jpeg

LOAD = """
    import sys, torch
    import mediapipe as mp
    from mediapipe import augment as A
    folder, backend = sys.argv[1], sys.argv[2]
    for ops in ([A.RandomResizedCrop(24, scale=(0.9, 1.0))], [A.Resize(30)]):
        pipe = mp.Pipeline(source=mp.loaders.folder(folder), decode={"image": mp.decoders.image(backend=backend)},
                           augment=ops, batch_size=2, seed=0, device="cpu")
        for batch in pipe.loader(num_workers=0):
            assert batch["image"].dtype == torch.uint8
    print("ok")
"""


@pytest.mark.parametrize("backend", ["turbo", "pillow"])
def test_a_lossless_jpeg_is_decoded_at_full_scale_not_overrun(tmp_path: Path, backend: str) -> None:
    (tmp_path / "a").mkdir()
    pixels = photo_like(240, 320, 3)
    for i in range(2):
        (tmp_path / "a" / f"{i}.jpg").write_bytes(lossless_jpeg(np.ascontiguousarray(pixels[:, i:i + 300])))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(LOAD), str(tmp_path), backend],
                          capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent.parent)
    if backend == "turbo":
        assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])
    else:  # this Pillow build cannot decode a lossless frame at all: a clear error naming the file, not a crash
        assert done.returncode in (0, 1), (done.returncode, done.stderr[-2000:])
        assert done.returncode == 0 or ("DecodeError" in done.stderr and "0.jpg" in done.stderr)


def test_the_turbo_decoder_plans_a_full_decode_for_a_lossless_frame() -> None:
    from mediapipe.decoders.image import scalable_frame

    data = lossless_jpeg(photo_like(64, 64, 1))
    assert not scalable_frame(data)
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(photo_like(64, 64, 1)).save(buf, format="JPEG", quality=90)
    assert scalable_frame(buf.getvalue())
