"""A converted dataset is read as untrusted input: paths stay inside its folder, every field
is checked on open, sizes are bounded before memory is spent, and `verify` refuses what
the loader refuses. Each test edits a copy of a small converted dataset the way a damaged
disk or a hostile user would."""

from __future__ import annotations

import gzip
import importlib
import json
import os
import shutil
import subprocess
import sys
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mediapipe as mp
from mediapipe.cli import main as cli
from mediapipe.dataset import sample_records
from mediapipe.dataset.convert import convert
from mediapipe.dataset.digests import sha256_file
from mediapipe.dataset.index import read_index
from mediapipe.dataset.inspect import verify
from mediapipe.dataset.layout import BLOCK, FORMAT_VERSION, MANIFEST, SAMPLES
from mediapipe.dataset.tar import Member, scan_tar
from mediapipe.errors import SourceError
from tests.helpers import write_image_folder


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 small JPEGs with labels, converted into 2 shards of 3."""
    src = write_image_folder(tmp_path_factory.mktemp("src"), 6, scale=0.2)
    out = tmp_path_factory.mktemp("ds") / "out"
    convert(src, out, shard_size=3, seed=1)
    return out


@pytest.fixture
def ds(original: Path, tmp_path: Path) -> Path:
    """A fresh copy of the dataset to damage."""
    return Path(shutil.copytree(original, tmp_path / "ds"))


def _manifest(ds: Path) -> dict[str, Any]:
    return json.loads((ds / MANIFEST).read_text())


def _write_manifest(ds: Path, manifest: Any) -> None:
    (ds / MANIFEST).write_text(json.dumps(manifest))


def _records(ds: Path) -> list[dict[str, Any]]:
    with gzip.open(ds / SAMPLES, "rt") as f:
        return [json.loads(line) for line in f]


def _write_records(ds: Path, lines: list[Any]) -> None:
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    (ds / SAMPLES).write_bytes(gzip.compress(text.encode()))


def _cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    """Exit status and stdout+stderr of an in-process command; an exception escaping fails the test."""
    capsys.readouterr()
    code = cli(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def _read_all(source: Any) -> list[bytes]:
    return [source.ref(i).blob("image").read() for i in range(len(source))]


# -- 1. paths stay inside the dataset folder ----------------------------------------------
@pytest.mark.parametrize("field", ["name", "idx"])
@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_a_shard_path_outside_the_dataset_is_refused(ds: Path, tmp_path: Path, capsys, field: str,
                                                      how: str) -> None:
    """The outside file is a valid copy of the shard: only confinement can refuse it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    manifest = _manifest(ds)
    entry = manifest["shards"][0]
    real = ds / entry[field]
    outside = elsewhere / entry[field]
    shutil.copy(real, outside)
    if how == "dotdot":
        entry[field] = f"../elsewhere/{entry[field]}"
    elif how == "absolute":
        entry[field] = str(outside)
    else:
        real.unlink()
        real.symlink_to(outside)
    _write_manifest(ds, manifest)
    with pytest.raises(SourceError, match=rf"manifest\.json.*shards\[0\]\.{field}.*outside the dataset"):
        mp.loaders.shards(ds)
    code, out = _cli(capsys, "verify", str(ds))
    assert code == 1 and f"shards[0].{field}" in out and "outside the dataset" in out, out


def test_a_symlink_inside_the_dataset_is_followed(ds: Path) -> None:
    """Links are resolved before the check: one that stays inside the folder is fine."""
    expected = _read_all(mp.loaders.shards(ds))
    (ds / "store").mkdir()
    tar = ds / "shard-000001.tar"
    tar.rename(ds / "store" / tar.name)
    tar.symlink_to(Path("store") / tar.name)
    assert _read_all(mp.loaders.shards(ds)) == expected
    assert verify(ds) == []


def test_the_same_shard_listed_twice_is_refused(ds: Path, capsys) -> None:
    manifest = _manifest(ds)
    twin = dict(manifest["shards"][0], shard=2)
    manifest["shards"].append(twin)
    manifest["num_samples"] += twin["samples"]
    _write_manifest(ds, manifest)
    with pytest.raises(SourceError, match=r"shards\[2\]\.name: 'shard-000000\.tar' is the same file as shards\[0\]"):
        mp.loaders.shards(ds)
    code, out = _cli(capsys, "verify", "--no-decode", str(ds))
    assert code == 1 and "same file" in out
    manifest["shards"][2] = dict(manifest["shards"][1])  # the same shard number twice
    _write_manifest(ds, manifest)
    with pytest.raises(SourceError, match=r"shards\[2\]\.shard: shard 1 is listed twice"):
        mp.loaders.shards(ds)


def test_a_link_to_the_same_shard_under_another_name_is_refused(ds: Path) -> None:
    (ds / "again.tar").symlink_to("shard-000000.tar")
    manifest = _manifest(ds)
    manifest["shards"][1]["name"] = "again.tar"
    _write_manifest(ds, manifest)
    with pytest.raises(SourceError, match=r"shards\[1\]\.name: 'again\.tar' is the same file as shards\[0\]\.name"):
        mp.loaders.shards(ds)


def test_a_fifo_in_place_of_a_file_is_refused_without_hanging(ds: Path, capsys) -> None:
    for name in (SAMPLES, "shard-000000.idx", "shard-000001.tar"):
        broken = ds.parent / f"fifo-{name}"
        shutil.copytree(ds, broken)
        (broken / name).unlink()
        os.mkfifo(broken / name)
        with pytest.raises(SourceError, match="not a regular file"):
            mp.loaders.shards(broken)
        code, out = _cli(capsys, "verify", "--no-decode", str(broken))
        assert code == 1 and "not a regular file" in out, out


# -- 2. every field is checked on open ----------------------------------------------------
def _retyped(value: Any) -> Any:
    """A value of another JSON type."""
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return 7
    if isinstance(value, list):
        return {"a": 1}
    if isinstance(value, dict):
        return []
    return {}


def _mutations(obj: dict[str, Any]) -> list[tuple[str, str, Callable[[dict[str, Any]], None]]]:
    """(field, what, edit) for dropping and retyping each field of ``obj``."""
    out = []
    for key in obj:
        out.append((key, "dropped", lambda o, k=key: o.pop(k)))
        out.append((key, "retyped", lambda o, k=key: o.__setitem__(k, _retyped(o[k]))))
    return out


def _outcome(ds: Path, capsys, field: str) -> str:
    """'ok' when the loader opens the dataset (and verify and inspect agree); 'refused' when
    the loader, verify and inspect each refuse it naming ``field``, with no traceback."""
    try:
        mp.loaders.shards(ds)
    except SourceError as err:
        assert field in str(err), err
        loader = "refused"
    else:
        loader = "ok"
    code, out = _cli(capsys, "verify", "--no-decode", str(ds))
    assert (code == 0) == (loader == "ok"), (field, out)
    assert "Traceback" not in out
    if loader == "refused":
        assert field in out, out
    code, out = _cli(capsys, "inspect", str(ds))
    if code != 0:
        assert field in out and "Traceback" not in out, out
    return loader


def test_manifest_fields_dropped_or_retyped_are_refused_cleanly(original: Path, tmp_path: Path, capsys) -> None:
    manifest = _manifest(original)
    cases = [(f, w, e, None) for f, w, e in _mutations(manifest)]
    cases += [(f"shards[1].{f}", w, e, 1) for f, w, e in _mutations(manifest["shards"][1])]
    outcomes = {}
    for n, (field, what, edit, shard) in enumerate(cases):
        ds = Path(shutil.copytree(original, tmp_path / f"m{n}"))
        changed = _manifest(ds)
        edit(changed if shard is None else changed["shards"][shard])
        _write_manifest(ds, changed)
        outcomes[field, what] = _outcome(ds, capsys, field)
    retyped = {field: o for (field, what), o in outcomes.items() if what == "retyped"}
    assert set(retyped.values()) == {"refused"}, retyped  # every field the format defines is type-checked
    required = {"format", "version", "complete", "shards", "num_samples", "shards[1].shard", "shards[1].name",
                "shards[1].idx", "shards[1].samples", "shards[1].bytes", "shards[1].sha256"}
    dropped = {field for (field, what), o in outcomes.items() if what == "dropped" and o == "refused"}
    assert dropped == required


@pytest.mark.parametrize("text, reason", [
    ("[1, 2]", "must be a JSON object"),
    ("{", "invalid JSON"),
    ('{"format": "mediapipe-shards", "version": NaN}', "NaN"),
    ('{"format": "mediapipe-shards", "version": -Infinity}', "Infinity"),
    ('{"format": "mediapipe-shards", "version": 1' + "0" * 5000 + "}", "invalid JSON"),
    ("[" * 100_000, "nested too deeply"),
    ("\xff\xfe", "invalid JSON"),
])
def test_a_manifest_that_is_not_json_is_refused_cleanly(ds: Path, capsys, text: str, reason: str) -> None:
    (ds / MANIFEST).write_bytes(text.encode("latin-1"))
    with pytest.raises(SourceError, match=rf"manifest\.json.*{reason}"):
        mp.loaders.shards(ds)
    for argv in (("verify", "--no-decode", str(ds)), ("inspect", str(ds))):
        code, out = _cli(capsys, *argv)
        assert code != 0 and reason in out and "Traceback" not in out, out


@pytest.mark.parametrize("field, value, reason", [
    ("bytes", 1e300, "expected an int >= 0"),
    ("bytes", 2**70, "expected an int >= 0"),
    ("samples", -1, "expected an int >= 0"),
    ("sha256", "00", "expected a sha256 hex digest"),
    ("name", "", "expected a file name"),
    ("name", "a\0b.tar", "expected a file name"),
])
def test_shard_entries_with_impossible_values_are_refused(ds: Path, field: str, value: Any, reason: str) -> None:
    manifest = _manifest(ds)
    manifest["shards"][0][field] = value
    _write_manifest(ds, manifest)
    with pytest.raises(SourceError, match=rf"manifest\.json.*shards\[0\]\.{field}: {reason}"):
        mp.loaders.shards(ds)


def test_a_manifest_whose_counts_disagree_is_refused(ds: Path) -> None:
    manifest = _manifest(ds)
    manifest["num_samples"] += 1
    _write_manifest(ds, manifest)
    with pytest.raises(SourceError, match=r"num_samples: 7, but the shards hold 6"):
        mp.loaders.shards(ds)
    manifest["num_samples"] -= 1
    manifest["version"] = FORMAT_VERSION + 1  # a format from the future
    _write_manifest(ds, manifest)
    with pytest.raises(SourceError, match="newer than"):
        mp.loaders.shards(ds)


def test_sample_record_fields_dropped_or_retyped_are_refused_cleanly(original: Path, tmp_path: Path,
                                                                     capsys) -> None:
    records = _records(original)
    outcomes = {}
    for n, (field, what, edit) in enumerate(_mutations(records[1])):
        ds = Path(shutil.copytree(original, tmp_path / f"r{n}"))
        changed = _records(ds)
        edit(changed[1])
        _write_records(ds, changed)
        outcome = _outcome(ds, capsys, field)
        if outcome == "refused":
            with pytest.raises(SourceError, match=rf"samples\.jsonl\.gz:2.*'{field}'"):
                mp.loaders.shards(ds)
        outcomes[field, what] = outcome
    retyped = {field: o for (field, what), o in outcomes.items() if what == "retyped"}
    assert set(retyped.values()) == {"refused"}, retyped
    dropped = {field for (field, what), o in outcomes.items() if what == "dropped" and o == "refused"}
    assert dropped == {"key", "shard"}


@pytest.mark.parametrize("line, reason", [
    ("[1]", "must be a JSON object"),
    ("null", "must be a JSON object"),
    ('{"key": "a", "shard": 0, "duration": NaN}', "NaN"),
    ('{"key": "a", "shard": 0, "duration": 1e999}', "'duration': expected a finite number"),
    ('{"key": "a", "shard": 0, "width": 1' + "0" * 5000 + "}", "invalid JSON"),
    ('{"key": "../a", "shard": 0}', "'key': expected a sample key"),
    ('{"key": "a", "shard": 0, "fields": {"w": [1]}}', "'fields': expected numbers or text by name"),
    ('{"key": "a", "shard": 0, "keyframes": [0, -1]}', "'keyframes': expected a list of ints >= 0"),
    ('{"a": ' * 100_000, "nested too deeply"),
])
def test_a_malformed_sample_record_names_its_line(ds: Path, capsys, line: str, reason: str) -> None:
    records: list[Any] = _records(ds)
    records[2] = line
    _write_records(ds, records)
    with pytest.raises(SourceError, match=rf"samples\.jsonl\.gz:3.*{reason}"):
        mp.loaders.shards(ds)
    for argv in (("verify", "--no-decode", str(ds)), ("inspect", str(ds))):
        code, out = _cli(capsys, *argv)
        assert code != 0 and "samples.jsonl.gz:3" in out and "Traceback" not in out, out


def test_records_that_do_not_match_the_index_are_refused(ds: Path, capsys) -> None:
    records = _records(ds)
    records[0]["shard"] = 5  # a shard the manifest does not list
    _write_records(ds, records)
    with pytest.raises(SourceError, match=r"samples\.jsonl\.gz:1.*shard 5.*not in the manifest"):
        mp.loaders.shards(ds)
    code, out = _cli(capsys, "verify", "--no-decode", str(ds))
    assert code == 1 and "shard 5" in out


def test_the_command_line_entry_point_prints_no_traceback(ds: Path) -> None:
    manifest = _manifest(ds)
    manifest["shards"][0]["samples"] = "3"
    _write_manifest(ds, manifest)
    for command in ("verify", "inspect"):
        run = subprocess.run([sys.executable, "-m", "mediapipe.cli", command, str(ds)], capture_output=True,
                             text=True, timeout=120)
        assert run.returncode != 0 and "Traceback" not in run.stderr, run.stderr
        assert "shards[0].samples" in run.stdout + run.stderr


# -- 3. verify checks everything the loader reads -------------------------------------------
@pytest.mark.parametrize("damage", ["missing", "not gzip", "truncated gzip", "one record short"])
def test_verify_fails_when_the_sample_records_are_missing_or_damaged(ds: Path, capsys, damage: str) -> None:
    path = ds / SAMPLES
    if damage == "missing":
        path.unlink()
    elif damage == "not gzip":
        path.write_bytes(b"these are not records")
    elif damage == "truncated gzip":
        path.write_bytes(path.read_bytes()[:-12])
    else:
        _write_records(ds, _records(ds)[:-1])
    with pytest.raises(SourceError, match=r"samples\.jsonl\.gz"):
        mp.loaders.shards(ds)
    assert any("samples.jsonl.gz" in p["reason"] or p["shard"] == SAMPLES for p in verify(ds))
    code, out = _cli(capsys, "verify", str(ds))
    assert code == 1 and "samples.jsonl.gz" in out and "OK" not in out


def test_verify_ok_means_the_loader_opens_and_reads_every_sample(ds: Path) -> None:
    assert verify(ds) == []
    source = mp.loaders.shards(ds)
    assert len(source) == 6 and all(_read_all(source))


# -- 4. bombs: sizes are bounded before memory is spent ------------------------------------
def _gzip_bomb(path: Path, head: bytes, filler: bytes, inflated: int) -> None:
    """``head`` then ``filler`` repeated up to ``inflated`` bytes, gzipped as it is written."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = filler * ((1 << 20) // len(filler))
    with open(path, "wb") as f:
        f.write(z.compress(head))
        for _ in range(inflated // len(chunk)):
            f.write(z.compress(chunk))
        f.write(z.flush())


def _peak_bytes(call: Callable[[], Any]) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    try:
        call()
        error = None
    except BaseException as err:  # noqa: BLE001  returned to the test
        error = err
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, error


def test_a_gzip_bomb_of_one_long_line_is_refused_in_bounded_memory(ds: Path, capsys) -> None:
    _gzip_bomb(ds / SAMPLES, b'{"key": "', b"a" * 4096, 1 << 30)  # 1 GiB inflated, ~1 MB on disk
    assert (ds / SAMPLES).stat().st_size < 4 << 20
    peak, error = _peak_bytes(lambda: mp.loaders.shards(ds))
    assert isinstance(error, SourceError) and "samples.jsonl.gz:1" in str(error) and "longer than" in str(error)
    assert peak < 32 << 20, f"{peak / 2**20:.0f} MiB"
    peak, error = _peak_bytes(lambda: _cli(capsys, "inspect", str(ds)))
    assert error is None and peak < 32 << 20, f"{peak / 2**20:.0f} MiB"


def test_a_gzip_bomb_of_many_records_is_refused_in_bounded_memory(ds: Path) -> None:
    record = json.dumps(_records(ds)[0]).encode() + b"\n"
    _gzip_bomb(ds / SAMPLES, b"", record, 256 << 20)
    peak, error = _peak_bytes(lambda: mp.loaders.shards(ds))
    assert isinstance(error, SourceError) and "more records than" in str(error), error
    assert peak < 32 << 20, f"{peak / 2**20:.0f} MiB"


def test_the_total_size_of_the_records_is_bounded(ds: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records(ds)
    records[0]["source"] = "x" * 60_000  # a long line, yet under the line limit
    _write_records(ds, records)
    monkeypatch.setattr(sample_records, "SAMPLES_FLOOR_BYTES", 1 << 10)
    monkeypatch.setattr(sample_records, "SAMPLES_BYTES_PER_RECORD", 1 << 10)  # 1 KiB + 6 x 1 KiB for 6 samples
    with pytest.raises(SourceError, match=r"samples\.jsonl\.gz.*more than the 7168 bytes"):
        mp.loaders.shards(ds)


def test_an_oversized_index_or_manifest_is_refused_before_it_is_read(ds: Path) -> None:
    idx = ds / "shard-000000.idx"
    with open(idx, "ab") as f:
        f.truncate(idx.stat().st_size + (1 << 30))  # sparse: no disk spent
    peak, error = _peak_bytes(lambda: mp.loaders.shards(ds))
    assert isinstance(error, SourceError) and "shard-000000.idx" in str(error) and "bytes" in str(error), error
    assert peak < 32 << 20
    with open(ds / MANIFEST, "ab") as f:
        f.truncate(1 << 30)
    peak, error = _peak_bytes(lambda: mp.loaders.shards(ds))
    assert isinstance(error, SourceError) and "manifest.json" in str(error), error
    assert peak < 32 << 20


# -- 5. the index: sorted, disjoint ranges inside the shard; checksums on demand -----------
def _index_lines(ds: Path, name: str = "shard-000000.idx") -> list[list[str]]:
    return [line.split() for line in (ds / name).read_text().splitlines()]


def _write_index(ds: Path, lines: list[list[str]], name: str = "shard-000000.idx") -> None:
    (ds / name).write_text("".join(" ".join(tokens) + "\n" for tokens in lines))


def test_an_index_serving_one_member_under_two_keys_is_refused(ds: Path, capsys) -> None:
    lines = _index_lines(ds)
    first, second = lines[1], lines[2]  # "jpg off size k0.jpg cls ... json ..." per sample
    jpg0 = first[0:4]
    second_wo_jpg = [t for i in range(0, len(second), 4) if second[i] != "jpg" for t in second[i:i + 4]]
    lines[2] = second_wo_jpg + jpg0  # sample 1 "has" sample 0's image
    _write_index(ds, lines)
    with pytest.raises(SourceError, match=r"shard-000000\.idx:3"):
        mp.loaders.shards(ds)
    code, out = _cli(capsys, "verify", "--no-decode", str(ds))
    assert code == 1 and "shard-000000.idx:3" in out


def test_an_index_with_overlapping_or_unsorted_ranges_is_refused(original: Path, ds: Path) -> None:
    lines = _index_lines(ds)
    jpg, cls = lines[1][0:4], lines[1][4:8]
    overlapping = [cls[0], str(int(jpg[1]) + 512), cls[2], cls[3]]  # cls inside the jpg's bytes
    lines[1] = jpg + overlapping + lines[1][8:]
    _write_index(ds, lines)
    with pytest.raises(SourceError, match=r"shard-000000\.idx:2.*overlaps"):
        mp.loaders.shards(ds)
    lines = _index_lines(original)
    _write_index(ds, [lines[0], lines[2], lines[1], lines[3]])  # two samples swapped
    records = _records(ds)
    records[0], records[1] = records[1], records[0]  # and their records, so only the order is wrong
    _write_records(ds, records)
    with pytest.raises(SourceError, match=r"shard-000000\.idx:3.*overlaps"):
        mp.loaders.shards(ds)


@pytest.mark.parametrize("edit, reason", [
    (lambda t: t.__setitem__(2, "-5"), "bad index entry"),
    (lambda t: t.__setitem__(1, "+512"), "bad index entry"),
    (lambda t: t.__setitem__(2, str(1 << 40)), "runs past the end"),
    (lambda t: t.__setitem__(1, str(10**30)), "runs past the end"),
    (lambda t: t.__setitem__(1, "5" * 5000), "bad index entry"),
    (lambda t: t.__setitem__(0, "png"), "extension"),
    (lambda t: t.__setitem__(slice(0, 4), ["cls", t[1], t[2], t[3].replace(".jpg", ".cls")]), "twice"),
])
def test_index_entries_with_impossible_values_are_refused(ds: Path, edit, reason: str) -> None:
    lines = _index_lines(ds)
    edit(lines[1])
    _write_index(ds, lines)
    with pytest.raises(SourceError, match=rf"shard-000000\.idx:2.*{reason}"):
        mp.loaders.shards(ds)


def test_an_index_announcing_other_counts_than_the_manifest_is_refused(ds: Path) -> None:
    lines = _index_lines(ds)
    _write_index(ds, [["v1.2", "2"], *lines[1:3]])
    with pytest.raises(SourceError, match=r"shard-000000\.idx.*2 samples.*manifest.*3"):
        mp.loaders.shards(ds)


def _flip_a_data_byte(ds: Path) -> Member:
    """Change one byte in the middle of shard 0's first image: sizes and headers still agree."""
    member = read_index(ds / "shard-000000.idx")[0][0]
    tar = ds / "shard-000000.tar"
    stat = tar.stat()
    with open(tar, "r+b") as f:
        f.seek(member.offset + member.size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x55]))
    os.utime(tar, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as a disk error would: mtime unchanged
    return member


def test_verify_sha256_checks_each_shard_once_per_process(ds: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shards_module = importlib.import_module("mediapipe.loaders.sources.shards")  # the package's `shards` is the function

    good = mp.loaders.shards(ds, verify="sha256")
    hashed: list[str] = []
    real = shards_module._shard_digest
    monkeypatch.setattr(shards_module, "_shard_digest", lambda fd, path: hashed.append(path) or real(fd, path))
    _read_all(good)
    _read_all(good)
    assert sorted(os.path.basename(p) for p in hashed) == ["shard-000000.tar", "shard-000001.tar"]
    expected = _manifest(ds)["shards"][0]["sha256"]
    _flip_a_data_byte(ds)
    shards_module._OPEN_SHARDS.forget()  # as a new process would
    plain = mp.loaders.shards(ds)
    assert len(_read_all(plain)) == 6  # without verify the damage goes unseen
    shards_module._OPEN_SHARDS.forget()
    checked = mp.loaders.shards(ds, verify="sha256")
    actual = sha256_file(ds / "shard-000000.tar")
    index = next(i for i in range(len(checked)) if checked.shard_of(i) == 0)
    with pytest.raises(SourceError, match=rf"shard-000000\.tar.*sha256 {actual}.*manifest.*{expected}"):
        checked.ref(index).blob("image").read()
    other = next(i for i in range(len(checked)) if checked.shard_of(i) == 1)
    assert checked.ref(other).blob("image").read()  # the other shard is fine
    assert checked.to_config()["verify"] == "sha256"
    with pytest.raises(ValueError, match="verify="):
        mp.loaders.shards(ds, verify="md5")


# -- hostile tars and datasets that change under the reader ---------------------------------
def _raw_header(name: str, size_field: bytes) -> bytes:
    import tarfile

    info = tarfile.TarInfo(name)
    block = bytearray(info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict"))
    block[124:136] = size_field
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def test_a_tar_header_with_a_negative_size_is_refused(tmp_path: Path) -> None:
    negative = b"\xff" + (-1536 % (1 << 88)).to_bytes(11, "big")  # GNU base-256: -1536
    tar = tmp_path / "neg.tar"
    tar.write_bytes(_raw_header("a.jpg", b"%011o\0" % 1) + b"x".ljust(512, b"\0") + _raw_header("b.jpg", negative)
                    + b"\0" * 2048)
    with pytest.raises(SourceError, match=r"'b\.jpg'.*size -1536"):
        list(scan_tar(tar))
    from mediapipe.loaders.sources.shards import ShardBlob

    with pytest.raises(SourceError, match="tar header"):  # an index pointing at it
        ShardBlob("neg.tar:b.jpg", path=str(tar), offset=1536, size=0).read()


def test_a_shard_replaced_after_open_is_detected_on_read(ds: Path) -> None:
    shards_module = importlib.import_module("mediapipe.loaders.sources.shards")  # the package's `shards` is the function

    shards_module._OPEN_SHARDS.forget()
    source = mp.loaders.shards(ds)
    tar = ds / "shard-000000.tar"
    fresh = tar.read_bytes()
    replacement = ds / "replacement"
    replacement.write_bytes(fresh[:1024] + bytes(len(fresh) - 1024))  # same size, other bytes
    os.replace(replacement, tar)
    index = next(i for i in range(len(source)) if source.shard_of(i) == 0)
    with pytest.raises(SourceError, match=r"shard-000000\.tar.*changed since the dataset was opened"):
        source.ref(index).blob("image").read()


def test_a_dataset_rewritten_in_the_same_process_is_not_read_through_a_stale_descriptor(
        original: Path, tmp_path: Path) -> None:
    """A shard file kept open for one dataset must not serve the next dataset at that path."""
    path = tmp_path / "ds"
    shutil.copytree(original, path)
    first = _read_all(mp.loaders.shards(path))
    shutil.rmtree(path)
    src = write_image_folder(tmp_path / "other", 6, scale=0.2, seed=9)
    convert(src, path, shard_size=3, seed=1)
    second = mp.loaders.shards(path)
    assert _read_all(second) != first
    fresh = [json.loads(x) for x in gzip.decompress((path / SAMPLES).read_bytes()).splitlines()]
    assert [len(b) for b in _read_all(second)] == [r["bytes"] for r in fresh]


def test_an_extended_tar_header_is_refused_before_its_size_is_allocated(tmp_path: Path) -> None:
    """tarfile would read a pax header's claimed size in one allocation (8 GiB here)."""
    import tarfile

    block = bytearray(_raw_header("PaxHeader", b"%011o\0" % ((8 << 30) - 1)))
    block[156:157] = tarfile.XHDTYPE
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    tar = tmp_path / "pax.tar"
    tar.write_bytes(bytes(block) + b"\0" * 4096)
    peak, error = _peak_bytes(lambda: list(scan_tar(tar)))
    assert isinstance(error, SourceError) and "extended (pax or GNU) header at offset 0" in str(error), error
    assert peak < 1 << 20


def test_a_shard_entry_claiming_more_samples_than_its_bytes_hold_is_refused(ds: Path) -> None:
    manifest = _manifest(ds)
    manifest["shards"][0]["samples"] = 10**12
    manifest["num_samples"] = 10**12 + 3
    _write_manifest(ds, manifest)
    with pytest.raises(SourceError, match=r"shards\[0\]\.samples: 1000000000000 samples cannot fit in"):
        mp.loaders.shards(ds)


def test_a_symlink_loop_in_place_of_a_shard_is_refused_cleanly(ds: Path, capsys) -> None:
    tar = ds / "shard-000000.tar"
    tar.unlink()
    (ds / "loop").symlink_to("shard-000000.tar")
    tar.symlink_to("loop")
    with pytest.raises(SourceError, match=r"shard-000000\.tar|loop"):
        mp.loaders.shards(ds)
    code, out = _cli(capsys, "verify", "--no-decode", str(ds))
    assert code == 1 and "Traceback" not in out


def test_a_shard_swapped_for_a_link_after_open_is_not_followed(ds: Path, tmp_path: Path) -> None:
    shards_module = importlib.import_module("mediapipe.loaders.sources.shards")
    shards_module._OPEN_SHARDS.forget()
    source = mp.loaders.shards(ds)
    tar = ds / "shard-000000.tar"
    outside = tmp_path / "outside.tar"
    shutil.copy2(tar, outside)  # same bytes, size and mtime: only the link gives it away
    tar.unlink()
    tar.symlink_to(outside)
    index = next(i for i in range(len(source)) if source.shard_of(i) == 0)
    with pytest.raises(SourceError, match=r"shard-000000\.tar"):
        source.ref(index).blob("image").read()


def test_a_tar_header_naming_another_member_is_refused_on_read(ds: Path, capsys) -> None:
    """A hand-made header: valid checksum, the right size, but a USTAR prefix that makes
    its full name another file's."""
    member = read_index(ds / "shard-000000.idx")[0][0]
    tar = ds / "shard-000000.tar"
    with open(tar, "r+b") as f:
        f.seek(member.offset - BLOCK)
        block = bytearray(f.read(BLOCK))
        block[345:350] = b"evil\0"
        block[148:156] = b" " * 8
        block[148:156] = b"%06o\0 " % sum(block)
        f.seek(member.offset - BLOCK)
        f.write(bytes(block))
    source = mp.loaders.shards(ds)  # sizes are unchanged: only the header differs
    index = next(i for i in range(len(source)) if source.ref(i).blob("image").offset == member.offset)
    with pytest.raises(SourceError, match=rf"says 'evil/{member.name}'"):
        source.ref(index).blob("image").read()
    code, out = _cli(capsys, "verify", "--no-decode", str(ds))
    assert code == 1 and "evil" in out


def test_inspect_names_labels_outside_the_class_list_by_number(ds: Path, capsys) -> None:
    records = _records(ds)
    records[0]["label"] = -1
    _write_records(ds, records)
    code, out = _cli(capsys, "inspect", "--json", str(ds))
    assert code == 0 and json.loads(out)["classes"]["-1"] == 1


def _claim_a_million_samples(ds: Path, shard: int) -> None:
    """A manifest whose shard ``shard`` claims a million samples (and the bytes they need), and
    a small samples.jsonl.gz that inflates to a million short records."""
    manifest = _manifest(ds)
    claimed = 1_000_000
    manifest["shards"][shard].update(samples=claimed, bytes=claimed * 1024)
    manifest["num_samples"] = sum(e["samples"] for e in manifest["shards"])
    _write_manifest(ds, manifest)
    _gzip_bomb(ds / SAMPLES, b"", b'{"key":"k","shard":0}\n', 22 * claimed)


def test_a_manifest_claiming_more_samples_than_its_shards_hold_is_refused_before_the_records(
        ds: Path, capsys) -> None:
    """The records are bounded in proportion to the manifest's num_samples; a manifest that
    claims a million samples (and shard sizes to match) let a 50 kB samples.jsonl.gz of short
    records cost `inspect` and `verify` hundreds of MB (the loader compares the shards' sizes
    on disk first)."""
    _claim_a_million_samples(ds, shard=0)
    assert (ds / SAMPLES).stat().st_size < 100_000
    peak, error = _peak_bytes(lambda: _cli(capsys, "inspect", str(ds)))
    assert error is None and peak < 32 << 20, f"{peak / 2**20:.0f} MiB"
    peak, error = _peak_bytes(lambda: verify(ds, decode=False))
    assert error is None and peak < 32 << 20, f"{peak / 2**20:.0f} MiB"
    problems = verify(ds, decode=False)
    assert any(p["shard"] == MANIFEST and "cannot fit in the" in p["reason"] for p in problems), problems
    code, out = _cli(capsys, "inspect", str(ds))
    assert code == 2 and "num_samples: 1000" in out and "cannot fit in the" in out and "Traceback" not in out
    with pytest.raises(SourceError, match="bytes, the manifest says"):
        mp.loaders.shards(ds)


def test_a_source_of_some_shards_bounds_the_records_by_every_shard_on_disk(ds: Path) -> None:
    """A source of some shards (a rank's, `for_rank`) checks its own shards' sizes only, yet reads
    every shard's records: another shard's made-up count let a small samples.jsonl.gz cost
    hundreds of MB."""
    _claim_a_million_samples(ds, shard=1)
    peak, error = _peak_bytes(lambda: mp.loaders.shards(ds).for_rank(0, 2))
    assert isinstance(error, SourceError) and "bytes, the manifest says" in str(error)  # the whole dataset: sizes
    from mediapipe.loaders.sources.shards import ShardSource

    peak, error = _peak_bytes(lambda: ShardSource(ds, [0]))
    assert isinstance(error, SourceError) and "cannot fit in the" in str(error), error
    assert peak < 32 << 20, f"{peak / 2**20:.0f} MiB"
