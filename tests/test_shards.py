"""The shard format: DALI and webdataset read it, hostile or damaged tars are refused."""

from __future__ import annotations

import io
import os
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import mediapipe as mp
from mediapipe.cli import main as cli
from mediapipe.dataset.convert import convert
from mediapipe.dataset.index import read_index
from mediapipe.dataset.inspect import verify
from mediapipe.dataset.layout import BLOCK
from mediapipe.dataset.tar import scan_tar
from mediapipe.errors import SourceError
from tests.helpers import write_image_folder


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = write_image_folder(tmp_path_factory.mktemp("src"), 9, scale=0.25)
    out = tmp_path_factory.mktemp("ds") / "out"
    convert(src, out, shard_size=4, seed=5)
    return out


def _members(dataset: Path) -> list[tuple[str, bytes, int]]:
    """(key, jpg bytes, label) of every sample, through our loader."""
    source = mp.loaders.shards(dataset)
    return [(source.ref(i).key, source.ref(i).blob("image").read(), source.ref(i).label) for i in range(len(source))]


def test_index_equals_dalis_wds2idx(dataset: Path, tmp_path: Path) -> None:
    wds2idx = pytest.importorskip("wds2idx")
    for tar in sorted(dataset.glob("shard-*.tar")):
        theirs = tmp_path / (tar.stem + ".idx")
        with wds2idx.IndexCreator(str(tar), str(theirs), verbose=False) as creator:
            creator.create_index()
        assert theirs.read_text() == (dataset / (tar.stem + ".idx")).read_text()


def test_dali_reads_our_shards_with_our_indices(dataset: Path) -> None:
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def

    tars = sorted(str(p) for p in dataset.glob("shard-*.tar"))
    idxs = [t[:-4] + ".idx" for t in tars]
    expected = _members(dataset)

    @pipeline_def(batch_size=len(expected), num_threads=1, device_id=None)
    def pipe():
        jpg, cls = fn.readers.webdataset(paths=tars, index_paths=idxs, ext=["jpg", "cls"],
                                         missing_component_behavior="error", random_shuffle=False, name="r")
        return jpg, cls

    p = pipe()
    p.build()
    jpgs, classes = p.run()
    got = [(bytes(jpgs.at(i)), int(bytes(classes.at(i)).decode())) for i in range(len(expected))]
    assert got == [(data, label) for _, data, label in expected]


def test_webdataset_library_iterates_our_shards(dataset: Path) -> None:
    wds = pytest.importorskip("webdataset")
    tars = sorted(str(p) for p in dataset.glob("shard-*.tar"))
    got = [(s["__key__"], s["jpg"], int(s["cls"])) for s in wds.WebDataset(tars, shardshuffle=False)]
    assert got == _members(dataset)


def test_shards_meta_and_rank_split(dataset: Path) -> None:
    source = mp.loaders.shards(dataset)
    assert source.num_shards == 3 and len(source) == 9
    meta = source.meta(0)
    assert meta["width"] > 0 and meta["height"] > 0 and meta["kind"] == "image"
    ranks = [source.for_rank(r, 2) for r in range(2)]
    assert [r.num_shards for r in ranks] == [2, 1]
    keys = sorted(r.ref(i).key for r in ranks for i in range(len(r)))
    assert keys == sorted(source.ref(i).key for i in range(len(source)))
    from mediapipe.loaders.sources import remote_shards  # noqa: F401  (a subclass of the same kind must not take its name)

    again = mp.loaders.sources.folder.source_from_config(ranks[1].to_config())
    assert [again.ref(i).key for i in range(len(again))] == [ranks[1].ref(i).key for i in range(len(ranks[1]))]


def _tar_with(members: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tar.addfile(info, io.BytesIO(m[1]))
    return buf.getvalue()


def test_member_names_that_escape_are_refused(tmp_path: Path) -> None:
    evil = tmp_path / "evil.tar"
    evil.write_bytes(_tar_with([("ok.jpg", b"x"), ("../evil.jpg", b"y")]))
    with pytest.raises(SourceError, match=r"unsafe member name '\.\./evil\.jpg'"):
        list(scan_tar(evil))
    absolute = tmp_path / "abs.tar"
    absolute.write_bytes(_tar_with([("/etc/passwd.jpg", b"y")]))
    with pytest.raises(SourceError, match="unsafe member name"):
        list(scan_tar(absolute))
    idx = tmp_path / "evil.idx"
    idx.write_text("v1.2 1\njpg 512 1 ../evil.jpg\n")
    with pytest.raises(SourceError, match="unsafe member name"):
        read_index(idx)
    assert not (tmp_path.parent / "evil.jpg").exists()


def test_links_are_refused_by_the_scan_and_the_reader(tmp_path: Path) -> None:
    link = tarfile.TarInfo("a.jpg")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    path = tmp_path / "link.tar"
    path.write_bytes(_tar_with([("ok.jpg", b"x"), link]))
    with pytest.raises(SourceError, match=r"'a\.jpg' at offset 1024 is a symlink"):
        list(scan_tar(path))
    from mediapipe.loaders.sources.shards import ShardBlob

    blob = ShardBlob("link.tar:a.jpg", path=str(path), offset=1536, size=0)  # an index pointing at the link
    with pytest.raises(SourceError, match="link"):
        blob.read()


def test_truncated_shard_is_named_with_its_offset(dataset: Path, tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(dataset, broken)
    tar = broken / "shard-000001.tar"
    members = read_index(broken / "shard-000001.idx")
    last = members[-1][0]  # cut the last sample's image in half
    tar.write_bytes(tar.read_bytes()[: last.offset + last.size // 2])
    problems = verify(broken)
    assert any(p["shard"] == "shard-000001.tar" and p["offset"] == last.offset and "truncated" in p["reason"]
               for p in problems), problems
    assert cli(["verify", str(broken)]) == 1
    with pytest.raises(SourceError, match=r"shard-000001\.tar.*truncated"):
        mp.loaders.shards(broken)
    # the reader itself names shard and offset when a member is cut short behind its back
    from mediapipe.loaders.sources.shards import ShardBlob

    blob = ShardBlob(f"shard-000001.tar:{last.name}", path=str(tar), offset=last.offset, size=last.size)
    with pytest.raises(SourceError, match=rf"shard-000001\.tar:{last.name}.*offset {last.offset}"):
        blob.read()


def test_verify_finds_a_flipped_byte_and_a_bad_image(dataset: Path, tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(dataset, broken)
    member = read_index(broken / "shard-000000.idx")[1][0]
    tar = broken / "shard-000000.tar"
    data = bytearray(tar.read_bytes())
    data[member.offset : member.offset + member.size] = b"\0" * member.size  # same size, garbage image
    tar.write_bytes(bytes(data))
    problems = verify(broken)
    reasons = {(p["shard"], p["offset"], p["reason"].split(":")[0]) for p in problems}
    assert ("shard-000000.tar", None, "sha256 differs from the manifest's") in reasons
    assert ("shard-000000.tar", member.offset, "cannot decode") in reasons
    assert verify(dataset) == []


def test_open_shard_files_are_bounded_and_reads_stay_correct(dataset: Path) -> None:
    from mediapipe.loaders.sources.shards import _OpenShards

    files = _OpenShards(limit=2)
    tars = sorted(str(p) for p in dataset.glob("shard-*.tar"))
    with files.open(tars[0]) as busy:
        for path in tars[1:] + tars[1:]:
            with files.open(path) as fd:
                assert os.pread(fd, 5, 257) == b"ustar"
        assert len(files._fds) <= 2 and tars[0] in files._fds  # the busy one was never closed
        assert os.pread(busy, 5, 257) == b"ustar"
    source = mp.loaders.shards(dataset)
    with ThreadPoolExecutor(4) as pool:  # threads share the descriptors
        got = list(pool.map(lambda i: source.ref(i).blob("image").read(), range(len(source))))
    assert got == [data for _, data, _ in _members(dataset)]


def test_shards_by_rank_follow_torch_distributed(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mediapipe.loaders.loader as loader

    monkeypatch.setattr(loader, "distributed_rank_and_size", lambda: (1, 2))
    mine = mp.loaders.shards(dataset, by_rank=True)
    assert mine.num_shards == 1 and {mine.shard_of(i) for i in range(len(mine))} == {1}
    assert mp.loaders.shards(dataset).num_shards == 3  # by_rank is asked for, never implied


def test_a_source_split_by_rank_is_not_split_again_by_the_loader(tmp_path):
    import mediapipe as mp
    from mediapipe import augment as A
    from mediapipe.dataset.convert import convert
    from tests.helpers import write_image_folder

    write_image_folder(tmp_path / "src", 12, classes=2, seed=1)
    convert(tmp_path / "src", tmp_path / "out", shard_size="3")
    whole = mp.loaders.shards(tmp_path / "out")
    seen = []
    for rank in range(2):
        part = whole.for_rank(rank, 2)
        assert part.split_by_rank
        pipe = mp.Pipeline(part, {"image": mp.decoders.image()}, [A.Resize((16, 16))], batch_size=4, device="cpu")
        loader = pipe.loader(rank=rank, world_size=2)  # ignored: the source is this rank's part
        seen.append(sum(len(b["index"]) for b in loader))
    assert seen == [6, 6]


def test_a_batch_prefetches_exactly_its_samples_byte_ranges(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each batch asks the kernel for its samples' tar header and bytes before decoding."""
    from mediapipe import augment as A

    advised: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_WILLNEED
        advised.append((os.fstat(fd).st_ino, offset, length))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    source = mp.loaders.shards(dataset)
    pipe = mp.Pipeline(source, decode={"image": mp.decoders.image()}, augment=[A.Resize((16, 16))],
                       batch_size=4, seed=0, device="cpu")
    batches = list(pipe.loader(num_workers=0, shuffle=True, last_batch="partial"))
    order = [int(i) for b in batches for i in b["index"]]
    expected = []
    for i in order:
        blob = source.ref(i).blob("image")
        expected.append((os.stat(blob.path).st_ino, blob.offset - BLOCK, blob.size + BLOCK))
    assert advised == expected
    assert sorted(order) == list(range(len(source)))
