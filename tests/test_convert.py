"""`mediapipe convert`: planning, round trips through the shards loader, transcoding, reports."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import mediapipe as mp
from mediapipe.cli import main as cli
from mediapipe.dataset.convert import convert
from mediapipe.dataset.convert_plan import parse_shard_size, plan_conversion
from mediapipe.dataset.layout import REPORT, SAMPLES, safe_key, unique_keys
from mediapipe.dataset.measure import measure_conversion
from mediapipe.dataset.sample_records import read_samples
from mediapipe.dataset.transcode import TranscodeOptions, transcode_image
from mediapipe.synthetic import jpeg_bytes, photo_like
from tests.helpers import write_image_folder


@pytest.fixture(scope="module")
def small_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 small JPEGs in 3 class folders."""
    return write_image_folder(tmp_path_factory.mktemp("src"), 10, scale=0.3)


def test_parse_shard_size() -> None:
    assert parse_shard_size("1000") == (1000, None)
    assert parse_shard_size("12samples") == (12, None)
    assert parse_shard_size("256MB") == (None, 256_000_000)
    assert parse_shard_size("1GiB") == (None, 2**30)
    with pytest.raises(ValueError, match="shard size"):
        parse_shard_size("lots")


def test_plan_is_a_pure_function_of_inputs_seed_and_size(small_folder: Path) -> None:
    a = plan_conversion(small_folder, shard_size=3, seed=1)
    b = plan_conversion(small_folder, shard_size=3, seed=1)
    c = plan_conversion(small_folder, shard_size=3, seed=2)
    assert a.fingerprint == b.fingerprint and a.tasks == b.tasks
    assert a.fingerprint != c.fingerprint
    assert [len(t.items) for t in a.tasks] == [3, 3, 3, 1]
    keys = [i.key for t in a.tasks for i in t.items]
    assert len(set(keys)) == 10 and all("/" not in k and "." not in k for k in keys)
    ordered = plan_conversion(small_folder, shard_size=100, shuffle=False)
    assert [i.position for i in ordered.tasks[0].items] == list(range(10))
    by_bytes = plan_conversion(small_folder, shard_size="30KB", seed=1)
    for task in by_bytes.tasks:  # a shard goes over the size only when one input alone does
        assert len(task.items) == 1 or sum(i.size for i in task.items) <= 30_000


def test_unique_keys_are_safe_and_distinct() -> None:
    keys = unique_keys(["a/b.jpg", "a_b.jpg", "a/b.png", "../x y.z.jpg", "é/.jpg"])
    assert keys[:3] == ["a_b", "a_b_2", "a_b_3"]
    assert len(set(keys)) == len(keys)
    assert all(k and "/" not in k and "." not in k and ".." not in k for k in keys)


def test_round_trip_copies_jpegs_bit_exact_and_decodes_the_same(small_folder: Path, tmp_path: Path) -> None:
    result = convert(small_folder, tmp_path / "out", shard_size=4, seed=3)
    assert result.num_samples == 10 and result.num_shards == 3 and not result.failures
    folder, shards = mp.loaders.folder(small_folder), mp.loaders.shards(tmp_path / "out")
    assert len(shards) == 10 and shards.classes == folder.classes
    by_key = {safe_key(folder.ref(i).key): folder.ref(i) for i in range(len(folder))}
    for i in range(len(shards)):
        ref = shards.ref(i)
        original = by_key[ref.key]
        assert ref.label == original.label
        assert ref.blob("image").read() == original.blob("image").read()  # copied byte for byte
        with Image.open(io.BytesIO(original.blob("image").read())) as im:
            assert (shards.meta(i)["width"], shards.meta(i)["height"]) == im.size
    # the same pipeline over both sources gives the same decoded images
    decode = {"image": mp.decoders.image()}
    a = mp.Pipeline(source=folder, decode=decode, batch_size=1, device="cpu").dataset()
    b = mp.Pipeline(source=shards, decode=decode, batch_size=1, device="cpu").dataset()
    keys = [safe_key(folder.ref(i).key) for i in range(len(folder))]
    for j in range(len(shards)):
        i = keys.index(shards.ref(j).key)
        x, y = a[i], b[j]
        assert torch.equal(x["image"], y["image"]) and int(x["label"]) == int(y["label"])


def test_pipeline_loader_over_shards(small_folder: Path, tmp_path: Path) -> None:
    convert(small_folder, tmp_path / "out", shard_size=4, seed=0)
    from mediapipe import augment as A

    pipe = mp.Pipeline(source=mp.loaders.shards(tmp_path / "out"), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(32)], batch_size=5, device="cpu")
    batches = list(pipe.loader(num_workers=0, shuffle=True))
    assert len(batches) == 2 and batches[0]["image"].shape == (5, 3, 32, 32)
    assert sorted(torch.cat([b["label"] for b in batches]).tolist()) == sorted(
        r["label"] for r in read_samples(tmp_path / "out"))


def test_reencode_resizes_applies_exif_orientation_and_strips_metadata(tmp_path: Path) -> None:
    src = tmp_path / "src" / "cat"
    src.mkdir(parents=True)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    exif[0x010F] = "CameraMaker"
    (src / "rotated.jpg").write_bytes(jpeg_bytes(photo_like(60, 100, 1), exif=exif.tobytes()))
    (src / "big.jpg").write_bytes(jpeg_bytes(photo_like(200, 300, 2)))
    (src / "small.png").write_bytes(_png(photo_like(40, 30, 3)))
    convert(tmp_path / "src", tmp_path / "out", options=TranscodeOptions(image_max_side=120, jpeg_quality=80))
    shards = mp.loaders.shards(tmp_path / "out")
    seen = {}
    for i in range(len(shards)):
        data = shards.ref(i).blob("image").read()
        with Image.open(io.BytesIO(data)) as im:
            assert im.format == "JPEG" and 0x0112 not in im.getexif() and 0x010F not in im.getexif()
            assert (shards.meta(i)["width"], shards.meta(i)["height"]) == im.size
            seen[shards.ref(i).key] = im.size
    assert seen == {"cat_rotated": (60, 100), "cat_big": (120, 80), "cat_small": (30, 40)}


def test_a_fitting_jpeg_is_copied_and_reencode_forces_a_new_encoding() -> None:
    data = jpeg_bytes(photo_like(50, 70, 4), quality=95)
    assert transcode_image(data, TranscodeOptions(image_max_side=70))[1] == data
    ext, out, meta = transcode_image(data, TranscodeOptions(reencode=True, jpeg_quality=50))
    assert out != data and len(out) < len(data) and meta["copied"] is False


def test_failures_are_reported_and_set_the_exit_status(small_folder: Path, tmp_path: Path, capsys) -> None:
    src = tmp_path / "src"
    write_image_folder(src, 4, scale=0.2)
    (src / "class0" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    assert cli(["convert", str(src), str(tmp_path / "a"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "FAILED class0/broken.jpg" in err
    report = json.loads((tmp_path / "a" / REPORT).read_text())
    assert [f["input"] for f in report["failures"]] == ["class0/broken.jpg"] and report["failures"][0]["reason"]
    assert cli(["convert", str(src), str(tmp_path / "b"), "--allow-failures", "--no-progress"]) == 0
    assert len(mp.loaders.shards(tmp_path / "b")) == 4
    assert cli(["convert", str(src), str(tmp_path / "b"), "--no-progress"]) == 2  # exists, no --resume


def test_inspect_and_verify_commands(small_folder: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert cli(["convert", str(small_folder), str(out), "--shard-size", "4", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli(["inspect", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["samples"] == 10 and summary["shards"] == 3 and summary["kinds"] == {"image": 10}
    assert sum(summary["max_side"].values()) == 10 and sum(summary["classes"].values()) == 10
    assert cli(["verify", str(out)]) == 0
    with gzip.open(out / SAMPLES, "rt") as f:
        assert len(f.readlines()) == 10


def test_manifest_input(image_manifest: Path, tmp_path: Path) -> None:
    result = convert(image_manifest, tmp_path / "out", shard_size="1MB")
    assert result.num_samples == 24
    labels = sorted(r["label"] for r in read_samples(tmp_path / "out"))
    assert labels == sorted(json.loads(line)["label"] for line in image_manifest.read_text().splitlines())


def test_measure_conversion(small_folder: Path, tmp_path: Path) -> None:
    copy = measure_conversion(small_folder, tmp_path, workers=1, reencode=False)
    again = measure_conversion(small_folder, tmp_path, workers=2, reencode=True)
    assert copy["files"] == again["files"] == 10 and copy["files_per_s"] > 0 and again["mb_per_s"] > 0
    assert copy["out"] != again["out"] and copy["mb_out"] > 0 and again["mb_out"] > 0


def _png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def test_progress_draws_a_bar_on_a_terminal_and_logs_lines_elsewhere() -> None:
    from mediapipe.cli.progress import Progress

    tty, log = io.StringIO(), io.StringIO()
    bar = Progress(4, unit="files", desc="convert", stream=tty, tty=True)
    plain = Progress(4, unit="files", desc="convert", stream=log, tty=False, log_every=0.0)
    for p in (bar, plain):
        p._last_draw -= 1.0  # as if the last draw were long ago
        p.update(1, bytes=2_000_000)
        p.update(1, bytes=2_000_000)
        p.close()
    assert "\r[" in tty.getvalue() and "2/4 files" in tty.getvalue() and tty.getvalue().endswith("\n")
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) == 3 and lines[-1].startswith("convert: 2/4 files")
    assert "files/s" in lines[-1] and "MB/s" in lines[-1] and "ETA" in lines[-1]


def test_manifest_masks_and_numeric_fields_survive(tmp_path: Path) -> None:
    rows = []
    for i in range(3):
        (tmp_path / f"img{i}.jpg").write_bytes(jpeg_bytes(photo_like(40, 60, i)))
        mask = (photo_like(40, 60, 10 + i)[..., 0] > 128).astype(np.uint8) * 255
        buf = io.BytesIO()
        Image.fromarray(mask).save(buf, format="PNG")
        (tmp_path / f"mask{i}.png").write_bytes(buf.getvalue())
        rows.append({"path": f"img{i}.jpg", "mask": f"mask{i}.png", "label": i % 2, "weight": 0.5 + i})
    manifest = tmp_path / "train.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    convert(manifest, tmp_path / "out", options=TranscodeOptions(image_max_side=30))
    source = mp.loaders.shards(tmp_path / "out")
    by_key = {source.ref(i).key: source.ref(i) for i in range(3)}
    assert sorted(by_key) == ["img0", "img1", "img2"]
    for i in range(3):
        ref = by_key[f"img{i}"]
        assert set(ref.blobs) == {"jpg", "mask"} and ref.fields == {"weight": 0.5 + i} and ref.label == i % 2
        assert ref.blob("image", "mask").read() == (tmp_path / f"mask{i}.png").read_bytes()  # lossless, as is
        assert ref.blob("image", "image").extension == "jpg"
    pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image(), "mask": mp.decoders.image(mode="L")},
                       batch_size=1, device="cpu")
    sample = pipe.dataset()[0]
    assert sample["mask"].shape[-2:] == (40, 60) and sample["image"].shape[-2:] == (20, 30)
    assert float(sample["weight"]) == source.ref(0).fields["weight"]
