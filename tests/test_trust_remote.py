"""A remote dataset is read as it was when it was opened, and a stalled store ends alike everywhere.

A shard changed on the server (grown, or a few bytes of a JPEG rewritten at the same size)
is refused with a SourceError naming the shard, what was expected and what the server
has now: by the total size every 206 answer states (checked against the manifest), and
by the ETag / Last-Modified the store gave when the dataset was opened, on ranged reads,
batch prefetches and shard-cache downloads, over HTTP and S3 (moto). A stalled S3 server
(moto in a subprocess, SIGSTOPped) ends in about the time a stalled HTTP server does,
as one `Retry` policy bounds every store.
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.bench.http_server import RangeServer
from mediapipe.dataset.convert import convert
from mediapipe.errors import SourceError
from mediapipe.remote.cache import ShardCache
from mediapipe.remote.retry import Retry
from tests.helpers import write_image_folder

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

FAST = Retry(attempts=2, backoff=0.01, timeout=5)


class ValidatingServer(RangeServer):
    """`RangeServer` that also sends an ETag (``etag``: nginx's "mtime-size" form) and/or a
    Last-Modified (``modified``) for each file, as real servers do."""

    def __init__(self, root: Path, etag: bool = True, modified: bool = True) -> None:
        super().__init__(root)
        self.etag, self.modified = etag, modified

    def _serve(self, h) -> None:
        file = (self.root / h.path.split("?", 1)[0].lstrip("/")).resolve()
        end_headers = h.end_headers

        def with_validators() -> None:
            if file.is_file():
                st = file.stat()
                if self.etag:
                    h.send_header("ETag", f'"{st.st_mtime_ns:x}-{st.st_size:x}"')
                if self.modified:
                    h.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
            end_headers()

        h.end_headers = with_validators
        super()._serve(h)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A converted dataset of 8 images in 2 shards."""
    src = write_image_folder(tmp_path_factory.mktemp("src"), 8, scale=0.25)
    out = tmp_path_factory.mktemp("conv") / "ds"
    convert(src, out, shard_size=4, seed=3)
    return out


@pytest.fixture
def dataset(converted, tmp_path):
    """A fresh copy of the dataset (each test changes its shards)."""
    shutil.copytree(converted, tmp_path / "www" / "ds")
    return tmp_path / "www" / "ds"


def pipeline(source) -> mp.Pipeline:
    return mp.Pipeline(source=source, decode={"image": mp.decoders.image()},
                       augment=[A.Resize(16), A.CenterCrop(16), A.Normalize()], batch_size=4, seed=1, device="cpu")


def epoch(source) -> list:
    return [b["image"].clone() for b in pipeline(source).loader()]


def first_shard(folder: Path) -> Path:
    return sorted(folder.glob("shard-*.tar"))[0]


def rewrite_quantisation(shard: Path, grow: int = 0, later_mtime: bool = True) -> None:
    """Change 4 bytes of the first JPEG's quantisation table (pixels change, the size does
    not), then append ``grow`` bytes of zeros (a tar still valid, only longer)."""
    data = bytearray(shard.read_bytes())
    dqt = data.index(b"\xff\xdb", 512)
    for i in range(dqt + 5, dqt + 9):  # past the marker, its length and the table's id byte
        data[i] = data[i] + 1 if data[i] < 255 else data[i] - 1
    st = shard.stat()
    shard.write_bytes(bytes(data) + bytes(grow))
    if later_mtime:  # a rewrite seconds later (Last-Modified counts whole seconds)
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def samples_of(source, shard_name: str) -> list[int]:
    return [i for i in range(len(source)) if source._remote[source.shard_of(i)].name == shard_name]


# -- HTTP ------------------------------------------------------------------------------------
def test_a_shard_grown_and_rewritten_between_epochs_is_refused_on_ranged_reads(dataset, converted):
    server = RangeServer(dataset.parent)  # no ETag or Last-Modified: the 206's total size tells it
    try:
        source = mp.loaders.shards(f"{server.url}/ds", retry=FAST)
        first = epoch(source)
        assert len(first) == 2
        shard = first_shard(dataset)
        size = shard.stat().st_size
        rewrite_quantisation(shard, grow=1 << 20)
        with pytest.raises(SourceError, match="changed on the server") as err:
            epoch(source)
        assert err.value.path == f"{server.url}/ds/{shard.name}"
        assert f"{size} bytes" in err.value.reason and f"{size + (1 << 20)} bytes" in err.value.reason
        assert "re-convert" in err.value.reason and "re-upload" in err.value.reason
        # the batch prefetch too: its bytes are never handed to a read
        index = samples_of(source, shard.name)[0]
        source.prefetch(samples_of(source, shard.name))
        with pytest.raises(SourceError, match="changed on the server"):
            source.ref(index).blobs["jpg"].read()
        # the other shard is as it was
        other = next(i for i in range(len(source)) if i not in samples_of(source, shard.name))
        local = mp.loaders.shards(converted)
        assert source.ref(other).blobs["jpg"].read() == local.ref(other).blobs["jpg"].read()
    finally:
        server.close()


@pytest.mark.parametrize("validator", ["ETag", "Last-Modified"])
def test_a_same_size_rewrite_is_refused_by_the_validator_the_server_gives(dataset, validator):
    server = ValidatingServer(dataset.parent, etag=validator == "ETag", modified=validator == "Last-Modified")
    try:
        source = mp.loaders.shards(f"{server.url}/ds", retry=FAST)
        shard = first_shard(dataset)
        index = samples_of(source, shard.name)[0]
        before = source.ref(index).blobs["jpg"].read()
        rewrite_quantisation(shard)  # the same size: only the validator shows it
        with pytest.raises(SourceError, match="changed on the server") as err:
            source.ref(index).blobs["jpg"].read()
        assert err.value.path.endswith(shard.name) and validator in err.value.reason
        with pytest.raises(SourceError, match="changed on the server"):
            source.prefetch([index])
            source.ref(index).blobs["jpg"].read()
        # a dataset opened now sees the new object: no validator to hold it to (the manifest's size matches)
        assert mp.loaders.shards(f"{server.url}/ds", retry=FAST).ref(index).blobs["jpg"].read() != before
    finally:
        server.close()


def test_a_shard_whose_size_on_the_server_differs_from_the_manifest_is_refused_at_open(dataset):
    shard = first_shard(dataset)
    size = shard.stat().st_size
    with open(shard, "ab") as f:
        f.write(bytes(1 << 20))
    server = RangeServer(dataset.parent)
    try:
        with pytest.raises(SourceError, match="the manifest says") as err:
            mp.loaders.shards(f"{server.url}/ds", retry=FAST)
        assert err.value.path == f"{server.url}/ds/{shard.name}"
        assert f"{size + (1 << 20)} bytes" in err.value.reason and str(size) in err.value.reason
        assert "re-convert" in err.value.reason
    finally:
        server.close()


def test_a_cached_shard_is_the_version_opened_and_a_changed_one_is_not_downloaded(dataset, tmp_path):
    server = ValidatingServer(dataset.parent)
    cache_dir = tmp_path / "cache"
    try:
        source = mp.loaders.shards(f"{server.url}/ds", cache_dir=cache_dir, retry=FAST)
        local = mp.loaders.shards(dataset)
        want = [local.ref(i).blobs["jpg"].read() for i in range(len(local))]
        assert [source.ref(i).blobs["jpg"].read() for i in range(len(source))] == want
        shard = first_shard(dataset)
        index = samples_of(source, shard.name)[0]
        rewrite_quantisation(shard)
        assert source.ref(index).blobs["jpg"].read() == want[index]  # the copy of the object opened
        ShardCache(cache_dir, 1).evict(keep=1 << 40)  # gone from the cache: downloaded again, and refused
        with pytest.raises(SourceError, match="changed on the server") as err:
            source.ref(index).blobs["jpg"].read()
        assert err.value.path.endswith(shard.name) and "ETag" in err.value.reason
        # opened again, the same cache: the server's object is not the manifest's; no old copy hides it
        again = mp.loaders.shards(f"{server.url}/ds", cache_dir=cache_dir, retry=FAST)
        with pytest.raises(SourceError, match="sha256") as err:
            again.ref(index).blobs["jpg"].read()
        assert "not the one the manifest describes" in err.value.reason and "re-convert" in err.value.reason
    finally:
        server.close()


# -- S3 --------------------------------------------------------------------------------------
S3_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "eu-west-1",
          "AWS_EC2_METADATA_DISABLED": "true"}


def s3_options(endpoint: str) -> dict:
    return {"endpoint_url": endpoint, "key": "test", "secret": "test", "client_kwargs": {"region_name": "eu-west-1"}}


@pytest.fixture(scope="module")
def moto_thread():
    """moto's S3 server on 127.0.0.1, in this process."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with pytest.MonkeyPatch.context() as env:
        for k, v in S3_ENV.items():
            env.setenv(k, v)
        try:
            yield s3_options(f"http://{host}:{port}")
        finally:
            server.stop()


def test_a_shard_changed_in_s3_is_refused(dataset, moto_thread):
    import s3fs

    options = moto_thread
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    bucket = f"trust-{os.getpid()}-{time.monotonic_ns()}"
    fs.mkdir(bucket)
    fs.put(str(dataset) + "/", f"{bucket}/ds/", recursive=True)
    url = f"s3://{bucket}/ds"
    source = mp.loaders.shards(url, storage_options=options, retry=FAST)
    local = mp.loaders.shards(dataset)
    shard = first_shard(dataset)
    index = samples_of(source, shard.name)[0]
    assert source.ref(index).blobs["jpg"].read() == local.ref(index).blobs["jpg"].read()
    rewrite_quantisation(shard)  # the same size: the ETag shows it
    fs.put_file(str(shard), f"{bucket}/ds/{shard.name}")
    with pytest.raises(SourceError, match="changed on the server") as err:
        source.ref(index).blobs["jpg"].read()
    assert err.value.path == f"{url}/{shard.name}" and "ETag" in err.value.reason
    size = shard.stat().st_size
    with open(shard, "ab") as f:
        f.write(bytes(1 << 20))
    fs.put_file(str(shard), f"{bucket}/ds/{shard.name}")
    with pytest.raises(SourceError, match="changed on the server") as err:
        source.ref(index).blobs["jpg"].read()
    assert f"{size + (1 << 20)} bytes" in err.value.reason
    with pytest.raises(SourceError, match="the manifest says"):
        mp.loaders.shards(url, storage_options=options, retry=FAST)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def moto_process():
    """moto's S3 server in a process of its own (so that it can be stopped), SIGCONTed and
    killed in teardown."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("moto's server did not start")
                time.sleep(0.1)
        with pytest.MonkeyPatch.context() as env:
            for k, v in S3_ENV.items():
                env.setenv(k, v)
            yield proc, s3_options(f"http://127.0.0.1:{port}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=30)


STALL = Retry(attempts=2, backoff=0.01, timeout=0.5, min_rate=4000)  # a stalled read ends after attempts x timeout
STALL_BOUND = 15  # seconds: attempts x timeout, backoff, and the slack of two shared cores


@pytest.mark.timeout(120)
def test_a_stalled_s3_server_ends_as_a_stalled_http_server_does(converted, moto_process, tmp_path):
    import s3fs

    proc, options = moto_process
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    fs.mkdir("bucket")
    fs.put(str(converted) + "/", "bucket/ds/", recursive=True)
    url = "s3://bucket/ds"
    source = mp.loaders.shards(url, storage_options=options, retry=STALL)
    cached = mp.loaders.shards(url, storage_options=options, retry=STALL, cache_dir=tmp_path / "cache")
    assert source.ref(0).blobs["jpg"].read()  # the first batch came
    shutil.copytree(converted, tmp_path / "www" / "ds")
    server = RangeServer(tmp_path / "www")
    try:
        http = mp.loaders.shards(f"{server.url}/ds", retry=STALL)
        assert http.ref(0).blobs["jpg"].read()
        server.fail(".tar", *["stall"] * STALL.attempts)
        t0 = time.monotonic()
        with pytest.raises(SourceError):
            http.ref(1).blobs["jpg"].read()
        http_seconds = time.monotonic() - t0
    finally:
        server.close()
    os.kill(proc.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(SourceError) as err:
        source.ref(1).blobs["jpg"].read()
    s3_seconds = time.monotonic() - t0
    assert err.value.path == f"{url}/{source._remote[source.shard_of(1)].name}"
    assert s3_seconds < STALL_BOUND and http_seconds < STALL_BOUND, (s3_seconds, http_seconds)
    t0 = time.monotonic()
    with pytest.raises(SourceError) as err:  # opening too: the manifest read
        mp.loaders.shards(url, storage_options=options, retry=STALL)
    assert err.value.path == f"{url}/manifest.json" and time.monotonic() - t0 < STALL_BOUND
    t0 = time.monotonic()
    with pytest.raises(SourceError, match="downloading") as err:  # a whole shard into the cache
        cached.ref(0).blobs["jpg"].read()
    assert err.value.path == f"{url}/{source._remote[source.shard_of(0)].name}" and time.monotonic() - t0 < STALL_BOUND
    os.kill(proc.pid, signal.SIGCONT)
    assert source.ref(1).blobs["jpg"].read()  # resumed: read again


def test_a_server_that_answers_a_range_with_the_whole_file_is_never_trusted_for_a_slice(dataset):
    server = RangeServer(dataset.parent)
    try:
        source = mp.loaders.shards(f"{server.url}/ds", retry=FAST)
        shard = first_shard(dataset)
        indices = samples_of(source, shard.name)
        server.fail(shard.name, *["ignore-range"] * (1 + FAST.attempts))  # the prefetch, then each try
        source.prefetch(indices)
        with pytest.raises(SourceError, match="ignored the Range request") as err:
            source.ref(indices[0]).blobs["jpg"].read()
        assert err.value.path.endswith(shard.name) and "cache_dir=" in err.value.reason
    finally:
        server.close()


# -- GCS and the timeout rule's settings -------------------------------------------------------
class FakeGCS:
    """What `RemoteStore` uses of gcsfs: ``url`` and ``_call`` answering a ranged GET with
    GCS's Content-Range and x-goog-generation headers."""

    def __init__(self, data: bytes) -> None:
        import fsspec.asyn

        self.data, self.generation, self.loop, self.calls = data, 1, fsspec.asyn.get_loop(), 0

    def url(self, path: str) -> str:
        return path

    async def _call(self, method: str, url: str, headers: dict) -> tuple[dict, bytes]:
        self.calls += 1
        start, end = (int(x) for x in headers["Range"][len("bytes="):].split("-"))
        end = min(end, len(self.data) - 1)
        answer = {"Content-Range": f"bytes {start}-{end}/{len(self.data)}", "x-goog-generation": str(self.generation)}
        return answer, self.data[start:end + 1]


def test_gcs_answers_are_held_to_the_generation_seen_at_open(monkeypatch, tmp_path):
    from mediapipe.remote import buckets
    from mediapipe.remote.stores import RemoteStore

    data = bytes(range(256)) * 40
    store = RemoteStore("gs://bucket/ds", retry=FAST)
    fake = FakeGCS(data)
    store._fs, store._pid = fake, os.getpid()
    seen = store.version("shard.tar")
    assert seen.size == len(data) and seen.validators == (("generation", "1"),)
    assert store.read("shard.tar", 100, 300, seen) == data[100:400]
    monkeypatch.setattr(buckets, "PIECE", 4096)  # a whole file in three ranged reads
    assert store.read_small("index", len(data), "index") == data
    store.download("shard.tar", tmp_path / "copy", len(data), None, seen)
    assert (tmp_path / "copy").read_bytes() == data and fake.calls == 1 + 1 + 3 + 3
    with pytest.raises(SourceError, match="more than the"):
        store.read_small("index", len(data) - 1, "index")
    fake.generation = 2  # rewritten: the same size, another generation
    with pytest.raises(SourceError, match="changed on the server") as err:
        store.read("shard.tar", 100, 300, seen)
    assert err.value.path == "gs://bucket/ds/shard.tar" and "generation 1" in err.value.reason
    with pytest.raises(SourceError, match="changed on the server"):
        store.download("shard.tar", tmp_path / "copy", len(data), None, seen)


def test_every_store_takes_its_timeouts_from_the_retry_policy():
    pytest.importorskip("s3fs")
    from mediapipe.remote.stores import RemoteStore

    retry = Retry(attempts=3, timeout=7.0)
    s3 = RemoteStore("s3://bucket/ds", {"key": "k", "secret": "s"}, retry)
    config = s3._fs_options()["config_kwargs"]
    assert config["connect_timeout"] == config["read_timeout"] == 7.0
    assert config["retries"] == {"total_max_attempts": 1}  # retried here, `attempts` times
    assert s3.fs.retries == 1 and s3.fs._prepare_config_kwargs()["read_timeout"] == 7.0
    mine = RemoteStore("s3://bucket/ds", {"config_kwargs": {"read_timeout": 99}}, retry)._fs_options()
    assert mine["config_kwargs"]["read_timeout"] == 99 and mine["config_kwargs"]["connect_timeout"] == 7.0
    gcs = RemoteStore("gs://bucket/ds", retry=retry)._fs_options()["requests_timeout"]
    http = RemoteStore("https://host/ds", retry=retry)._fs_options()["client_kwargs"]["timeout"]
    for timeout in (gcs, http):
        assert timeout.sock_connect == timeout.sock_read == 7.0 and timeout.total is None
    assert retry.deadline(0) == 14.0 and retry.deadline(int(retry.min_rate) * 10) == 24.0
