"""Converted datasets over HTTP (a Range-honouring server on 127.0.0.1 started here) and S3
(moto's server on 127.0.0.1): the same samples and batches as on disk, ranged reads, the
shard cache, retries, and hostile servers and manifests refused with the URL named."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.bench.http_server import RangeServer
from mediapipe.dataset.convert import convert
from mediapipe.dataset.index import index_limit
from mediapipe.dataset.layout import MANIFEST
from mediapipe.errors import SourceError
from mediapipe.remote import cache as cache_module
from mediapipe.remote.cache import ShardCache
from mediapipe.remote.retry import Retry
from mediapipe.remote.urls import is_remote, remote_name
from tests.helpers import cli_argv, write_image_folder

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

FAST = Retry(attempts=3, backoff=0.01, timeout=10)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A converted dataset of 9 images in 3 shards, in a folder the server serves."""
    src = write_image_folder(tmp_path_factory.mktemp("src"), 9, scale=0.25)
    top = tmp_path_factory.mktemp("www")
    convert(src, top / "ds", shard_size=4, seed=5)
    server = RangeServer(top)
    yield server, top
    server.close()


def remote(server, name="ds", **kwargs):
    kwargs.setdefault("retry", FAST)
    return mp.loaders.shards(f"{server.url}/{name}", **kwargs)


def pipeline(source) -> mp.Pipeline:
    return mp.Pipeline(source=source, decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(24), A.HorizontalFlip(), A.Normalize()],
                       batch_size=4, seed=1, device="cpu")


def batches(source, **kwargs) -> list[dict]:
    return [{k: v.clone() for k, v in b.items()} for b in pipeline(source).loader(**kwargs)]


def assert_same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_names_and_urls():
    assert is_remote("https://h/x") and is_remote("s3://b/k") and is_remote("gs://b/k")
    assert not is_remote("/data/x") and not is_remote("file:///x") and not is_remote(Path("s3://x"))
    assert remote_name("shard-000001.tar", where="u", field="f") == "shard-000001.tar"
    for hostile in ("http://evil.example/x.tar", "//evil/x", "../other/shard.tar", "a/../../b", "/etc/passwd",
                    "x.tar?sig=1", "x%2e%2e/y", "a\\b", ""):
        with pytest.raises(SourceError, match="f:"):
            remote_name(hostile, where="u", field="f")


def test_http_dataset_gives_the_same_samples_and_batches_as_on_disk(served):
    server, top = served
    local = mp.loaders.shards(top / "ds")
    source = remote(server)
    assert len(source) == len(local) == 9 and source.classes == local.classes
    for i in range(len(local)):
        assert source.ref(i).key == local.ref(i).key and source.meta(i) == local.meta(i)
        assert source.ref(i).blobs["jpg"].read() == local.ref(i).blobs["jpg"].read()
    assert_same(batches(local), batches(source))
    assert_same(batches(local), batches(source, num_workers=2))  # worker processes open their own sessions
    rebuilt = mp.Pipeline.from_config(pipeline(source).to_config())
    assert rebuilt.source.root == source.root and len(rebuilt.source) == 9


def test_samples_are_ranged_reads_and_a_batch_goes_out_together(served):
    server, _ = served
    source = remote(server)
    server.requests.clear()
    data = source.ref(3).blobs["jpg"].read()
    (path, rng), = server.requests
    record = source._rows[3]
    offset = record[1][0][2]
    assert path.endswith(".tar") and rng == f"bytes={offset - 512}-{offset + len(data) - 1}"
    server.requests.clear()
    source.prefetch([0, 1, 2, 3])
    fetched = len(server.requests)
    for i in range(4):
        source.ref(i).blobs["jpg"].read()
    assert len(server.requests) == fetched <= 4  # the reads took the prefetched bytes
    assert all(r is not None for _, r in server.requests)


def test_transient_failures_are_retried(served):
    server, top = served
    source = remote(server)
    want = mp.loaders.shards(top / "ds").ref(2).blobs["jpg"].read()
    name = source._remote[source.shard_of(2)].name
    server.fail(name, "500", "drop")  # an error, then the connection dropped mid-body
    server.requests.clear()
    assert source.ref(2).blobs["jpg"].read() == want
    assert len(server.requests) == 3
    server.fail(name, "503", "drop", "drop")
    with pytest.raises(SourceError, match="failed 3 times") as err:
        source.ref(2).blobs["jpg"].read()
    assert name in err.value.path and err.value.path.startswith(server.url)


def test_404_and_403_name_the_url_without_retrying(served):
    server, _ = served
    server.requests.clear()
    with pytest.raises(SourceError, match=r"not found \(404\)") as err:
        remote(server, "nothing-here")
    assert err.value.path == f"{server.url}/nothing-here/manifest.json" and len(server.requests) == 1
    source = remote(server)
    name = source._remote[source.shard_of(0)].name
    server.fail(name, "403")
    server.requests.clear()
    with pytest.raises(SourceError, match=r"access denied \(403\)") as err:
        source.ref(0).blobs["jpg"].read()
    assert err.value.path == f"{server.url}/ds/{name}" and len(server.requests) == 1
    for faults, message in ((("500", "404"), r"not found \(404\)"), (("503", "403"), r"access denied \(403\)")):
        server.fail(name, *faults)  # a transient error, then one retrying cannot fix: reported, not retried
        with pytest.raises(SourceError, match=message):
            source.ref(0).blobs["jpg"].read()


def test_a_server_that_lies_or_ignores_range_is_refused(served):
    server, top = served
    source = remote(server)
    name = source._remote[source.shard_of(1)].name
    for fault, message in (("ignore-range", "ignored the Range request"), ("lie-length", "announced"),
                           ("huge-length", "announced 1000000000000000 bytes"), ("short-length", "announced"),
                           ("wrong-range", "with Content-Range 'bytes")):
        server.fail(name, *[fault] * FAST.attempts)  # (each try meets it: a dropped keep-alive is retried)
        with pytest.raises(SourceError, match=message):
            source.ref(1).blobs["jpg"].read()
        server.faults.clear()
    server.fail("ds/manifest.json", "huge-length")  # a whole-file read: refused before a byte is kept
    with pytest.raises(SourceError, match="more than the"):
        remote(server)
    # with the cache, whole shards come by plain GETs: a server that ignores Range still works
    server.fail(name, "ignore-range")
    cached = remote(server, cache_dir=top.parent / "cache-ignore", verify="sha256")
    assert cached.ref(1).blobs["jpg"].read() == mp.loaders.shards(top / "ds").ref(1).blobs["jpg"].read()


def test_hostile_manifests_are_refused_before_anything_else_is_read(served, tmp_path):
    server, top = served
    manifest = json.loads((top / "ds" / MANIFEST).read_text())
    for i, (field, value) in enumerate((("name", "http://evil.example/shard.tar"), ("name", "../other/shard.tar"),
                                        ("idx", "/etc/passwd"))):
        bad = top / f"bad{i}"
        shutil.copytree(top / "ds", bad)
        entry = dict(manifest["shards"][0], **{field: value})
        (bad / MANIFEST).write_text(json.dumps({**manifest, "shards": [entry, *manifest["shards"][1:]]}))
        server.requests.clear()
        with pytest.raises(SourceError, match=f"shards\\[0\\].{field}"):
            remote(server, f"bad{i}")
        assert [p for p, _ in server.requests] == [f"/bad{i}/manifest.json"]
    bad = top / "bad-index"
    shutil.copytree(top / "ds", bad)
    (bad / manifest["shards"][0]["idx"]).write_bytes(b"v1.2 1\n" + b"x" * (index_limit(0) + (1 << 20)))
    with pytest.raises(SourceError, match="index has .* bytes, more than"):
        remote(server, "bad-index")


def test_the_shard_cache_is_bounded_and_evicts_the_least_recently_used(served, tmp_path):
    server, top = served
    sizes = sorted(e["bytes"] for e in json.loads((top / "ds" / MANIFEST).read_text())["shards"])
    cache_dir = tmp_path / "cache"
    source = remote(server, cache_dir=cache_dir, cache_bytes=sizes[-1] + sizes[-2])  # two shards fit
    local = mp.loaders.shards(top / "ds")
    server.requests.clear()
    for i in range(len(source)):
        assert source.ref(i).blobs["jpg"].read() == local.ref(i).blobs["jpg"].read()
    whole = [p for p, r in server.requests if p.endswith(".tar")]
    assert len(whole) == 3 and all(r is None for p, r in server.requests if p.endswith(".tar"))
    cached = list(cache_dir.glob("*.tar"))
    assert len(cached) == 2 and sum(p.stat().st_size for p in cached) <= sizes[-1] + sizes[-2]
    assert_same(batches(local), batches(source))
    # LRU: touch one shard, add another: the one not used is evicted
    cache = ShardCache(tmp_path / "lru", 2 * sizes[-1])
    store = source.store
    entries = {e["name"]: e for e in source.manifest["shards"]}
    a, b, c = sorted(entries)
    for name in (a, b, a, c):
        cache.get(store, name, entries[name]["bytes"], entries[name]["sha256"])
    kept = {p.name for p in (tmp_path / "lru").glob("*.tar")}
    assert kept == {cache.file_for(store.child(n), entries[n]["bytes"], entries[n]["sha256"]).name for n in (a, c)}


def test_a_corrupt_shard_never_enters_the_cache(served, tmp_path):
    server, top = served
    bad = top / "corrupt"
    shutil.copytree(top / "ds", bad)
    tar = sorted(bad.glob("*.tar"))[0]
    raw = bytearray(tar.read_bytes())
    raw[700] ^= 0xFF
    tar.write_bytes(bytes(raw))
    source = remote(server, "corrupt", cache_dir=tmp_path / "c")
    index = next(i for i in range(len(source)) if source._remote[source.shard_of(i)].name == tar.name)
    with pytest.raises(SourceError, match="sha256"):
        source.ref(index).blobs["jpg"].read()
    assert not list((tmp_path / "c").glob("*.tar"))


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on 127.0.0.1 and the storage options that reach it (as environment
    variables too, for the command line)."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "eu-west-1", "AWS_EC2_METADATA_DISABLED": "true"}
    with pytest.MonkeyPatch.context() as mp_env:
        for k, v in env.items():
            mp_env.setenv(k, v)
        import s3fs

        options = {"endpoint_url": endpoint, "key": "test", "secret": "test",
                   "client_kwargs": {"region_name": "eu-west-1"}}
        s3fs.S3FileSystem(**options).mkdir("bucket")
        try:
            yield options, env
        finally:
            server.stop()


def test_s3_through_the_same_code_path(served, s3):
    options, _ = s3
    import s3fs

    _, top = served
    s3fs.S3FileSystem(**options).put(str(top / "ds") + "/", "bucket/ds/", recursive=True)
    source = mp.loaders.shards("s3://bucket/ds", storage_options=options, retry=FAST)
    local = mp.loaders.shards(top / "ds")
    assert_same(batches(local), batches(source))
    with pytest.raises(SourceError, match=r"not found \(404\)"):
        mp.loaders.shards("s3://bucket/missing", storage_options=options, retry=FAST)


def test_convert_into_s3_killed_then_resumed_equals_a_local_conversion(s3, tmp_path):
    import s3fs

    options, env = s3
    src = write_image_folder(tmp_path / "src", 9, scale=0.25)
    convert(src, tmp_path / "local", shard_size=3, seed=2)
    url = "s3://bucket/converted"
    killed = subprocess.run(cli_argv("convert", str(src), url, "--shard-size", "3", "--seed", "2", "--no-progress",
                                     kill_at="commit:2"), env={**os.environ, **env}, capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -9, killed.stderr
    fs = s3fs.S3FileSystem(**options)
    manifest = json.loads(fs.cat_file("bucket/converted/manifest.json"))
    assert not manifest["complete"] and [e["shard"] for e in manifest["shards"]] == [0]  # shard 1: not uploaded
    with pytest.raises(FileExistsError, match="resume"):
        convert(src, url, shard_size=3, seed=2, storage_options=options)
    result = convert(src, url, shard_size=3, seed=2, resume=True, storage_options=options)
    assert result.resumed_shards == 1 and result.num_samples == 9 and result.out == url
    for path in sorted((tmp_path / "local").iterdir()):
        assert fs.cat_file(f"bucket/converted/{path.name}") == path.read_bytes(), path.name
    assert not fs.exists("bucket/converted/.parts")
    source = mp.loaders.shards(url, storage_options=options, retry=FAST)
    assert_same(batches(mp.loaders.shards(tmp_path / "local")), batches(source))


def test_a_dataset_url_with_a_query_is_refused_before_any_request():
    for url in ("http://127.0.0.1:9/ds?X-Amz-Signature=1", "s3://bucket/ds#x"):  # (refused: no request)
        with pytest.raises(ValueError, match="query or fragment"):
            mp.loaders.shards(url)


def test_redirects_are_followed_on_the_same_host_only(served):
    server, top = served
    other = RangeServer(top)
    try:
        source = remote(server)
        name = source._remote[source.shard_of(1)].name
        want = mp.loaders.shards(top / "ds").ref(1).blobs["jpg"].read()
        server.fail(name, f"redirect={other.url}")
        with pytest.raises(SourceError, match="redirected to another host") as err:
            source.ref(1).blobs["jpg"].read()
        assert other.url in str(err.value) and err.value.path == f"{server.url}/ds/{name}"
        server.fail("ds/manifest.json", f"redirect={other.url}")
        with pytest.raises(SourceError, match="redirected to another host"):
            remote(server)
        assert other.requests == []  # never asked
        mirror = top / "mirror"
        if not mirror.exists():
            mirror.symlink_to(top, target_is_directory=True)
        server.fail(name, f"redirect={server.url}/mirror")
        server.requests.clear()
        assert source.ref(1).blobs["jpg"].read() == want
        assert [p for p, _ in server.requests] == [f"/ds/{name}", f"/mirror/ds/{name}"]
    finally:
        other.close()


@pytest.mark.timeout(120)
def test_a_stalled_or_dripping_server_is_abandoned_and_tried_again(served):
    server, top = served
    slow = Retry(attempts=2, backoff=0.01, timeout=0.5, min_rate=4000)  # the drip (a byte each 0.05 s) never goes silent
    source = remote(server, retry=slow)
    name = source._remote[source.shard_of(1)].name
    want = mp.loaders.shards(top / "ds").ref(1).blobs["jpg"].read()
    server.drip_seconds = 0.05  # 20 bytes a second: never silent for a second, yet never done
    try:
        for fault in ("stall", "drip"):
            server.fail(name, fault)
            t0 = time.monotonic()
            assert source.ref(1).blobs["jpg"].read() == want
            assert time.monotonic() - t0 < 30, fault
        server.fail("ds/manifest.json", "drip")  # a whole-file read of unknown length too
        t0 = time.monotonic()
        assert len(remote(server, retry=slow)) == 9 and time.monotonic() - t0 < 30
        server.fail(name, "drip", "drip")
        with pytest.raises(SourceError, match="too slow"):
            source.ref(1).blobs["jpg"].read()
    finally:
        server.drip_seconds = 0.2


def test_a_download_cut_short_is_tried_again(served, tmp_path):
    server, top = served
    source = remote(server, cache_dir=tmp_path / "c")
    name = source._remote[source.shard_of(4)].name
    server.fail(name, "no-length")  # no Content-Length: the cut shows only against the manifest's size
    assert source.ref(4).blobs["jpg"].read() == mp.loaders.shards(top / "ds").ref(4).blobs["jpg"].read()
    assert [r for p, r in server.requests if p.endswith(name)][-2:] == [None, None]


def _cached_path(source, index: int) -> Path:
    shard = source._remote[source.shard_of(index)]
    return shard.cache.file_for(shard.url, shard.size, shard.sha256, shard.version)


def test_a_cache_shared_with_another_process_never_loses_a_download_or_a_read(served, tmp_path, monkeypatch):
    server, top = served
    local = mp.loaders.shards(top / "ds")
    folder = tmp_path / "shared"
    source = remote(server, cache_dir=folder)
    elsewhere = ShardCache(folder, 1)  # another process's cache on the same folder, with a tiny bound
    download = source.store.download

    def evicted_while_downloading(*args):
        download(*args)
        elsewhere.evict(keep=1 << 40)  # the other process evicts all it can, mid-download

    monkeypatch.setattr(source.store, "download", evicted_while_downloading)
    assert source.ref(0).blobs["jpg"].read() == local.ref(0).blobs["jpg"].read()
    monkeypatch.undo()
    touch = cache_module._touch

    def evicted_once_opened(fd):
        touch(fd)
        elsewhere.evict(keep=1 << 40)  # the other process evicts the shard just opened for a read

    monkeypatch.setattr(cache_module, "_touch", evicted_once_opened)
    for i in range(len(source)):
        assert source.ref(i).blobs["jpg"].read() == local.ref(i).blobs["jpg"].read()
    assert not list(folder.glob("*.tar"))  # (all evicted, as the other process asked)


def test_a_partial_download_of_a_killed_process_is_removed_by_eviction(served, tmp_path):
    server, _ = served
    source = remote(server, cache_dir=tmp_path / "c")
    source.ref(0).blobs["jpg"].read()
    stale = _cached_path(source, 0).with_name("0" * 32 + ".partial")
    stale.write_bytes(b"x" * 1000)  # nobody holds its lock: its download died
    ShardCache(tmp_path / "c", 1 << 30).evict()
    assert not stale.exists() and _cached_path(source, 0).exists()


def test_two_processes_and_two_datasets_share_one_small_cache(served, tmp_path):
    server, top = served
    if not (top / "ds-copy").exists():
        shutil.copytree(top / "ds", top / "ds-copy")
    sizes = [e["bytes"] for e in json.loads((top / "ds" / MANIFEST).read_text())["shards"]]
    folder = tmp_path / "shared"
    code = (  # a process reading both datasets twice over, through a cache that holds one shard
        "import sys, mediapipe as mp\n"
        "from mediapipe.remote.retry import Retry\n"
        "url, folder, size, root = sys.argv[1:5]\n"
        "r = Retry(attempts=3, backoff=0.01, timeout=10)\n"
        "srcs = [mp.loaders.shards(f'{url}/{n}', cache_dir=folder, cache_bytes=int(size), retry=r) for n in ('ds', 'ds-copy')]\n"
        "local = mp.loaders.shards(root)\n"
        "for _ in range(2):\n"
        "    for i in range(len(local)):\n"
        "        for s in srcs:\n"
        "            assert s.ref(i).blobs['jpg'].read() == local.ref(i).blobs['jpg'].read(), i\n"
        "print('ok')\n")
    args = [sys.executable, "-c", code, server.url, str(folder), str(max(sizes)), str(top / "ds")]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    left = {p.name: p.stat().st_size for p in folder.iterdir() if p.suffix != ".lock"}
    assert sum(left.values()) <= max(sizes) and not any(n.endswith(".partial") for n in left), (left, sizes)


def test_a_damaged_cached_shard_is_dropped_and_read_again(served, tmp_path):
    server, top = served
    local = mp.loaders.shards(top / "ds")
    source = remote(server, cache_dir=tmp_path / "a", verify="sha256")
    index = 5
    record = source._rows[index]
    offset = record[1][0][2]  # the jpg's data in its shard
    shard = source._remote[source.shard_of(index)]
    good = (top / "ds" / shard.name).read_bytes()
    path = _cached_path(source, index)
    path.parent.mkdir(parents=True, exist_ok=True)
    damaged = bytearray(good)
    damaged[offset + 100] ^= 0xFF  # in the image's bytes, same size: only the sha256 shows it
    path.write_bytes(bytes(damaged))  # left so by an earlier run (or a disk)
    assert source.ref(index).blobs["jpg"].read() == local.ref(index).blobs["jpg"].read()
    assert path.read_bytes() == good  # downloaded again
    # without verify, a damaged tar header is seen at the read: the copy is dropped, the store read
    plain = remote(server, cache_dir=tmp_path / "b")
    path = _cached_path(plain, index)
    path.parent.mkdir(parents=True, exist_ok=True)
    damaged = bytearray(good)
    damaged[offset - 512 + 3] ^= 0x20  # the member's name in its header
    path.write_bytes(bytes(damaged))
    assert plain.ref(index).blobs["jpg"].read() == local.ref(index).blobs["jpg"].read()
    assert not path.exists() or path.read_bytes() == good
    path.write_bytes(good[:-512])  # a truncated copy: another size, downloaded again
    assert plain.ref(index).blobs["jpg"].read() == local.ref(index).blobs["jpg"].read()
    assert path.read_bytes() == good
