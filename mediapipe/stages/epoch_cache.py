"""The epoch cache: decoded samples kept from the first epoch and read in the next ones.

``pipe.loader(cache=mp.EpochCache("shm", max_bytes=...))`` (or ``cache="shm"``, or a folder
path) keeps each sample's image fields as they are after decoding and after the
deterministic sample-stage ops that follow it (`DETERMINISTIC_OPS`: a fixed Resize,
CenterCrop, Pad), before the first random op. The store is a folder of files, one per sample,
so every worker process and every rank on one machine shares it; `/dev/shm` keeps it in RAM.

* **Keyed.** The folder is named by a digest of the source (its fingerprint, its config, its
  length), the cached fields' decoder specs and the stored ops' configs: a changed pipeline
  never reads another's entries. Each entry also records its media file's identity (path,
  offset, size, mtime, ctime, inode; or a digest of in-memory bytes), checked at every read:
  a file changed in place is a miss, decoded again and stored anew.
* **Atomic, untrusted.** An entry is written under a temporary name, then renamed: a writer
  killed at any point leaves no torn entry (its temporary file is ignored, and removed when
  a loader next opens the cache and its process is gone). Reading checks the magic, the
  header, every dtype and shape, the size against the budget before anything is allocated,
  the file's length and a checksum of the header and every field's bytes: any mismatch is a
  miss (decoded again), never an error.
* **Bounded.** ``max_bytes`` bounds the entries of one cache key (one dataset and pipeline; each
  value of a `Schedule`d stored op is a key of its own, with a budget of its own), shared by every
  process through a ledger file updated under ``flock``. A sample that does
  not fit is not cached and is decoded each epoch as without a cache. The ledger never
  undercounts: a writer killed between reserving and renaming leaves its reservation
  counted, so the cache may hold a little less than its budget, never more.
  `EpochCache.clear` removes the entries. A folder that takes no writes (read-only, full) is
  read, and each sample it cannot store is decoded as without a cache.
* **Not left behind.** Each key's folder is recorded and held by its live loaders
  (`mediapipe.stages.cache_folders`): an upgrade's old entries and, with `EpochCache.prune`, other
  pipelines' are removed once no loader holds them.
* **Lossless by default.** A cached field is decoded whole, at full scale: the op the plan
  would fuse into the decoder (a RandomResizedCrop decoded as a DCT-scaled region) runs after
  the cache as an ordinary sample op. Batches are then bit-identical with the cache on, in
  the epoch that fills it and in those that read it, to an uncached loader of the same
  unfused plan; they differ from the fused fast path within its quality bound (the fused
  path's bound is checked against this same full decode). ``max_side`` stores copies whose
  longer side is at most that many pixels (antialiased resize, FFCV's ``max_resolution``),
  used in every epoch, so it changes the batches: not lossless.

``loader.stats.cache`` counts hits, misses, stored, skipped (over the budget, or a sample
whose media cannot be identified) and rejected (an entry that failed a check).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import stat
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mediapipe.errors import PipelineError
from mediapipe.loaders.parent_watch import process_alive
from mediapipe.stages.cache_folders import (
    close_owned,
    hold_folder,
    key_folders,
    other_format,
    own_folder,
    owned,
    remove_unheld,
)
from mediapipe.stages.cache_plan import (
    DETERMINISTIC_OPS,
    base_source,
    blob_stamp,
    cached_fields,
    stored_names,
    stored_prefix,
)
from mediapipe.stages.checksum import ALGORITHM, ALGORITHMS

if TYPE_CHECKING:
    from mediapipe.plan import PlacedOp, Plan
    from mediapipe.sample import SampleRef
    from mediapipe.stages.stats import StageStats

__all__ = ["DEFAULT_SHARE", "DETERMINISTIC_OPS", "EpochCache", "CacheBinding", "cache_counts", "resolve_cache"]

FORMAT = 5  # 2: each field stored in its memory order (``order``); 4: checked by `entry_checksum`; 5: a 64-bit check
MAGIC = b"MPEC\x01\x00\x00\x00"
_PREFIX = struct.Struct("<8sIQ")  # magic, header length, `entry_checksum` of header and fields
ALIGN = 64  # each field's bytes start at a multiple of this
MAX_HEADER = 1 << 16
MAX_DIMS = 8
MAX_ENTRY = 1 << 32  # no entry is read past this, whatever the budget
DEFAULT_SHARE = 0.5  # cache="shm" or a path: half the free space of its filesystem when the loader is made
SHM = "/dev/shm"
DTYPES: dict[str, torch.dtype] = {str(d).removeprefix("torch."): d for d in (
    torch.uint8, torch.int8, torch.int16, torch.uint16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
    torch.float32, torch.float64, torch.bool)}
_ENTRY = re.compile(r"^(\d+)\.mpc$")
_TEMP = re.compile(r"^\.(\d+)\.(\d+)\.[0-9a-f]+\.tmp$")  # .<index>.<pid>.<random>.tmp


def cache_counts(stats: StageStats) -> Counter:
    """The cache's counter on ``stats`` (hits, misses, stored, skipped, rejected), made on first use."""
    counts = getattr(stats, "cache", None)
    if counts is None:
        counts = stats.cache = Counter()  # type: ignore[attr-defined]
    return counts


class EpochCache:
    """A store of decoded samples shared by a loader's workers and the ranks of one machine.

    ``where``: "shm" (a folder of this user's under /dev/shm: RAM) or a folder path (local NVMe).
    ``max_bytes``: the budget of one dataset-and-pipeline's entries; default: `DEFAULT_SHARE` of the
    folder's free space now. Past it, samples are decoded as without a cache. ``max_side``: store
    copies no longer than this on their longer side (not lossless). See the module docstring."""

    def __init__(self, where: str | os.PathLike = "shm", max_bytes: int | None = None,
                 max_side: int | None = None) -> None:
        if not isinstance(where, (str, os.PathLike)) or str(where) == "":
            raise ValueError(f"EpochCache(where={where!r}): expected 'shm' or a folder path")
        for name, value in (("max_bytes", max_bytes), ("max_side", max_side)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"EpochCache({name}={value!r}): expected an int >= 1 or None")
        self.where = str(where)
        self.root = Path(f"{SHM}/mediapipe-epoch-cache-{os.getuid()}" if self.where == "shm" else where)
        own_folder(self.root, strict=self.where == "shm")
        if max_bytes is None:
            free = shutil.disk_usage(self.root).free
            max_bytes = max(1, int(free * DEFAULT_SHARE))
        self.max_bytes, self.max_side = max_bytes, max_side

    def __repr__(self) -> str:
        return f"EpochCache({self.where!r}, max_bytes={self.max_bytes}, max_side={self.max_side})"

    def bind(self, plan: Plan, epoch: bool = False) -> CacheBinding:
        """What this cache keeps of ``plan``'s samples, and where (`CacheBinding`); refuses a plan it cannot
        keep samples of (`PipelineError`, saying why). ``epoch``: one epoch's plan of a loader made already
        (`Plan.at_epoch`), whose key's folder is made where it can be: a removed cache folder is not made
        again, and where the folder cannot be made the epoch is decoded as without a cache."""
        fields, prefix = cached_fields(plan), stored_prefix(plan)
        binding = CacheBinding(self, cache_key(plan, fields, prefix, self.max_side), tuple(fields),
                               tuple(p.index for p in prefix), stored_names(plan, fields, prefix), ALGORITHM)
        if epoch:
            with contextlib.suppress(OSError, PipelineError):  # unheld: its reads miss, its writes are skipped
                binding.hold(parents=False)
            binding.remove_stale_temps()
            return binding
        if not any(p.op.scheduled for p in prefix):  # else each epoch's plan binds its own key (`Plan.at_epoch`):
            binding.hold()  # this one's folder, keyed by the `Schedule` itself, would never hold an entry
            binding.remove_stale_temps()
        remove_unheld(self.root, lambda folder: folder.name != binding.key and other_format(folder, FORMAT))
        return binding

    def clear(self) -> None:
        """Remove every entry this cache's folder holds (every key's); a loader using it fills it again."""
        for child in key_folders(self.root):
            shutil.rmtree(child, ignore_errors=True)

    def prune(self) -> list[str]:
        """Remove the key folders no live loader holds (other pipelines' and datasets' entries, any
        format's); the keys removed. A loader that binds one again fills it again."""
        return remove_unheld(self.root, lambda folder: True)


def resolve_cache(cache: Any) -> EpochCache | None:
    """A loader's ``cache=`` as an `EpochCache`: None (no cache), "shm", a folder path, or one given."""
    if cache is None or isinstance(cache, EpochCache):
        return cache
    if isinstance(cache, (str, os.PathLike)) and not isinstance(cache, bool):
        return EpochCache(cache)
    raise ValueError(f"cache={cache!r}: expected None, 'shm', a folder path, or mp.EpochCache(where, max_bytes, "
                     "max_side)")


# -- the key naming a plan's folder -------------------------------------------------------
def cache_key(plan: Plan, fields: list[str], prefix: list[PlacedOp], max_side: int | None) -> str:
    """The digest naming a plan's folder: the source, the cached decoders and the decoders' limits, the
    stored ops, ``max_side``."""
    source = base_source(plan)
    try:
        config: Any = source.to_config()
    except NotImplementedError:
        config = None
    if config is None and source.fingerprint is None:
        raise PipelineError(f"cache=: source {type(source).__name__} has neither a fingerprint nor a config "
                            "(to_config) to key its cache by: a changed dataset could be read from old entries")
    described = {"format": FORMAT, "check": ALGORITHM,
                 "source": {"type": type(source).__name__, "fingerprint": source.fingerprint, "config": config,
                            "len": len(source)},
                 "decode": {n: plan.decode[n].to_config() for n in fields},
                 "limits": dataclasses.asdict(plan.limits),  # a limit refusing a file refuses its entry too
                 "ops": [p.op.to_config() for p in prefix], "max_side": max_side}
    text = json.dumps(described, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# -- one plan's entries ---------------------------------------------------------------------
@dataclass
class CacheBinding:
    """An `EpochCache` bound to one plan: its key's folder, the fields it keeps (``fields``), the
    sample ops run before storing (``prefix``, op indices), the names an entry holds (``names``) and the
    check its key names (``algorithm``, one of `checksum.ALGORITHMS`): every process checks by it, and
    one that cannot (a worker without that package) neither reads nor writes entries. Pickles to the
    workers; each process opens the ledger for itself."""

    cache: EpochCache
    key: str
    fields: tuple[str, ...]
    prefix: tuple[int, ...]
    names: tuple[str, ...]
    algorithm: str = ALGORITHM

    def __post_init__(self) -> None:
        self._dir = os.path.join(self.cache.root, self.key)  # the folder as a string: entries are opened by name
        self._ledger: tuple[int, int] | None = None  # (pid, fd)
        self._users: tuple[int, int] | None = None  # (pid, fd) holding the shared lock on ``users``

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ledger"] = state["_users"] = None
        return state

    def hold(self, parents: bool = True) -> None:
        """Make the key's folder, record its format and hold it while this binding lives in this process
        (`cache_folders.hold_folder`; unheld where it cannot be)."""
        held = hold_folder(self.folder, FORMAT, parents)
        if held is not None:
            old, self._users = self._users, (os.getpid(), owned(held, self))
            if old is not None:
                close_owned(*old)

    @property
    def folder(self) -> Path:
        return self.cache.root / self.key

    def fused(self, plan: Plan) -> dict[str, PlacedOp]:
        """The plan's fusions less those into a cached field: those fields are decoded whole."""
        kept = set(self.fields)
        return {n: p for n, p in plan.fused.items() if not set(p.op.inputs) & kept}

    def stamp(self, plan: Plan, ref: SampleRef) -> list[Any] | None:
        """The identity of a sample's cached fields' media (`blob_stamp`), or None: not cacheable."""
        stamps = []
        for name in self.fields:
            try:
                one = blob_stamp(plan.blob(ref, name))
            except Exception:  # the sample has no such media: decoding says so
                return None
            if one is None:
                return None
            stamps.append(one)
        return stamps

    def path(self, index: int) -> Path:
        return Path(self._entry(index))

    def _entry(self, index: int) -> str:
        return f"{self._dir}/{index}.mpc"

    # -- reading --------------------------------------------------------------------------
    def read(self, index: int, stamp: list[Any] | None, stats: StageStats) -> dict[str, torch.Tensor] | None:
        """Sample ``index``'s entry, when it is there, whole, and of this ``stamp``; else None (a miss)."""
        counts = cache_counts(stats)
        if stamp is None:
            return None
        if self.algorithm not in ALGORITHMS:
            counts["misses"] += 1
            return None
        try:
            fd = os.open(self._entry(index), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            counts["misses"] += 1
            return None
        try:
            values = self._parse(fd, stamp)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, UnicodeDecodeError):
            values = None
            counts["rejected"] += 1
        finally:
            os.close(fd)
        counts["hits" if values is not None else "misses"] += 1
        return values

    def _parse(self, fd: int, stamp: list[Any]) -> dict[str, torch.Tensor] | None:
        """An open entry's fields, every size bounded before it is allocated; None for another stamp.
        Raises ValueError for an entry that fails a check."""
        st = os.fstat(fd)
        limit = min(self.cache.max_bytes, MAX_ENTRY)
        if not stat.S_ISREG(st.st_mode) or not _PREFIX.size <= st.st_size <= limit:
            raise ValueError("not a regular file of a size the budget admits")
        head = os.pread(fd, _PREFIX.size, 0)
        magic, header_len, check = _PREFIX.unpack(head) if len(head) == _PREFIX.size else (b"", 0, 0)
        if magic != MAGIC or header_len > MAX_HEADER:
            raise ValueError("bad magic or header length")
        raw = os.pread(fd, header_len, _PREFIX.size)
        header = json.loads(raw)
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ValueError("not this format")
        if header.get("stamp") != stamp:
            return None  # the media file changed since it was stored
        layout = self._layout(header.get("fields"))
        start = _aligned(_PREFIX.size + header_len)
        total = start + (layout[-1][4] + _aligned(layout[-1][5]) if layout else 0)
        if total != st.st_size:
            raise ValueError(f"length {st.st_size}, header says {total}")
        payload = bytearray(total - start)
        if os.preadv(fd, [payload], start) != len(payload):
            raise ValueError("short read")
        data = torch.frombuffer(payload, dtype=torch.uint8) if payload else torch.empty(0, dtype=torch.uint8)
        fields = (data[offset:offset + nbytes] for _, _, _, _, offset, nbytes, _ in layout)
        if len(raw) != header_len or ALGORITHMS[self.algorithm](raw, fields) != check:
            raise ValueError("checksum mismatch")
        return {name: _tensor(payload, dtype, shape, offset, count).permute(_inverse(order))
                for name, dtype, shape, order, offset, _, count in layout}

    def _layout(self, fields: Any) -> list[tuple[str, torch.dtype, tuple[int, ...], list[int], int, int, int]]:
        """(name, dtype, stored shape, order, offset in the payload, bytes, elements) per field, checked:
        the names this binding stores, known dtypes, shapes of at most `MAX_DIMS` non-negative ints,
        an order that is a permutation of the dims."""
        if not isinstance(fields, list) or [f[0] if isinstance(f, list) and f else None for f in fields] != \
                list(self.names):
            raise ValueError("fields are not the ones this cache stores")
        layout, offset = [], 0
        for name, dtype_name, shape, order in fields:
            dtype = DTYPES[dtype_name]
            if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(
                    type(n) is int and 0 <= n <= MAX_ENTRY for n in shape):
                raise ValueError(f"field {name!r}: bad shape")
            if not isinstance(order, list) or sorted(order) != list(range(len(shape))) or not all(
                    type(d) is int for d in order):
                raise ValueError(f"field {name!r}: bad order")
            count = math.prod(shape)
            nbytes = count * dtype.itemsize
            if nbytes > MAX_ENTRY:
                raise ValueError(f"field {name!r}: too large")
            layout.append((name, dtype, tuple(shape), order, offset, nbytes, count))
            offset += _aligned(nbytes)
        return layout

    # -- writing --------------------------------------------------------------------------
    def shrink(self, data: dict[str, Any], plan: Plan) -> None:
        """With ``max_side``: the stored images whose longer side is above it, resized (antialiased)."""
        side = self.cache.max_side
        if side is None:
            return
        from mediapipe.augment.functional.geometry import resize_image

        for name in self.names:
            value, ftype = data.get(name), plan.types.get(name)
            if not isinstance(value, torch.Tensor) or ftype is None or not ftype.spec.has_canvas or value.ndim < 2:
                continue
            h, w = value.shape[-2:]
            if max(h, w) <= side:
                continue
            scale = side / max(h, w)
            size = (max(1, round(h * scale)), max(1, round(w * scale)))
            nearest = ftype.kind == "mask"
            data[name] = resize_image(value, size, "nearest" if nearest else "bilinear", antialias=not nearest)

    def write(self, index: int, stamp: list[Any] | None, data: dict[str, Any], stats: StageStats) -> None:
        """Store sample ``index``'s fields from ``data`` when they fit the budget (else skipped, counted)."""
        counts = cache_counts(stats)
        values = [data.get(n) for n in self.names]
        storable = all(isinstance(v, torch.Tensor) and str(v.dtype).removeprefix("torch.") in DTYPES
                       and v.layout == torch.strided and not v.is_nested for v in values)
        if stamp is None or self.algorithm not in ALGORITHMS or not storable:
            counts["skipped"] += 1
            return
        orders = [memory_order(v) for v in values]
        stored = [v.detach().cpu().permute(order).contiguous() for v, order in zip(values, orders)]
        flat = [v.reshape(-1).view(torch.uint8) for v in stored]
        fields = [[n, str(v.dtype).removeprefix("torch."), list(v.shape), order]
                  for n, v, order in zip(self.names, stored, orders)]
        header = json.dumps({"format": FORMAT, "stamp": stamp, "fields": fields}, sort_keys=True).encode()
        start = _aligned(_PREFIX.size + len(header))
        payload = [part for f in flat for part in (f.numpy(), bytes(_aligned(f.numel()) - f.numel()))]
        check = ALGORITHMS[self.algorithm](header, flat)
        parts = [_PREFIX.pack(MAGIC, len(header), check), header, bytes(start - _PREFIX.size - len(header)), *payload]
        total = start + sum(_aligned(f.numel()) for f in flat)
        final = self._entry(index)
        try:
            if not os.path.isdir(self._dir):  # cleared (`EpochCache.clear`) since it was bound: made again and
                self.hold(parents=False)  # held, but a removed cache folder is not: nothing is stored
            ledger = self._reserve(final, total) if total <= min(self.cache.max_bytes, MAX_ENTRY) else None
        except (OSError, PipelineError):  # a read-only or full folder, a ledger that cannot be opened: uncached
            ledger = None
        if ledger is None:
            counts["skipped"] += 1
            return
        temp = f"{self._dir}/.{index}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                _write_all(fd, parts)
            finally:
                os.close(fd)
            self._commit(temp, final, total, ledger)
        except OSError:  # a full /dev/shm, a removed folder: this sample is not cached
            with contextlib.suppress(OSError):
                os.unlink(temp)
            with contextlib.suppress(OSError):
                self._release(total, ledger)
            counts["skipped"] += 1
            return
        counts["stored"] += 1

    # -- the shared budget ----------------------------------------------------------------
    def _ledger_fd(self) -> int:
        """This process's descriptor on the key's ledger (a forked child opens its own: flock locks
        belong to an open file, which a fork shares), opened again once its file was removed."""
        pid = os.getpid()
        if self._ledger is not None and self._ledger[0] == pid and os.fstat(self._ledger[1]).st_nlink == 0:
            self._ledger = None  # its folder was cleared: the ledger there now is another file (the old
            # descriptor stays open: a thread worker may be using it, and a closed number is soon reused)
        if self._ledger is None or self._ledger[0] != pid:
            fd = os.open(self.folder / "ledger", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            self._ledger = (pid, owned(fd, self))
        return self._ledger[1]

    def _used(self, fd: int) -> int:
        """The bytes the ledger counts; a missing or damaged ledger is counted again from the entries."""
        raw = os.pread(fd, 9, 0)
        if len(raw) == 8:
            used = struct.unpack("<q", raw)[0]
            if 0 <= used <= 1 << 62:
                return used
        return self.entries_bytes()

    def entries_bytes(self) -> int:
        """The bytes of the entries in the key's folder (temporary files not counted)."""
        total = 0
        with os.scandir(self.folder) as it:
            for entry in it:
                if _ENTRY.match(entry.name):
                    with contextlib.suppress(OSError):
                        total += entry.stat(follow_symlinks=False).st_size
        return total

    @contextlib.contextmanager
    def _ledger_locked(self) -> Iterator[int]:
        """The ledger's descriptor, held under its exclusive lock."""
        fd = self._ledger_fd()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    @staticmethod
    def _set_used(fd: int, used: int) -> None:
        os.pwrite(fd, struct.pack("<q", max(0, used)), 0)

    def _reserve(self, final: str, nbytes: int) -> int | None:
        """Count ``nbytes`` for the entry ``final`` when the budget has room for it in place of what an
        entry there now takes: the ledger's inode (the ledger counted in); None when it has not. The
        replaced entry is uncounted by `_commit`."""
        with self._ledger_locked() as fd:
            return os.fstat(fd).st_ino if self._count_in(fd, final, nbytes) else None

    def _count_in(self, fd: int, final: str, nbytes: int) -> bool:
        """Under the ledger's lock: count ``nbytes`` for ``final`` where the budget has room (False where not)."""
        used = self._used(fd)
        if max(0, used - _size(final)) + nbytes > self.cache.max_bytes:
            return False
        self._set_used(fd, used + nbytes)
        return True

    def _commit(self, temp: str, final: str, nbytes: int, ledger: int) -> None:
        """Rename ``temp`` to ``final`` and uncount the entry it replaces, under the ledger's lock: two
        writers of one entry each uncount the one they replaced, never the same one twice. Where the
        folder was cleared and made again since ``nbytes`` were reserved in ``ledger``, they are counted
        in the new ledger first (OSError where its budget has no room: not stored)."""
        with self._ledger_locked() as fd:
            if os.fstat(fd).st_ino != ledger and not self._count_in(fd, final, nbytes):
                raise OSError(f"{final}: no room in the budget of a cache folder made again")
            old = _size(final)
            os.replace(temp, final)
            if old:
                self._set_used(fd, self._used(fd) - old)

    def _release(self, nbytes: int, ledger: int) -> None:
        """Uncount a reservation of ``nbytes`` in ``ledger``: not from a ledger made since (a cleared folder's)."""
        with self._ledger_locked() as fd:
            if os.fstat(fd).st_ino == ledger:
                self._set_used(fd, self._used(fd) - nbytes)

    def remove_stale_temps(self) -> None:
        """Remove the temporary files of writers that are gone (killed mid-write)."""
        with contextlib.suppress(OSError), os.scandir(self._dir) as it:  # no folder there (or not one): none
            for entry in it:
                m = _TEMP.match(entry.name)
                if m and not process_alive(int(m.group(2))):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


def _tensor(payload: bytearray, dtype: torch.dtype, shape: tuple[int, ...], offset: int, count: int) -> torch.Tensor:
    """A field's tensor over the entry's bytes (no copy)."""
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(payload, dtype=dtype, count=count, offset=offset).view(shape)


def memory_order(v: torch.Tensor) -> list[int]:
    """The dims of ``v`` from the outermost in memory to the innermost: stored as ``v.permute(order)``,
    a decoder's (C, H, W) view of an (H, W, C) buffer is written without a transposing copy and read
    back with its strides. By stride, a size-1 dim just inside the dim of its stride: every dense
    layout comes back with its strides, a size-1 dim's too (which torch reads to tell channels last).
    A dim of stride 0 (expanded) is outermost, as ``contiguous()`` lays it out: never channels last."""
    return sorted(range(v.ndim), key=lambda d: (v.stride(d) != 0, -v.stride(d), v.shape[d] == 1, d))


def _inverse(order: list[int]) -> list[int]:
    inverse = [0] * len(order)
    for at, dim in enumerate(order):
        inverse[dim] = at
    return inverse


def _size(path: str) -> int:
    """The size of the entry at ``path``; 0 when there is none."""
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _write_all(fd: int, parts: list[Any]) -> None:
    for part in parts:
        view = memoryview(part).cast("B")
        while view:
            view = view[os.write(fd, view):]
