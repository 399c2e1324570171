"""Bad input under each on_error policy, pixel limits, and workers that fail or die."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.base import Op
from tests.helpers import write_image_folder


def png_declaring(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` pixels (with one tiny IDAT)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b"")


BAD_FILES = {
    "truncated.jpg": lambda good: good[: len(good) // 2],
    "empty.jpg": lambda good: b"",
    "text.jpg": lambda good: b"this is not an image, just some text\n" * 10,
    "bomb.png": lambda good: png_declaring(100_000, 100_000),
}


@pytest.fixture(scope="module")
def folder_with(tmp_path_factory) -> callable:
    """A clean 10-image folder plus one bad file in class0."""

    def make(bad_name: str) -> Path:
        root = tmp_path_factory.mktemp("bad")
        write_image_folder(root, 10, classes=2, seed=7)
        good = next(root.rglob("*.jpg")).read_bytes()
        (root / "class0" / bad_name).write_bytes(BAD_FILES[bad_name](good))
        return root

    return make


def pipeline(root: Path, on_error: str, backend: str = "auto", **kwargs) -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image(backend)},
                       [A.RandomResizedCrop(24)], batch_size=4, device="cpu", on_error=on_error, **kwargs)


@pytest.mark.parametrize("backend", ["turbo", "pillow"])
@pytest.mark.parametrize("bad_name", sorted(BAD_FILES))
def test_raise_names_the_file_and_the_reason(folder_with, bad_name, backend):
    root = folder_with(bad_name)
    with pytest.raises(mp.DecodeError) as info:
        for _ in pipeline(root, "raise", backend).loader(num_workers=0, shuffle=False):
            pass
    err = info.value
    assert err.path.endswith(bad_name)
    assert bad_name in str(err) and err.reason
    if bad_name == "bomb.png":
        assert isinstance(err, mp.LimitError) and "100000x100000" in str(err)


def test_raise_crosses_the_worker_boundary(folder_with):
    root = folder_with("truncated.jpg")
    with pytest.raises(mp.DecodeError, match="truncated.jpg"):
        for _ in pipeline(root, "raise").loader(num_workers=2):
            pass


@pytest.mark.parametrize("bad_name", sorted(BAD_FILES))
def test_skip_keeps_batch_size_with_a_deterministic_replacement(folder_with, bad_name):
    root = folder_with(bad_name)
    bad_index = next(i for i, p in enumerate(mp.loaders.folder(root)._paths) if p.endswith(bad_name))
    runs = []
    for workers in (0, 2):
        loader = pipeline(root, "skip").loader(num_workers=workers, shuffle=False)
        batches = list(loader)
        runs.append(torch.cat([b["index"] for b in batches]))
        assert [b["image"].shape[0] for b in batches] == [4, 4, 3]
        assert sum(loader.stats.errors.values()) == 1
        assert any(bad_name in f for f in loader.stats.failed)
    assert torch.equal(runs[0], runs[1])
    assert bad_index not in runs[0].tolist()  # the slot holds another, real sample


def test_replace_flags_the_slot_as_invalid(folder_with):
    root = folder_with("text.jpg")
    bad_index = next(i for i, p in enumerate(mp.loaders.folder(root)._paths) if p.endswith("text.jpg"))
    loader = pipeline(root, "replace").loader(shuffle=False)
    batches = list(loader)
    valid = torch.cat([b["valid"] for b in batches])
    index = torch.cat([b["index"] for b in batches])
    assert valid.tolist() == [i != bad_index for i in range(11)]
    assert index.tolist() == list(range(11))
    image = torch.cat([b["image"] for b in batches])
    assert int(image[bad_index].abs().sum()) == 0 and int(image[~valid].numel()) > 0
    assert loader.stats.errors and "text.jpg" in loader.stats.failed[0]


def test_max_pixels_is_checked_before_decoding(tmp_path):
    write_image_folder(tmp_path, 4, classes=1, seed=3)
    with pytest.raises(mp.LimitError, match="max_pixels=1000"):
        next(iter(pipeline(tmp_path, "raise", max_pixels=1000).loader()))


@pytest.mark.parametrize("ext", ["jpg", "png"])  # a resize fused into the JPEG decoder, and one after decoding
@pytest.mark.parametrize("op", [A.Resize(256), A.RandomShortestSize(256)])
def test_an_op_whose_output_would_pass_max_pixels_is_refused_before_it_allocates(tmp_path, ext, op):
    """A 6 x 3000 image is within max_pixels; its shorter side resized to 256 would be 256 x 128000
    (98 MB of RGB): refused with the file named, and skippable."""
    from PIL import Image

    from mediapipe.synthetic import photo_like

    folder = tmp_path / "thin" / "c0"
    folder.mkdir(parents=True)
    strip = Image.fromarray(photo_like(6, 3000, 1))
    strip.save(folder / f"strip.{ext}")
    write_image_folder(tmp_path / "thin", 3, classes=1, seed=4)
    pipe = mp.Pipeline(source=mp.loaders.folder(tmp_path / "thin"), decode={"image": mp.decoders.image()},
                       augment=[op], batch_size=1, max_pixels=5_000_000)
    with pytest.raises(mp.LimitError, match=rf"strip\.{ext}.*above max_pixels=5000000"):
        for _ in pipe.loader(shuffle=False):
            pass
    skipped = mp.Pipeline(source=mp.loaders.folder(tmp_path / "thin"), decode={"image": mp.decoders.image()},
                          augment=[op], batch_size=1, max_pixels=5_000_000, on_error="skip")
    loader = skipped.loader(shuffle=False)
    assert len([b for b in loader]) == 4 and loader.stats.failed


@dataclass(frozen=True)
class _DieInWorker(Op):
    """Kills its own process: stands for a segfault in a C library."""

    batched = False  # a per-sample kernel: runs in the workers

    def transform(self, x, params, field, canvas_size):
        if os.environ.get("MEDIAPIPE_TEST_MAIN") != str(os.getpid()):
            os.kill(os.getpid(), signal.SIGKILL)
        return x


def test_a_dead_worker_raises_instead_of_hanging(image_folder, monkeypatch):
    monkeypatch.setenv("MEDIAPIPE_TEST_MAIN", str(os.getpid()))
    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()},
                       [A.Resize((16, 16)), _DieInWorker()], batch_size=4, device="cpu")
    with pytest.raises(mp.WorkerError, match="exited unexpectedly"):
        for _ in pipe.loader(num_workers=2):
            pass


def test_unknown_field_is_rejected_at_build_time(image_folder):
    with pytest.raises(mp.PipelineError, match="mask"):
        mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()},
                    [A.HorizontalFlip(keys=("image", "mask"))])


def test_unequal_shapes_explain_the_fix(image_folder):
    pipe = mp.Pipeline(mp.loaders.folder(image_folder), {"image": mp.decoders.image()}, [A.Resize(20)],
                       batch_size=8, device="cpu")
    with pytest.raises(mp.PipelineError, match="one size"):
        next(iter(pipe.loader(shuffle=False)))


def test_missing_folder_names_it(tmp_path):
    with pytest.raises(mp.SourceError, match="nothing-here"):
        mp.loaders.folder(tmp_path / "nothing-here")
    shutil.rmtree(tmp_path)


# -- whole batches of bad samples, bounded searches -------------------------------------------
@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> callable:
    """A manifest over good JPEGs and bad files in a given order: "g" a good one, "t" text
    (each file its own bytes), "c" a truncated JPEG (each cut at another length)."""
    root = tmp_path_factory.mktemp("mixed")
    write_image_folder(root / "good", 12, classes=1, seed=5)
    good = sorted((root / "good").rglob("*.jpg"))

    def make(pattern: str, name: str) -> Path:
        rows, g = [], iter(good)
        for i, kind in enumerate(pattern):
            if kind == "g":
                path = next(g)
            else:
                path = root / f"{name}_bad{i:02d}.jpg"
                data = good[0].read_bytes()
                path.write_bytes(f"not an image {i} ".encode() * (i + 2) if kind == "t" else data[: 600 + 97 * i])
            rows.append(f'{{"path": "{path}"}}\n')
        manifest = root / f"{name}.jsonl"
        manifest.write_text("".join(rows))
        return manifest

    return make


def mixed_pipeline(manifest: Path, on_error: str, backend: str = "auto", batch_size: int = 2,
                   ops: tuple = (A.RandomResizedCrop(24), A.Normalize())) -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.manifest(manifest), {"image": mp.decoders.image(backend)}, list(ops),
                       batch_size=batch_size, seed=3, device="cpu", on_error=on_error)


@pytest.mark.parametrize("workers", [0, 2])
def test_replace_delivers_a_batch_whose_every_sample_failed(mixed, workers):
    manifest = mixed("ggggtcggtt", "allbad")  # batches [g g] [g g] [t c] [g g] [t t]
    loader = mixed_pipeline(manifest, "replace", ops=(A.RandomResizedCrop(24),)).loader(num_workers=workers,
                                                                                      shuffle=False)
    batches = list(loader)
    assert len(batches) == len(loader) == 5
    for number in (2, 4):
        b = batches[number]
        assert b["image"].shape == batches[0]["image"].shape and b["image"].dtype == batches[0]["image"].dtype
        assert not b["valid"].any() and int(b["image"].abs().sum()) == 0
        assert b["index"].tolist() == [2 * number, 2 * number + 1]  # each slot keeps its own sample's index
    assert batches[0]["valid"].all()
    assert sum(loader.stats.errors.values()) == 4


def test_replace_with_nothing_good_names_the_files(mixed):
    manifest = mixed("ttct", "nothing")
    with pytest.raises(mp.SampleUnavailableError) as info:
        list(mixed_pipeline(manifest, "replace").loader(shuffle=False))
    err = info.value
    assert "nothing_bad00.jpg" in str(err) and "nothing_bad01.jpg" in str(err)  # the batch's files
    assert all(p.endswith(".jpg") for p in err.paths + err.tried)


def test_skip_gives_up_after_bounded_tries_naming_the_file_and_the_replacements(mixed):
    manifest = mixed("tctcttct", "skipall")
    with pytest.raises(mp.SampleUnavailableError) as info:
        list(mixed_pipeline(manifest, "skip").loader(shuffle=False))
    err = info.value
    assert "skipall_bad00.jpg" in str(err)  # the failed sample
    assert err.paths == [str(manifest.parent / "skipall_bad00.jpg")]
    assert 1 <= len(err.tried) <= 16 and all(f"{p}" in str(err) for p in err.tried)  # the replacements tried


# -- stats.errors: by reason class, once per failed sample ------------------------------------
@pytest.mark.parametrize("backend", ["pillow", "turbo"])
def test_errors_are_counted_by_decoder_and_reason_class(mixed, backend):
    manifest = mixed("gtgtgtgcgcgg", f"classes_{backend}")
    loader = mixed_pipeline(manifest, "replace", backend).loader(shuffle=False)
    list(loader)
    errors = dict(loader.stats.errors)
    assert sum(errors.values()) == 5
    assert len(errors) <= 2, errors  # the text files share one reason, the truncated JPEGs one
    assert all(key.split(": ")[0] in ("pillow", "turbo") and "0x" not in key for key in errors)  # decoder: class
    assert sorted(f.split(": ")[0] for f in loader.stats.failed) == sorted(
        str(manifest.parent / f"classes_{backend}_bad{i:02d}.jpg") for i in (1, 3, 5, 7, 9))


def test_a_failed_replacement_is_not_counted_again(mixed):
    manifest = mixed("gtgtgtgtgtgt", "recount")  # half bad: replacements often draw a bad one
    loader = mixed_pipeline(manifest, "skip").loader(shuffle=False)
    batches = list(loader)
    assert all(b["image"].shape[0] == 2 for b in batches)
    assert sum(loader.stats.errors.values()) == 6  # each bad file once, in its own slot


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resume_does_not_count_prefetched_failures_twice(mixed, workers):
    manifest = mixed("ggtgtggtgg", "resume")  # bad in batches 1, 2 and 3
    loader = mixed_pipeline(manifest, "replace").loader(num_workers=workers, shuffle=False, prefetch=2)
    it = iter(loader)
    next(it)  # batch 0 delivered; with workers, batches 1.. are already built
    it.close()
    assert sum(loader.stats.errors.values()) == 0  # nothing delivered failed
    loader.load_state_dict(loader.state_dict())  # the next pass resumes at batch 1
    rest = list(loader)
    assert len(rest) == 4
    assert sum(loader.stats.errors.values()) == 3


def test_padding_repeats_of_a_bad_sample_count_once(mixed):
    manifest = mixed("gggt", "padbad")  # batch 3: the last batch [t] padded to [t t t]
    loader = mixed_pipeline(manifest, "replace", batch_size=3).loader(shuffle=False, last_batch="pad")
    batches = list(loader)
    assert batches[-1]["valid"].tolist() == [False, False, False]
    assert sum(loader.stats.errors.values()) == 1


# -- hostile files in a folder ------------------------------------------------------------------
def _hostile_folder(root: Path) -> dict[str, str]:
    """Ten good JPEGs and, among them, what a hostile (or careless) folder holds; returns each
    bad file's name with the reason class it must be counted under."""
    write_image_folder(root, 10, classes=2, seed=11)
    c0, c1 = root / "class0", root / "class1"
    os.mkfifo(c0 / "fifo.jpg")  # opening it for reading waits for a writer: forever
    (c1 / "zero.jpg").symlink_to("/dev/zero")  # reading it never ends
    (c1 / "loop").mkdir()
    (c1 / "loop" / "up").symlink_to("..")  # a directory loop: class1 again, and again...
    shutil.copy(c0 / "img0000.jpg", c1 / "new\nline ünïcødé 日本.jpg")  # a name is bytes: fine
    return {"fifo.jpg": "source: not a regular file", "zero.jpg": "source: not a regular file"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_fifo_a_device_and_a_directory_loop_in_a_folder(tmp_path, workers):
    """A FIFO used to block the loader forever, a link to /dev/zero to read until memory ran out,
    and a link back up the tree to list every file once per level (dozens of times)."""
    bad = _hostile_folder(tmp_path)
    source = mp.loaders.folder(tmp_path)
    keys = [source.ref(i).key for i in range(len(source))]
    assert len(keys) == len(set(keys)) == 10 + 3 and not any("loop" in k for k in keys)
    assert "class1/new\nline ünïcødé 日本.jpg" in keys
    loader = pipeline(tmp_path, "skip").loader(num_workers=workers, shuffle=False)
    batches = list(loader)
    assert [len(b["index"]) for b in batches] == [4, 4, 4, 1]
    assert dict(loader.stats.errors) == {"source: not a regular file": 2}
    assert sorted(f.rsplit("/", 1)[1] for f in loader.stats.failed) == [
        "fifo.jpg: not a regular file (a FIFO)", "zero.jpg: not a regular file (a character device)"]
    with pytest.raises(mp.SourceError, match=r"fifo\.jpg.*not a regular file \(a FIFO\)"):
        list(pipeline(tmp_path, "raise").loader(num_workers=workers, shuffle=False))
    assert set(bad) == {"fifo.jpg", "zero.jpg"}


@pytest.mark.timeout(120)
def test_files_replaced_mid_epoch_by_a_fifo_or_a_directory(tmp_path):
    """Listed as files, then replaced while the epoch runs: each is a clean, skippable error."""
    write_image_folder(tmp_path, 16, classes=1, seed=5)
    pipe = pipeline(tmp_path, "skip")
    loader = pipe.loader(num_workers=0, shuffle=False)
    it = iter(loader)
    next(it)  # (the batch after it is built already: the last one is not)
    files = sorted((tmp_path / "class0").glob("*.jpg"))
    files[14].unlink()
    os.mkfifo(files[14])
    files[15].unlink()
    files[15].mkdir()
    list(it)
    assert dict(loader.stats.errors) == {"source: not a regular file": 2}, loader.stats.failed


def _wav_bytes(seconds: float = 0.25, rate: int = 8000) -> bytes:
    import io
    import math
    import wave

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i / 7))) for i in range(int(seconds * rate))))
    return buf.getvalue()


@pytest.mark.timeout(120)
def test_a_fifo_among_files_a_decoder_opens_itself(tmp_path):
    """Audio and video decoders open the file themselves (FFmpeg, libsndfile): the sample stage
    refuses a FIFO before they do, rather than wait in their open for ever."""
    (tmp_path / "a.wav").write_bytes(_wav_bytes())
    (tmp_path / "b.wav").write_bytes(_wav_bytes(0.3))
    os.mkfifo(tmp_path / "c.wav")
    pipe = mp.Pipeline(mp.loaders.folder(tmp_path), {"audio": mp.decoders.audio(sample_rate=8000)}, [],
                       batch_size=3, device="cpu", on_error="replace", collate={"audio": "pad"})
    loader = pipe.loader(shuffle=False)
    (batch,) = list(loader)
    assert batch["valid"].tolist() == [True, True, False]
    assert dict(loader.stats.errors) == {"source: not a regular file": 1}


@pytest.mark.timeout(120)
def test_convert_reports_a_fifo_and_a_device_in_a_folder_and_finishes(tmp_path):
    """`mediapipe convert` read each input whole with open().read(): a FIFO blocked it for ever,
    and a link to /dev/zero read until the machine ran out of memory."""
    from mediapipe.dataset.convert import convert

    src = tmp_path / "src"
    _hostile_folder(src)
    result = convert(src, tmp_path / "out", shard_size=8)
    assert sorted((f["input"].rsplit("/", 1)[-1], f["reason"]) for f in result.failures) == [
        ("fifo.jpg", "cannot read: not a regular file (a FIFO)"),
        ("zero.jpg", "cannot read: not a regular file (a character device)")]
    assert len(mp.loaders.shards(tmp_path / "out")) == 11  # the ten and the one with an odd name
