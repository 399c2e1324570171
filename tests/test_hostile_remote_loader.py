"""Hostile review of remote shards and loader semantics: credentials in ``storage_options``'
``headers`` reach every request (they crashed every read with a TypeError), a server that
compresses answers although identity was asked is refused for ranges by that name, and its
whole answers are read decoded (they were refused as connections "closed after 1487 of 654
bytes"); a sampler fitted to one loader's rank is not silently moved to another loader's."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.bench.http_server import RangeServer
from mediapipe.dataset.convert import convert
from mediapipe.errors import PipelineError, SourceError
from mediapipe.loaders.samplers import EpochBatchSampler
from mediapipe.remote.retry import Retry
from tests.helpers import write_image_folder

FAST = Retry(attempts=2, backoff=0.01, timeout=5)


class HeaderServer(RangeServer):
    """`RangeServer` that records each request's Authorization header and, with ``gzip``, says
    Content-Encoding: gzip on every answer (a whole file then comes compressed)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.auth: list[str | None] = []
        self.gzip = False

    def _serve(self, h) -> None:
        self.auth.append(h.headers.get("Authorization"))
        if not self.gzip:
            return super()._serve(h)
        if h.headers.get("Range") is None:
            file = (self.root / h.path.split("?", 1)[0].lstrip("/")).resolve()
            body = gzip.compress(file.read_bytes())
            h.send_response(200)
            h.send_header("Content-Encoding", "gzip")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return None
        send_header = h.send_header

        def encoded(key: str, value: str) -> None:
            if key == "Accept-Ranges":
                send_header("Content-Encoding", "gzip")
            send_header(key, value)

        h.send_header = encoded
        return super()._serve(h)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    src = write_image_folder(tmp_path_factory.mktemp("src"), 7, scale=0.25)
    top = tmp_path_factory.mktemp("www")
    convert(src, top / "ds", shard_size=3, seed=5)
    server = HeaderServer(top)
    yield server, top
    server.close()


def reads(source) -> list[bytes]:
    return [source.ref(i).blobs["jpg"].read() for i in range(len(source))]


def test_storage_options_headers_go_with_every_request(served):
    server, top = served
    want = reads(mp.loaders.shards(top / "ds"))
    server.auth.clear()
    source = mp.loaders.shards(f"{server.url}/ds", retry=FAST,
                               storage_options={"headers": {"Authorization": "Bearer secret"}})
    assert reads(source) == want
    source.prefetch(range(len(source)))
    assert reads(source) == want
    assert server.auth and set(server.auth) == {"Bearer secret"}


def test_a_compressed_answer_is_read_decoded_whole_and_refused_by_name_for_a_range(served, tmp_path):
    server, top = served
    want = reads(mp.loaders.shards(top / "ds"))
    server.gzip = True
    try:
        cached = mp.loaders.shards(f"{server.url}/ds", retry=FAST, cache_dir=tmp_path / "cache")
        assert reads(cached) == want  # the manifest, indices and shards downloaded whole, decoded
        ranged = mp.loaders.shards(f"{server.url}/ds", retry=FAST)
        with pytest.raises(SourceError, match="Content-Encoding 'gzip' although identity was asked") as err:
            ranged.ref(0).blobs["jpg"].read()
        assert err.value.path.endswith(".tar")
    finally:
        server.gzip = False


def _pipeline(root: Path) -> mp.Pipeline:
    return mp.Pipeline(source=mp.loaders.folder(root), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(16)], batch_size=3, seed=0, device="cpu")


def test_a_sampler_fitted_to_one_loader_is_not_moved_to_another_loaders_rank(tmp_path):
    root = write_image_folder(tmp_path / "imgs", 10, scale=0.2)
    for first in ({"rank": 0, "world_size": 2}, {}):  # rank 0 of 2, or one process reading all
        sampler = EpochBatchSampler(10, 3, seed=0)
        a = _pipeline(root).loader(sampler=sampler, **first)
        expected = [b["index"].tolist() for b in a]
        with pytest.raises(PipelineError, match="a sampler of its own"):
            _pipeline(root).loader(sampler=sampler, rank=1, world_size=2)
        assert (sampler.rank, sampler.world_size) == (first.get("rank", 0), first.get("world_size", 1))
        a.set_epoch(0)
        assert [b["index"].tolist() for b in a] == expected  # the first loader still reads its own part
        again = _pipeline(root).loader(sampler=sampler, **first)  # the same ranks: shared, as before
        assert again.sampler is sampler


@pytest.mark.parametrize("backend", ["torch", "dali"])
def test_set_epoch_every_epoch_after_a_resume_goes_on_where_the_checkpoint_stopped(tmp_path, backend):
    """The DistributedSampler habit, ``for epoch in ...: loader.set_epoch(epoch)``, after a
    ``load_state_dict``: the resumed epoch goes on after the last delivered batch (it started
    again at its first batch, training on the delivered ones twice); a checkpoint taken at an
    epoch's last batch (the pass not ended) gives that epoch no batch, then the next one whole."""
    if backend == "dali":
        pytest.importorskip("nvidia.dali")
    root = write_image_folder(tmp_path / "imgs", 10, scale=0.2)

    def loader():
        return _pipeline(root).loader(backend=backend)

    ref = loader()
    whole = {e: [b["index"].tolist() for b in ref] for e in range(3)}  # 4 batches an epoch
    for stop in (1, 4):  # mid-epoch 1, and at its last batch
        run = loader()
        run.set_epoch(1)
        it = iter(run)
        for _ in range(stop):
            next(it)
        state = run.state_dict()
        del it, run
        resumed = loader()
        resumed.load_state_dict(state)
        got = {}
        for epoch in range(resumed.epoch, 3):
            resumed.set_epoch(epoch)
            got[epoch] = [b["index"].tolist() for b in resumed]
        assert got == {1: whole[1][stop:], 2: whole[2]}
    again = loader()  # without a load, set_epoch starts the epoch at its first batch
    next(iter(again))
    again.set_epoch(0)
    assert [b["index"].tolist() for b in again] == whole[0]
