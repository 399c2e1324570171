"""`shards(path)`: a converted dataset (tar shards + DALI indices) as a random-access source.

Opening reads manifest.json, samples.jsonl.gz and the small .idx files, never the tars.
Each sample's media is a byte range of its shard, read with ``os.pread`` (with the tar
header in front of it, which is checked) in the worker that decodes it; nothing is
extracted. Shard files stay open per process, so a dataset must not be rewritten in
place while it is read.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mediapipe import shard_format as sf
from mediapipe.errors import SourceError
from mediapipe.loaders.sources import Source
from mediapipe.sample import Blob, SampleMeta, SampleRef

META_KEYS = ("width", "height", "duration", "frames", "fps", "keyframes", "sample_rate", "num_samples",
             "channels", "codec", "kind", "bytes")


class _OpenShards:
    """Shard files kept open per process (at most ``limit``), read with ``os.pread``: one
    system call per read, no seek, safe to share between threads and across fork."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a lock held during fork stays held

    def _reset(self) -> None:
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._busy: dict[int, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def open(self, path: str) -> Iterator[int]:
        with self._lock:
            fd = self._fds.get(path)
            if fd is None:
                fd = self._fds[path] = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            self._fds.move_to_end(path)
            self._busy[fd] = self._busy.get(fd, 0) + 1
            if len(self._fds) > self.limit:  # close the least recently used, never one being read
                for old in [p for p, f in self._fds.items() if not self._busy.get(f)][: len(self._fds) - self.limit]:
                    os.close(self._fds.pop(old))
        try:
            yield fd
        finally:
            with self._lock:
                self._busy[fd] -= 1


_OPEN_SHARDS = _OpenShards()
_CAN_ADVISE = hasattr(os, "posix_fadvise")


@dataclass(frozen=True)
class ShardBlob(Blob):
    """A tar member's bytes. The 512-byte tar header in front of them is read too and must
    agree with the index (regular file, same name and size, valid checksum)."""

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        member = sf.Member(self.name.rsplit(":", 1)[-1], self.offset, self.size or 0)
        try:
            with _OPEN_SHARDS.open(self.path) as fd:  # type: ignore[arg-type]
                raw = os.pread(fd, sf.BLOCK + member.size, self.offset - sf.BLOCK)  # header and data
        except OSError as err:
            raise SourceError(self.name, f"{err.strerror or err} (offset {self.offset})") from err
        if len(raw) != sf.BLOCK + member.size:
            raise SourceError(self.name, f"shard is truncated: expected {member.size} bytes at offset "
                              f"{self.offset}, got {max(len(raw) - sf.BLOCK, 0)}")
        sf.check_header(raw[:sf.BLOCK], member, where=self.name)
        return raw[sf.BLOCK:]


class ShardSource(Source):
    """The samples of a dataset written by `mediapipe convert`.

    ``blobs`` are keyed by extension (``jpg``, ``mkv``, ``flac``...), so the image, video
    and audio decoders find their member, and a manifest's named media (``<key>.mask.png``)
    by field name (``mask``); numeric manifest fields come back as ``fields``; the label comes from the sample records (the
    same value as the ``.cls`` member); ``meta(i)`` gives width/height, duration, fps,
    frames, keyframes and sample_rate without any I/O. ``shard_ids`` restricts the source
    to some shards (see `for_rank`).
    """

    kind = "shards"
    split_by_rank = False  # True for `for_rank`'s sources: the loader must not split them again

    def __init__(self, root: str | os.PathLike, shard_ids: list[int] | None = None) -> None:
        self.root = Path(root)
        if self.root.name == sf.MANIFEST and self.root.is_file():
            self.root = self.root.parent
        self.shard_ids = sorted(shard_ids) if shard_ids is not None else None
        self.manifest = sf.read_manifest(self.root)
        if not self.manifest.get("complete"):
            raise SourceError(str(self.root), "the conversion did not finish (manifest not complete); "
                              "rerun `mediapipe convert --resume`")
        entries = {e["shard"]: e for e in self.manifest["shards"] if e["samples"]}
        wanted = set(entries) if self.shard_ids is None else set(self.shard_ids)
        unknown = wanted - set(entries) - {e["shard"] for e in self.manifest["shards"]}
        if unknown:
            raise SourceError(str(self.root), f"no shards {sorted(unknown)} in this dataset")
        members: dict[int, list[list[sf.Member]]] = {}
        self._paths: dict[int, str] = {}
        for sid in sorted(wanted & set(entries)):
            entry = entries[sid]
            tar = self.root / entry["name"]
            try:
                size = tar.stat().st_size
            except OSError as err:
                raise SourceError(str(tar), err.strerror or str(err)) from err
            if size != entry["bytes"]:
                raise SourceError(str(tar), f"shard has {size} bytes, the manifest says {entry['bytes']}: "
                                  f"corrupt or truncated (run `mediapipe verify {self.root}`)")
            members[sid] = sf.read_index(self.root / entry["idx"], shard_size=size)
            self._paths[sid] = str(tar)
        records = [r for r in sf.read_samples(self.root) if r["shard"] in members]
        position: dict[int, int] = {sid: 0 for sid in members}
        self._rows: list[tuple[dict[str, Any], tuple[tuple[str, str, int, int], ...], SampleMeta]] = []
        for r in records:
            sid = r["shard"]
            row = members[sid][position[sid]]
            position[sid] += 1
            if not row or sf.split_member_name(row[0].name)[0] != r["key"]:
                raise SourceError(self._paths[sid], f"index lists {row[0].name!r} where the sample records "
                                  f"expect key {r['key']!r}")
            # "jpg" -> blob "jpg"; "mask.png" (a manifest's named field) -> blob "mask"
            media = tuple((m.extension.split(".", 1)[0] if "." in m.extension else m.extension,
                           f"{os.path.basename(self._paths[sid])}:{m.name}", m.offset, m.size)
                          for m in row if m.extension not in sf.META_EXTENSIONS)
            self._rows.append((r, media, {k: r[k] for k in META_KEYS if k in r}))
        for sid, n in position.items():
            if n != len(members[sid]):
                raise SourceError(self._paths[sid], f"index lists {len(members[sid])} samples, records {n}")

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def classes(self) -> list[str] | None:
        return self.manifest.get("classes")

    @property
    def num_shards(self) -> int:
        return len(self._paths)

    def ref(self, index: int) -> SampleRef:
        record, media, meta = self._rows[index]
        path = self._paths[record["shard"]]
        blobs = {ext: ShardBlob(name, path, offset, size) for ext, name, offset, size in media}
        return SampleRef(index, record["key"], blobs, record.get("label"), dict(meta), dict(record.get("fields", {})))

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
            path = self._paths[record["shard"]]
            for _, _, offset, size in media:
                try:
                    with _OPEN_SHARDS.open(path) as fd:
                        os.posix_fadvise(fd, offset - sf.BLOCK, sf.BLOCK + size, os.POSIX_FADV_WILLNEED)
                except OSError:
                    return  # only a hint: the read reports any real error, naming the sample

    def shard_of(self, index: int) -> int:
        return self._rows[index][0]["shard"]

    def for_rank(self, rank: int, world_size: int) -> ShardSource:
        """The shards of one rank (rank r reads shards r, r + W, ...), for training across
        machines where each reads whole shards; its loader does not split it again."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} is outside [0, world_size={world_size})")
        ids = sorted(self._paths)[rank::world_size]
        if not ids:
            raise ValueError(f"{self.num_shards} shards cannot be shared by world_size={world_size} ranks")
        source = ShardSource(self.root, ids)
        source.split_by_rank = True  # read by Loader: this rank's part already
        return source

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind, "root": str(self.root)}
        if self.shard_ids is not None:
            config["shard_ids"] = list(self.shard_ids)
        return config


def shards(path: str | os.PathLike, *, by_rank: bool = False) -> ShardSource:
    """A dataset written by `mediapipe convert` (the folder holding manifest.json, or that file).

    ``by_rank=True`` keeps only this process's shards when torch.distributed is initialised
    (rank r reads shards r, r + W, ...); the loader then does not split them again.
    """
    source = ShardSource(path)
    if by_rank:
        from mediapipe.loaders.loader import distributed_rank_and_size

        rank, world_size = distributed_rank_and_size()
        if world_size > 1:
            source = source.for_rank(rank, world_size)
    return source
