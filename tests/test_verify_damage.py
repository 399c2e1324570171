"""`mediapipe verify` names the damaged member and its offset when a shard's sha256 differs:
from each member's sha256, written beside the shard at conversion, and from the zeros convert
writes between members. Datasets converted before member digests stay readable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import mediapipe as mp
from mediapipe.cli import main
from mediapipe.dataset.convert import convert
from mediapipe.dataset.digests import read_digests
from mediapipe.dataset.index import read_index
from mediapipe.dataset.inspect import verify
from mediapipe.dataset.layout import BLOCK, MANIFEST
from mediapipe.dataset.manifest import read_manifest
from mediapipe.errors import SourceError
from tests.helpers import write_image_folder


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = write_image_folder(tmp_path_factory.mktemp("src"), 6, classes=2, scale=0.25)
    out = tmp_path_factory.mktemp("converted") / "out"
    convert(src, out, shard_size=3, shuffle=False)
    return out


@pytest.fixture
def ds(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "ds"))


def flip(path: Path, offset: int, mask: int = 0x10) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ mask]))


def test_each_shard_lists_its_members_digests_in_tar_order(pristine: Path) -> None:
    import hashlib

    manifest = read_manifest(pristine)
    for entry in manifest["shards"]:
        members = [m for sample in read_index(pristine / entry["idx"]) for m in sample]
        digests = read_digests(pristine / entry["digests"], members, where=entry["digests"])
        assert list(digests) == [m.name for m in members]
        with open(pristine / entry["name"], "rb") as f:
            for m in members:
                f.seek(m.offset)
                assert digests[m.name] == hashlib.sha256(f.read(m.size)).hexdigest()
    assert verify(pristine) == []


def test_a_damaged_member_is_named_with_its_offset(ds: Path, capsys) -> None:
    member = read_index(ds / "shard-000001.idx")[1][0]  # an image in the middle of the second shard
    flip(ds / "shard-000001.tar", member.offset + member.size // 2)
    problems = verify(ds, decode=False)  # bytes only: no decoder to stumble on the damage
    assert {"shard": "shard-000001.tar", "offset": None, "member": None,
            "reason": "sha256 differs from the manifest's"} in problems
    located = [p for p in problems if p["member"] is not None]
    assert [(p["shard"], p["member"], p["offset"]) for p in located] == [
        ("shard-000001.tar", member.name, member.offset)], problems
    assert located[0]["reason"].startswith(f"damaged: the member's {member.size} bytes differ from the sha256")
    assert main(["verify", "--no-decode", str(ds)]) == 1
    err = capsys.readouterr().err
    assert f"FAIL shard-000001.tar:{member.name} at offset {member.offset}: damaged" in err, err


def test_damage_between_members_is_located_to_the_byte(ds: Path) -> None:
    first = read_index(ds / "shard-000000.idx")[0][0]
    assert first.size % BLOCK, "the test needs a member followed by padding"
    where = first.offset + first.size + 7
    flip(ds / "shard-000000.tar", where, 0x01)
    problems = verify(ds)
    assert [(p["offset"], p["reason"]) for p in problems if p["offset"] is not None] == [
        (where, f"damaged: the padding after {first.name} should be zeros (first non-zero byte at offset {where})")]
    end = (ds / "shard-000001.tar").stat().st_size - 100  # inside the end-of-archive blocks
    flip(ds / "shard-000001.tar", end, 0x01)
    assert any(p["offset"] == end and "end-of-archive" in p["reason"] for p in verify(ds)), verify(ds)


def test_a_digests_file_that_does_not_match_is_reported_and_the_loader_still_opens(ds: Path) -> None:
    path = ds / "shard-000000.sha256"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")  # two lines swapped
    problems = verify(ds)
    assert [p["shard"] for p in problems] == ["shard-000000.sha256:1"], problems
    assert "expected '<sha256>  " in problems[0]["reason"]
    path.unlink()
    assert [p["reason"].startswith("cannot open member digests") for p in verify(ds)] == [True]
    assert len(mp.loaders.shards(ds)) == 6  # digests serve verify only


def test_the_manifest_field_is_type_checked_and_confined(ds: Path) -> None:
    manifest = json.loads((ds / MANIFEST).read_text())
    manifest["shards"][0]["digests"] = 7
    (ds / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(SourceError, match=r"shards\[0\]\.digests: expected a file name or null, got 7"):
        read_manifest(ds)
    manifest["shards"][0]["digests"] = "../elsewhere.sha256"
    (ds / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(SourceError, match=r"shards\[0\]\.digests: '\.\./elsewhere\.sha256' resolves to .*outside"):
        mp.loaders.shards(ds)


def test_a_dataset_converted_before_member_digests_is_read_and_verified(ds: Path) -> None:
    manifest = json.loads((ds / MANIFEST).read_text())
    for entry in manifest["shards"]:
        (ds / entry.pop("digests")).unlink()
    (ds / MANIFEST).write_text(json.dumps(manifest))
    source = mp.loaders.shards(ds)
    assert len(source) == 6 and source.ref(0).blob("image").read()[:2] == b"\xff\xd8"
    assert verify(ds) == []
    member = read_index(ds / "shard-000001.idx")[0][0]
    flip(ds / "shard-000001.tar", member.offset + member.size // 2)
    problems = verify(ds, decode=False)
    assert len(problems) == 1 and problems[0]["shard"] == "shard-000001.tar", problems
    assert "no member digests (converted before they were written)" in problems[0]["reason"]
