"""`shards(path)`: a converted dataset (tar shards + DALI indices) as a random-access source.

Opening reads manifest.json, samples.jsonl.gz and the small .idx files, never the tars,
and trusts none of them (see `mediapipe.dataset`'s manifest, index and sample_records): paths
stay inside the dataset folder, every field is type-checked, sizes are bounded, index entries
are sorted and disjoint. Each sample's media is a byte range of its shard, read with ``os.pread`` (with
the tar header in front of it, which is checked) in the worker that decodes it; nothing
is extracted. Shard files stay open per process; the first time a process opens one, it
must still be the file (size, modification time) the dataset was opened with, so a
dataset rewritten or replaced under a reader is refused rather than read.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mediapipe.dataset.index import read_index
from mediapipe.dataset.layout import BLOCK, MANIFEST, META_EXTENSIONS, SAMPLES
from mediapipe.dataset.manifest import check_sample_count, read_manifest, resolve_shards
from mediapipe.dataset.safe_io import parse_json, stat_regular
from mediapipe.dataset.sample_records import match_records, read_samples
from mediapipe.dataset.tar import Member, check_header
from mediapipe.errors import SourceError
from mediapipe.loaders.sources.folder import Source
from mediapipe.remote.urls import is_remote
from mediapipe.sample import Blob, SampleMeta, SampleRef

META_KEYS = ("width", "height", "duration", "frames", "fps", "keyframes", "sample_rate", "num_samples",
             "channels", "codec", "kind", "bytes")
VERIFY = (None, "sha256")
MAX_TARGETS_BYTES = 64 << 20  # one sample's .json member when it carries targets (masks as RLE)


@dataclass(frozen=True)
class ShardFile:
    """What a shard must still be when a process first opens it: the size and modification
    time seen when the dataset was opened, and (``verify="sha256"``) the manifest's digest."""

    path: str
    size: int
    mtime_ns: int
    sha256: str | None = None


def _shard_digest(fd: int, path: str) -> str:
    """The sha256 of a whole file, read through ``fd`` in 1 MiB preads."""
    h, offset = hashlib.sha256(), 0
    while block := os.pread(fd, 1 << 20, offset):
        h.update(block)
        offset += len(block)
    return h.hexdigest()


class _OpenShards:
    """Shard files kept open per process (at most ``limit``), read with ``os.pread``: one
    system call per read, no seek, safe to share between threads and across fork.

    Opening a shard with a `ShardFile` checks that the file is still that one; a descriptor
    kept open for another version of the path (a dataset rewritten in this process) is
    dropped. A shard whose sha256 was asked for is hashed once per process: a fork keeps
    what its parent checked (the identity is checked again when the child opens the file).
    """

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._verified: dict[ShardFile, str] = {}  # shard -> its digest, once computed
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a lock held during fork stays held

    def _reset(self) -> None:
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._identity: dict[int, tuple[int, int]] = {}  # fd -> (size, mtime_ns) when opened
        self._busy: dict[int, int] = {}
        self._orphans: set[int] = set()  # dropped while being read: closed when the read ends
        self._lock = threading.Lock()
        self._hash_lock = threading.Lock()

    def forget(self) -> None:
        """Close every idle descriptor and forget every checksum (as a fresh process would)."""
        with self._lock:
            for path, fd in list(self._fds.items()):
                if not self._busy.get(fd):
                    os.close(self._fds.pop(path))
                    self._identity.pop(fd, None)
            self._verified.clear()

    @contextmanager
    def open(self, path: str, expect: ShardFile | None = None) -> Iterator[int]:
        fd = self.acquire(path, expect)
        try:
            yield fd
        finally:
            self.release(fd)

    def acquire(self, path: str, expect: ShardFile | None = None) -> int:
        """A descriptor on ``path``, kept open and marked busy until `release` (the read
        path's form of `open`: no generator per read)."""
        if expect is not None and expect.sha256 is not None:
            self._check_digest(expect)
        with self._lock:
            fd = self._fds.get(path)
            if fd is not None and expect is not None and self._identity[fd] != (expect.size, expect.mtime_ns):
                self._drop(path, fd)  # kept open for an earlier version of this path
                fd = None
            if fd is None:
                fd = self._fds[path] = _open_shard(path, expect)
                st = os.fstat(fd)
                self._identity[fd] = (st.st_size, st.st_mtime_ns)
            self._fds.move_to_end(path)
            self._busy[fd] = self._busy.get(fd, 0) + 1
            if len(self._fds) > self.limit:  # close the least recently used, never one being read
                for old in [p for p, f in self._fds.items() if not self._busy.get(f)][: len(self._fds) - self.limit]:
                    self._drop(old, self._fds[old])
        return fd

    def release(self, fd: int) -> None:
        with self._lock:
            self._busy[fd] -= 1
            if not self._busy[fd] and fd in self._orphans:
                self._orphans.discard(fd)
                os.close(fd)

    def _drop(self, path: str, fd: int) -> None:
        del self._fds[path]
        self._identity.pop(fd, None)
        if self._busy.get(fd):
            self._orphans.add(fd)  # another thread is reading it: closed when that read ends
        else:
            os.close(fd)

    def _check_digest(self, shard: ShardFile) -> None:
        digest = self._verified.get(shard)
        if digest is None:
            with self._hash_lock:
                digest = self._verified.get(shard)
                if digest is None:
                    fd = _open_shard(shard.path, shard)
                    try:
                        digest = _shard_digest(fd, shard.path)
                    finally:
                        os.close(fd)
                    self._verified[shard] = digest
        if digest != shard.sha256:
            raise SourceError(shard.path, f"sha256 {digest} differs from the manifest's {shard.sha256}: the "
                              "shard is corrupt (run `mediapipe verify`)")


def _open_shard(path: str, expect: ShardFile | None) -> int:
    """A descriptor on a shard, refused when it is no longer the file the dataset was opened with."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0))  # a real path
    if expect is None:
        return fd
    st = os.fstat(fd)
    if (st.st_size, st.st_mtime_ns) != (expect.size, expect.mtime_ns):
        os.close(fd)
        raise SourceError(path, f"shard changed since the dataset was opened ({expect.size} bytes then, "
                          f"{st.st_size} now, modified again): a dataset must not be rewritten while it is read")
    return fd


_OPEN_SHARDS = _OpenShards()
_CAN_ADVISE = hasattr(os, "posix_fadvise")


@dataclass(frozen=True)
class ShardBlob(Blob):
    """A tar member's bytes. The 512-byte tar header in front of them is read too and must
    agree with the index (regular file, same name and size, valid checksum)."""

    shard: ShardFile | None = None  # checked when this process first opens the shard

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        member = Member(self.name.rsplit(":", 1)[-1], self.offset, self.size or 0)
        try:
            fd = _OPEN_SHARDS.acquire(self.path, self.shard)  # type: ignore[arg-type]
            try:
                raw = os.pread(fd, BLOCK + member.size, self.offset - BLOCK)  # header and data
            finally:
                _OPEN_SHARDS.release(fd)
        except SourceError:
            raise
        except OSError as err:
            raise SourceError(self.name, f"{err.strerror or err} (offset {self.offset})") from err
        if len(raw) != BLOCK + member.size:
            raise SourceError(self.name, f"shard is truncated: expected {member.size} bytes at offset "
                              f"{self.offset}, got {max(len(raw) - BLOCK, 0)}")
        check_header(raw[:BLOCK], member, where=self.name)
        return raw[BLOCK:]


class ShardSource(Source):
    """The samples of a dataset written by `mediapipe convert`.

    ``blobs`` are keyed by extension (``jpg``, ``mkv``, ``flac``...), so the image, video
    and audio decoders find their member, and a manifest's named media (``<key>.mask.png``)
    by field name (``mask``); numeric manifest fields come back as ``fields``, and the targets a
    detection source gave (boxes, labels, masks: read from the ``.json`` member, typed by
    `field_types`, as the source declared them); the label comes from the sample records (the
    same value as the ``.cls`` member); ``meta(i)`` gives width/height, duration, fps,
    frames, keyframes and sample_rate without any I/O. ``shard_ids`` restricts the source
    to some shards (see `for_rank`). ``verify="sha256"`` checks each shard against the
    manifest's sha256 the first time a process reads from it.
    """

    kind = "shards"

    def __init__(self, root: str | os.PathLike, shard_ids: list[int] | None = None, verify: str | None = None) -> None:
        if verify not in VERIFY:
            raise ValueError(f"verify={verify!r}: expected one of {VERIFY}")
        self.root = Path(root)
        if self.root.name == MANIFEST and self.root.is_file():
            self.root = self.root.parent
        self.shard_ids = sorted(shard_ids) if shard_ids is not None else None
        self.verify = verify
        self.manifest = read_manifest(self.root)
        if not self.manifest["complete"]:
            raise SourceError(str(self.root), "the conversion did not finish (manifest not complete); "
                              "rerun `mediapipe convert --resume`")
        entries = {e["shard"]: e for e in self.manifest["shards"] if e["samples"]}
        files = resolve_shards(self.root, self.manifest)
        wanted = set(entries) if self.shard_ids is None else set(self.shard_ids)
        unknown = wanted - {e["shard"] for e in self.manifest["shards"]}
        if unknown:
            raise SourceError(str(self.root), f"no shards {sorted(unknown)} in this dataset")
        indices: dict[int, list[list[Member]]] = {}
        self._shards: dict[int, ShardFile] = {}
        for sid in sorted(wanted & set(entries)):
            entry, where = entries[sid], files[sid]
            st = stat_regular(where.tar, "shard")
            if st.st_size != entry["bytes"]:
                raise SourceError(where.tar, f"shard has {st.st_size} bytes, the manifest says {entry['bytes']}: "
                                  f"corrupt or truncated (run `mediapipe verify {self.root}`)")
            indices[sid] = read_index(where.idx, shard_size=st.st_size, samples=entry["samples"])
            self._shards[sid] = ShardFile(where.tar, st.st_size, st.st_mtime_ns,
                                          entry["sha256"] if verify == "sha256" else None)
        if self.shard_ids is not None:  # the records of every shard are read: the others' sizes bound them too
            check_sample_count(self.root, self.manifest)
        records = read_samples(self.root, self.manifest["num_samples"])
        self._set_rows(records, indices, set(entries), {sid: f.name for sid, f in files.items()},
                       where=str(self.root / SAMPLES))

    def __new__(cls, root: str | os.PathLike | None = None, *args: Any, **kwargs: Any) -> ShardSource:
        """A dataset at a URL (https://, s3://, gs://) is a `RemoteShardSource` (unpickling passes no root)."""
        if cls is ShardSource and is_remote(root):
            from mediapipe.loaders.sources.remote_shards import RemoteShardSource

            cls = RemoteShardSource
        return super().__new__(cls)

    def _set_rows(self, records: list[dict[str, Any]], indices: dict[int, list[list[Member]]],
                  with_samples: set[int], names: dict[int, str], *, where: str) -> None:
        """Pair the records with their index entries: (record, media members, meta) per sample, and
        where each sample's targets are (its .json member) when the manifest says it has some."""
        pairs = match_records(records, indices, with_samples, where=where)
        self._rows: list[tuple[dict[str, Any], tuple[tuple[str, str, int, int], ...], SampleMeta]] = []
        self._types: dict[str, Any] = {}
        if "field_types" in self.manifest:
            from mediapipe.loaders.sources.targets import types_from_config

            self._types = types_from_config(self.manifest["field_types"], where.replace(SAMPLES, MANIFEST))
        self._targets: list[tuple[str, int, int] | None] = []  # each sample's .json member, when it has targets
        prefixes = {sid: f"{name}:" for sid, name in names.items()}
        for record, row in pairs:
            prefix = prefixes[record["shard"]]
            cut = len(record["key"]) + 1  # every name is "<key>.<extension>" (read_index, match_records)
            media, targets = [], None
            for m in row:
                ext = m.name[cut:]
                if ext not in META_EXTENSIONS:  # "jpg" -> blob "jpg"; "mask.png" (a named field) -> blob "mask"
                    media.append((ext.partition(".")[0], prefix + m.name, m.offset, m.size))
                elif ext == "json" and self._types:
                    targets = (prefix + m.name, m.offset, m.size)
            self._rows.append((record, tuple(media), {k: record[k] for k in META_KEYS if k in record}))
            self._targets.append(targets)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def classes(self) -> list[str] | None:
        return self.manifest.get("classes")

    @property
    def num_shards(self) -> int:
        return len(self._shards)

    @property
    def fingerprint(self) -> str:  # type: ignore[override]
        """A digest of the shards this source reads (the manifest's sha256 of each, which covers the
        targets in their .json members): a conversion from this dataset resumes only over the same."""
        entries = [e for e in self.manifest["shards"] if e["samples"]]
        read = {e["shard"] for e in entries} if self.shard_ids is None else set(self.shard_ids)
        digests = [[e["shard"], e["sha256"]] for e in entries if e["shard"] in read]
        return hashlib.sha256(json.dumps(digests).encode()).hexdigest()

    def field_types(self) -> dict[str, Any]:
        """The types of the targets each sample carries (boxes, labels, masks...), as the source
        the dataset was converted from declared them; {} for a dataset without targets."""
        return dict(self._types)

    def ref(self, index: int) -> SampleRef:
        record, media, meta = self._rows[index]
        shard = self._shards[record["shard"]]
        blobs = {ext: ShardBlob(name, shard.path, offset, size, shard=shard) for ext, name, offset, size in media}
        return SampleRef(index, record["key"], blobs, record.get("label"), dict(meta),
                         self._fields(index, lambda name, offset, size: ShardBlob(name, shard.path, offset, size,
                                                                                  shard=shard)))

    def _fields(self, index: int, member: Callable[[str, int, int], Blob]) -> dict[str, Any]:
        """Sample ``index``'s numbers and text, and its targets when the dataset has some: read from
        its .json member (``member(name, offset, size)`` is its blob), bounded and checked."""
        record = self._rows[index][0]
        fields = dict(record.get("fields", {}))
        if not self._types:
            return fields
        from mediapipe.loaders.sources.targets import BAD_ANNOTATION, targets_from_json

        where = self._targets[index]
        if where is None:
            raise SourceError(record["key"], "no .json member, but the manifest says samples carry targets",
                              category=BAD_ANNOTATION)
        name, offset, size = where
        if size > MAX_TARGETS_BYTES:
            raise SourceError(name, f"{size} bytes, more than the {MAX_TARGETS_BYTES} a sample's targets may take",
                              category=BAD_ANNOTATION)
        document = parse_json(member(name, offset, size).read(), name)
        if type(document) is not dict or "targets" not in document:
            raise SourceError(name, "no 'targets' object, but the manifest says samples carry targets",
                              category=BAD_ANNOTATION)
        size = (record.get("height"), record.get("width"))
        classes = self.classes
        fields.update(targets_from_json(document["targets"], self._types, name,
                                        num_classes=len(classes) if isinstance(classes, list) else None,
                                        canvas=size if all(type(v) is int for v in size) else None))
        return fields

    def meta(self, index: int) -> SampleMeta:
        return dict(self._rows[index][2])

    def prefetch(self, indices: Iterable[int]) -> None:
        """Ask the kernel to read these samples' byte ranges now (``POSIX_FADV_WILLNEED``,
        which returns at once): on a cold page cache the reads of a batch then overlap
        with decoding its first samples instead of each waiting on the disk in turn."""
        if not _CAN_ADVISE:
            return
        for index in indices:
            record, media, _ = self._rows[index]
            shard = self._shards[record["shard"]]
            for _, _, offset, size in media:
                try:
                    with _OPEN_SHARDS.open(shard.path, shard) as fd:
                        os.posix_fadvise(fd, offset - BLOCK, BLOCK + size, os.POSIX_FADV_WILLNEED)
                except OSError:
                    return  # only a hint: the read reports any real error, naming the sample

    def shard_of(self, index: int) -> int:
        return self._rows[index][0]["shard"]

    def for_rank(self, rank: int, world_size: int) -> ShardSource:
        """The shards of one rank (rank r reads shards r, r + W, ...), for training across
        machines where each reads whole shards; its loader does not split it again."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} is outside [0, world_size={world_size})")
        ids = sorted(self._shards)[rank::world_size]
        if not ids:
            raise ValueError(f"{self.num_shards} shards cannot be shared by world_size={world_size} ranks")
        source = ShardSource(self.root, ids, verify=self.verify)
        source.split_by_rank = True  # `Source.split_by_rank`: the loader must not split it again
        source.rank_samples = self.rank_sizes(world_size)
        return source

    def rank_sizes(self, world_size: int) -> tuple[int, ...]:
        """The samples of each rank's part (`for_rank`), from the manifest: parts differ when shards
        do, and the loader pads (or cuts) every rank to the same number of batches by them."""
        counts = {e["shard"]: e["samples"] for e in self.manifest["shards"] if e["samples"]}
        ids = sorted(counts)
        return tuple(sum(counts[i] for i in ids[r::world_size]) for r in range(world_size))

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind, "root": str(self.root)}
        if self.shard_ids is not None:
            config["shard_ids"] = list(self.shard_ids)
        if self.verify is not None:
            config["verify"] = self.verify
        return config


def shards(path: str | os.PathLike, *, by_rank: bool = False, verify: str | None = None,
           **remote: Any) -> ShardSource:
    """A dataset written by `mediapipe convert` (the folder holding manifest.json, or that file),
    or its URL (``https://``, ``s3://``, ``gs://``: see `RemoteShardSource`, which takes
    ``cache_dir``, ``cache_bytes``, ``storage_options`` and ``retry`` as ``remote`` options).

    ``by_rank=True`` keeps only this process's shards when torch.distributed is initialised
    (rank r reads shards r, r + W, ...); the loader then does not split them again.
    ``verify="sha256"`` hashes each shard the first time a process reads from it and
    refuses its samples when the digest differs from the manifest's (a disk or copy
    error that sizes and tar headers do not show); each shard is hashed once per process.
    """
    if remote and not is_remote(path):
        raise TypeError(f"shards({str(path)!r}): {sorted(remote)} apply to a dataset at a URL only")
    source = ShardSource(path, verify=verify, **remote)
    if by_rank:
        from mediapipe.loaders.loader import distributed_rank_and_size

        rank, world_size = distributed_rank_and_size()
        if world_size > 1:
            source = source.for_rank(rank, world_size)
    return source
