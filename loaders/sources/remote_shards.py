"""A converted dataset in object storage: ``mp.loaders.shards("https://...")``, ``"s3://..."``, ``"gs://..."``.

Opening reads the manifest, the sample records and the shards' indices (each bounded
before it is downloaded, each checked as a local dataset's is, every name it gives
confined to the dataset's folder at the same URL prefix: another host or ``..`` is
refused), and asks each shard's first byte: the shard's size on the server must be the
manifest's, and the ETag / Last-Modified (S3: ETag; GCS: generation) it gives are kept. A
sample's media is then one ranged read of its shard (its tar header in front, checked),
and a batch's reads go out together (`prefetch`, with neighbouring ranges of a shard
merged); every answer must come from the object seen at open (the total size a 206
states, the validators), or the read fails naming the shard: a dataset rewritten while it
is read is refused, as on disk. With ``cache_dir`` the whole shard is downloaded
once into a bounded local cache (least recently used shards evicted; a shard enters it
only when its size and sha256 match the manifest and it is the object seen at open, under
a name that includes its validators) and read from there with ``os.pread``;
a cached copy found damaged (a tar header that disagrees with the index, or with
``verify="sha256"`` another digest) is dropped and read from the store again.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mediapipe.dataset.index import index_limit, parse_index
from mediapipe.dataset.layout import BLOCK, MANIFEST, MAX_MANIFEST_BYTES, SAMPLES
from mediapipe.dataset.manifest import parse_manifest
from mediapipe.dataset.sample_records import parse_samples, samples_limit
from mediapipe.dataset.tar import Member, check_header
from mediapipe.errors import SourceError
from mediapipe.loaders.sources.shards import VERIFY, ShardBlob, ShardFile, ShardSource
from mediapipe.remote.cache import ShardCache
from mediapipe.remote.retry import Retry
from mediapipe.remote.stores import RemoteStore
from mediapipe.remote.urls import remote_name
from mediapipe.remote.versions import REWRITTEN_HINT, ObjectVersion

DEFAULT_CACHE_BYTES = 8 << 30
MERGE_GAP = 64 << 10  # ranges of one shard closer than this are fetched as one
PREFETCH_BYTES = 256 << 20  # at most this much of a batch's bytes is held ahead of its reads


@dataclass(frozen=True)
class RemoteShard:
    """One shard of a remote dataset: where it is, what the manifest says it is, the object
    the store had when the dataset was opened, and the cache."""

    store: RemoteStore
    name: str
    size: int
    sha256: str | None
    cache: ShardCache | None = None
    verify: bool = False  # check a cached copy's sha256 once per process, not only as it is downloaded
    validators: tuple[tuple[str, str], ...] = ()  # what the store gave at open (ETag, Last-Modified...)

    @property
    def version(self) -> ObjectVersion:
        """What every answer about this shard must match: the manifest's size, the validators seen at open."""
        return ObjectVersion(self.size, self.validators)

    @property
    def url(self) -> str:
        return self.store.child(self.name)

    @property
    def cached(self) -> bool:
        return self.cache is not None and self.cache.fits(self.size)

    def open_local(self) -> int:
        """A descriptor on the shard's cached copy (downloaded now if absent); the caller closes it."""
        assert self.cache is not None
        return self.cache.open(self.store, self.name, self.size, self.sha256, verify=self.verify,
                               version=self.version)

    def read_local(self, start: int, length: int, member: Member, where: str) -> bytes | None:
        """``length`` bytes at ``start`` of the cached copy, its tar header checked; None when
        the copy is damaged there (it is then dropped from the cache)."""
        assert self.cache is not None
        fd = self.open_local()
        try:
            try:
                raw = os.pread(fd, length, start)
                if len(raw) == length:
                    check_header(raw[:BLOCK], member, where=where)
                    return raw
            except (SourceError, OSError):
                pass
            self.cache.discard(self.cache.file_for(self.url, self.size, self.sha256, self.version), fd)
            return None
        finally:
            os.close(fd)


class _Prefetched:
    """Bytes a batch's `prefetch` fetched, taken (once) by its samples' reads; per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[tuple[str, int, int], bytes] = {}
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._data = {}

    def put(self, items: dict[tuple[str, int, int], bytes]) -> None:
        with self._lock:
            if sum(map(len, self._data.values())) > PREFETCH_BYTES:
                self._data.clear()  # reads that never came (a batch abandoned): start over
            self._data.update(items)

    def take(self, key: tuple[str, int, int]) -> bytes | None:
        with self._lock:
            return self._data.pop(key, None)


_PREFETCHED = _Prefetched()


@dataclass(frozen=True)
class RemoteShardBlob(ShardBlob):
    """A tar member of a remote shard: from the batch's prefetch, the local cache, or one ranged read."""

    remote: RemoteShard | None = None

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        remote = self.remote
        assert remote is not None
        member = Member(self.name.rsplit(":", 1)[-1], self.offset, self.size or 0)
        start, length = self.offset - BLOCK, BLOCK + member.size
        raw = _PREFETCHED.take((remote.url, start, length))
        if raw is None and remote.cached:
            raw = remote.read_local(start, length, member, self.name)
        if raw is None:
            raw = remote.store.read(remote.name, start, length, remote.version)
        check_header(raw[:BLOCK], member, where=self.name)
        return raw[BLOCK:]


class RemoteShardSource(ShardSource):
    """`ShardSource` of a dataset at a URL (see the module's docstring).

    ``cache_dir``/``cache_bytes``: a local cache of whole shards (default: none, ranged reads);
    ``storage_options``: passed to fsspec (credentials, endpoint_url for S3-compatible stores);
    ``retry``: attempts, backoff and time bounds of each request. ``verify="sha256"`` needs
    the cache (a shard is checked whole as it is downloaded; a cached one is always checked)."""

    def __init__(self, root: str, shard_ids: list[int] | None = None, verify: str | None = None, *,
                 cache_dir: str | os.PathLike | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 storage_options: dict[str, Any] | None = None, retry: Retry | None = None) -> None:
        if verify not in VERIFY:
            raise ValueError(f"verify={verify!r}: expected one of {VERIFY}")
        if verify == "sha256" and cache_dir is None:
            raise ValueError("verify='sha256' on a remote dataset needs cache_dir= (shards are checked whole "
                             "as they are downloaded into the cache)")
        root = str(root)
        if root.endswith("/" + MANIFEST):
            root = root[: -len(MANIFEST) - 1]
        self.store = RemoteStore(root, storage_options, retry or Retry())
        self.root = self.store.url  # type: ignore[assignment]
        self.shard_ids = sorted(shard_ids) if shard_ids is not None else None
        self.verify = verify
        self.cache_dir, self.cache_bytes, self.storage_options = cache_dir, cache_bytes, storage_options
        self.retry = retry
        cache = ShardCache(cache_dir, cache_bytes) if cache_dir is not None else None
        where = self.store.child(MANIFEST)
        self.manifest = parse_manifest(self.store.read_small(MANIFEST, MAX_MANIFEST_BYTES, "manifest"),
                                          where)
        if not self.manifest["complete"]:
            raise SourceError(self.root, "the conversion did not finish (manifest not complete); "
                              "rerun `mediapipe convert --resume`")
        entries = {e["shard"]: e for e in self.manifest["shards"] if e["samples"]}
        wanted = set(entries) if self.shard_ids is None else set(self.shard_ids)
        unknown = wanted - {e["shard"] for e in self.manifest["shards"]}
        if unknown:
            raise SourceError(self.root, f"no shards {sorted(unknown)} in this dataset")
        names, owners = {}, {}
        for i, e in enumerate(self.manifest["shards"]):
            if not e["samples"]:
                continue
            for field in ("name", "idx"):
                label = f"shards[{i}].{field}"
                name = remote_name(e[field], where=where, field=label)
                if name in owners:
                    raise SourceError(where, f"{label}: {name!r} is the same file as {owners[name]}")
                owners[name] = label
            names[e["shard"]] = e["name"]
        indices: dict[int, list[list[Member]]] = {}
        self._remote: dict[int, RemoteShard] = {}
        opened = sorted(wanted & set(entries))
        for sid in opened:
            entry = entries[sid]
            data = self.store.read_small(entry["idx"], index_limit(entry["bytes"]), "index")
            indices[sid] = parse_index(data, self.store.child(entry["idx"]), shard_size=entry["bytes"],
                                          samples=entry["samples"])
        seen = self.store.versions([entries[sid]["name"] for sid in opened])
        for sid, version in zip(opened, seen):
            entry = entries[sid]
            _check_shard_size(self.store.child(entry["name"]), version, entry["bytes"])
            self._remote[sid] = RemoteShard(self.store, entry["name"], entry["bytes"], entry["sha256"], cache,
                                            verify == "sha256", version.validators)
        self._shards = {sid: ShardFile(r.url, r.size, 0) for sid, r in self._remote.items()}
        num = self.manifest["num_samples"]
        packed = self.store.read_small(SAMPLES, samples_limit(num), "sample records")
        records = parse_samples(io.BytesIO(packed), self.store.child(SAMPLES), num)
        self._set_rows(records, indices, set(entries), names, where=self.store.child(SAMPLES))

    def ref(self, index: int) -> Any:
        from mediapipe.sample import SampleRef

        record, media, meta = self._rows[index]
        remote = self._remote[record["shard"]]
        blobs = {ext: RemoteShardBlob(name, remote.url, offset, size, remote=remote)
                 for ext, name, offset, size in media}
        return SampleRef(index, record["key"], blobs, record.get("label"), dict(meta),
                         self._fields(index, lambda name, offset, size: RemoteShardBlob(name, remote.url, offset, size,
                                                                                        remote=remote)))

    def prefetch(self, indices: Iterable[int]) -> None:
        """Fetch these samples' byte ranges now, together (neighbours in a shard merged), for
        the reads that follow; with a cache, download their shards instead."""
        wanted: dict[RemoteShard, list[tuple[int, int]]] = {}
        for index in indices:
            record, media, _ = self._rows[index]
            remote = self._remote[record["shard"]]
            for _, _, offset, size in media:
                wanted.setdefault(remote, []).append((offset - BLOCK, BLOCK + size))
        requests, parts = [], []
        for remote, ranges in wanted.items():
            if remote.cached:
                try:
                    os.close(remote.open_local())
                except SourceError:
                    pass  # the reads report it, naming the sample
                continue
            for start, end, members in _merge(ranges):
                requests.append((remote.name, start, end - start, remote.version))
                parts.append((remote, start, members))
        if not requests:
            return
        found: dict[tuple[str, int, int], bytes] = {}
        for data, (remote, start, members) in zip(self.store.read_many(requests), parts):
            if data is None:
                continue
            for s, n in members:
                found[(remote.url, s, n)] = data[s - start: s - start + n]
        _PREFETCHED.put(found)

    def for_rank(self, rank: int, world_size: int) -> RemoteShardSource:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} is outside [0, world_size={world_size})")
        ids = sorted(self._remote)[rank::world_size]
        if not ids:
            raise ValueError(f"{self.num_shards} shards cannot be shared by world_size={world_size} ranks")
        source = RemoteShardSource(self.root, ids, verify=self.verify, **self._options())
        source.split_by_rank = True
        source.rank_samples = self.rank_sizes(world_size)
        return source

    def _options(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.cache_dir is not None:
            out["cache_dir"], out["cache_bytes"] = str(self.cache_dir), self.cache_bytes
        if self.storage_options:
            out["storage_options"] = dict(self.storage_options)
        if self.retry is not None:
            out["retry"] = self.retry
        return out

    def to_config(self) -> dict[str, Any]:
        config = super().to_config()
        options = self._options()
        options.pop("retry", None)
        return {**config, **options}


def _check_shard_size(url: str, seen: ObjectVersion, size: int) -> None:
    """Refuse a shard whose size on the server is not the manifest's (rewritten after the conversion)."""
    if seen.size is not None and seen.size != size:
        raise SourceError(url, f"the shard has {seen.size} bytes on the server, the manifest says {size}: it "
                          f"changed after the conversion; {REWRITTEN_HINT}")


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """(start, end, members) of the ranges, neighbours closer than MERGE_GAP fetched as one."""
    out: list[tuple[int, int, list[tuple[int, int]]]] = []
    for start, length in sorted(set(ranges)):
        if out and start - out[-1][1] <= MERGE_GAP:
            s, e, members = out[-1]
            out[-1] = (s, max(e, start + length), [*members, (start, length)])
        else:
            out.append((start, start + length, [(start, length)]))
    return out


__all__ = ["RemoteShard", "RemoteShardBlob", "RemoteShardSource"]
