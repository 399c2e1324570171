"""The converted dataset format: WebDataset tar shards, DALI index files, a manifest.

    out/
      manifest.json       format version, fields, label names, per-shard counts, sizes, sha256, and
                          the types of the targets (boxes, labels, masks) samples carry, if any
      samples.jsonl.gz    one JSON object per sample: key, shard, label and media metadata
      shard-000000.tar    <key>.<ext> members, grouped by key (the WebDataset layout); <key>.json holds
                          the sample's record and its "targets" (boxes as lists, masks as RLE)
      shard-000000.idx    DALI's webdataset index ("v1.2 N", then "ext offset size name"... per sample)
      shard-000000.sha256 each member's sha256 ("<hex>  <member name>" per line, in tar order), so
                          `mediapipe verify` names the damaged member of a shard whose sha256 differs

Everything written here is deterministic (no timestamps, owners or random ids), so two
conversions with the same inputs and settings give byte-identical files. Files are
written under a temporary name, fsynced and renamed, so a reader never sees half a file.

Nothing read back is trusted: every file named by the manifest must lie inside the
dataset's folder once links are resolved and be a regular file; every field of the
manifest and of each sample record is type-checked; each file's size is bounded before
it is read (the records in proportion to the manifest's sample count); an index's
members must be sorted, disjoint and inside their shard. Errors are `SourceError`s that
name the file (and line), the field and the value.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import os
import re
import reprlib
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from mediapipe.errors import SourceError

FORMAT_NAME = "mediapipe-shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl.gz"
REPORT = "report.json"
PARTS = ".parts"  # per-shard sample records of committed shards, until the dataset is complete
INDEX_VERSION = "v1.2"
BLOCK = 512
MAX_KEY_CHARS = 80  # "<key>.<ext>" must fit a 100-byte USTAR name field
_UNSAFE_KEY_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
META_EXTENSIONS = ("cls", "json")  # members that are not media


def shard_name(index: int) -> str:
    return f"shard-{index:06d}.tar"


def index_name(index: int) -> str:
    return f"shard-{index:06d}.idx"


def digests_name(index: int) -> str:
    return f"shard-{index:06d}.sha256"


# -- keys and member names ---------------------------------------------------------------
def safe_key(text: str) -> str:
    """A WebDataset key from a relative path: no separators, no dots (the key ends at the
    first dot for both DALI and webdataset), its last MAX_KEY_CHARS characters at most."""
    stem = text.rsplit(".", 1)[0] if "." in os.path.basename(text) else text
    key = _UNSAFE_KEY_CHARS.sub("_", stem).strip("_") or "sample"
    return key[-MAX_KEY_CHARS:].lstrip("_-") or key[-MAX_KEY_CHARS:]  # the end of a path tells files apart


def unique_keys(texts: Iterable[str]) -> list[str]:
    """`safe_key` of each text, with "_2", "_3"... appended to repeats, in input order."""
    seen: dict[str, int] = {}
    keys, taken = [], set()
    for text in texts:
        base = safe_key(text)
        key, n = base, seen.get(base, 1)
        while key in taken:
            n += 1
            key = f"{base[: MAX_KEY_CHARS - len(str(n)) - 1]}_{n}"
        seen[base] = n
        taken.add(key)
        keys.append(key)
    return keys


def check_member_name(name: str, *, where: str) -> None:
    """Refuse a member name that could escape a folder if extracted: absolute paths,
    ".." components, backslashes, NUL bytes and empty names. ``where`` names the shard."""
    if name and name != ".." and "/" not in name and "\\" not in name and "\0" not in name and name[1:2] != ":":
        return  # a plain file name, the common case: nothing to split
    parts = name.replace("\\", "/").split("/")
    if not name or name.startswith("/") or "\\" in name or "\0" in name or ".." in parts or (
        len(name) > 1 and name[1] == ":"
    ):
        raise SourceError(where, f"unsafe member name {name!r}")


def split_member_name(name: str) -> tuple[str, str]:
    """(key, extension) as DALI and webdataset split it: at the first dot of the base name."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1 :]


# -- atomic files -----------------------------------------------------------------------
def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename in ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial")


def write_error(err: OSError, path: str | os.PathLike) -> OSError:
    """``err`` naming the file being written: a failed write or fsync (ENOSPC, EIO) names none."""
    return OSError(err.errno, err.strerror or str(err), str(path))


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a fsynced temporary file and a rename."""
    path = Path(path)
    tmp = temp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        if err.filename is not None:  # (open's errors name the file)
            raise
        raise write_error(err, tmp) from err
    os.replace(tmp, path)
    fsync_dir(path.parent)


def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


def gzip_bytes(data: bytes) -> bytes:
    """gzip with no timestamp and no file name, so equal data gives equal bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as f:
        f.write(data)
    return buf.getvalue()


# -- writing a shard ----------------------------------------------------------------------
class Member(NamedTuple):
    """One tar member of a shard: its name, where its data starts, its size. (A tuple: an
    index of a million members is built in a fraction of a dataclass's time.)"""

    name: str
    offset: int
    size: int

    @property
    def extension(self) -> str:
        return split_member_name(self.name)[1]


def member_header(name: str, size: int) -> bytes:
    """A USTAR header with fixed owner, mode and time, so shards are reproducible."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.type = size, 0, 0o644, tarfile.REGTYPE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")


class ShardWriter:
    """Writes one shard: the tar under a temporary name, then `commit` writes its DALI index
    and member digests and fsyncs and renames the tar into place. Returns the shard's files,
    count, size and sha256."""

    def __init__(self, directory: str | os.PathLike, index: int) -> None:
        self.directory, self.index = Path(directory), index
        self.path = self.directory / shard_name(index)
        self.tmp = temp_name(self.path)
        self._file = open(self.tmp, "wb")
        self._hash = hashlib.sha256()
        self._offset = 0
        self.samples: list[list[Member]] = []
        self._digests: list[str] = []  # "<sha256>  <member name>" lines

    def _write(self, data: bytes) -> None:
        try:
            self._file.write(data)
        except OSError as err:
            raise write_error(err, self.tmp) from err
        self._hash.update(data)
        self._offset += len(data)

    def add(self, key: str, members: dict[str, bytes]) -> None:
        """Add one sample: ``members`` maps an extension to the member's bytes, in order."""
        check_member_name(key, where=str(self.path))
        if "/" in key or "." in key:
            raise ValueError(f"key {key!r} must not contain '/' or '.'")
        entries = []
        for ext, data in members.items():
            name = f"{key}.{ext}"
            self._write(member_header(name, len(data)))
            entries.append(Member(name, self._offset, len(data)))
            self._write(data)
            self._digests.append(f"{hashlib.sha256(data).hexdigest()}  {name}\n")
            if len(data) % BLOCK:
                self._write(b"\0" * (BLOCK - len(data) % BLOCK))
        self.samples.append(entries)

    def commit(self) -> dict[str, Any]:
        self._write(b"\0" * (2 * BLOCK))  # end-of-archive marker
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as err:
            raise write_error(err, self.tmp) from err
        write_atomic(self.directory / index_name(self.index), index_text(self.samples).encode())
        write_atomic(self.directory / digests_name(self.index), "".join(self._digests).encode())
        os.replace(self.tmp, self.path)
        fsync_dir(self.directory)
        return {"name": self.path.name, "index": index_name(self.index), "digests": digests_name(self.index),
                "samples": len(self.samples), "bytes": self._offset, "sha256": self._hash.hexdigest()}

    def abort(self) -> None:
        try:
            if not self._file.closed:
                self._file.close()
        except OSError:  # the write that failed left data it cannot flush either (a full disk)
            pass
        self.tmp.unlink(missing_ok=True)


# -- DALI's index format ------------------------------------------------------------------
def index_text(samples: list[list[Member]]) -> str:
    """DALI's webdataset index (as its ``wds2idx`` writes it): "v1.2 <samples>", then per
    sample the "<ext> <data offset> <size> <member name>" of each of its members."""
    lines = [f"{INDEX_VERSION} {len(samples)}"]
    for members in samples:
        lines.append(" ".join(f"{m.extension} {m.offset} {m.size} {m.name}" for m in members))
    return "\n".join(lines) + "\n"


def read_index(path: str | os.PathLike, *, shard_size: int | None = None,
               samples: int | None = None) -> list[list[Member]]:
    """Parse a DALI index (v1.2) and check every entry: safe names, one sample's members per
    line (one key, each extension once, the extension its name has), block-aligned
    offsets, members sorted and disjoint (headers included), data inside the shard when
    its size is given, and ``samples`` samples when the manifest gives a count. The file
    itself is refused before it is read when it is larger than such an index can be.
    ``path`` is a real path (see `resolve_shards`): a link in its place is refused."""
    limit = index_limit(shard_size)
    return parse_index(read_bounded(path, limit, "index"), str(path), shard_size=shard_size, samples=samples)


def index_limit(shard_size: int | None) -> int:
    """The most bytes a shard's index can need: refused before it is read when larger."""
    return INDEX_FLOOR_BYTES + (shard_size if shard_size is not None else MAX_MANIFEST_BYTES)


def parse_index(data: bytes, where: str, *, shard_size: int | None = None,
                samples: int | None = None) -> list[list[Member]]:
    """`read_index`'s checks on an index's bytes (read from a file or a remote store)."""
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise SourceError(where, f"cannot read index: {err}") from err
    head = lines[0].split()
    if len(head) != 2 or head[0] != INDEX_VERSION or not (head[1].isascii() and head[1].isdigit()) or len(head[1]) > 20:
        raise SourceError(where, f"not a DALI webdataset index v1.2 (first line {_show.repr(lines[0])})")
    announced = int(head[1])
    if samples is not None and announced != samples:
        raise SourceError(where, f"index announces {announced} samples, the manifest says {samples}")
    found: list[list[Member]] = []
    end = 0  # where the previous member's data ends, padded to a block
    file_end = MAX_SIZE if shard_size is None else shard_size
    for lineno, line in enumerate(lines[1:], 2):
        tokens = line.split()
        if not tokens:
            continue
        at = f"{where}:{lineno}"
        if len(found) == announced:
            raise SourceError(at, f"more samples than the {announced} the index announces")
        if len(tokens) % 4:
            raise SourceError(at, f"expected groups of 4 fields, got {len(tokens)}")
        members: list[Member] = []
        extensions: list[str] = []
        fields = iter(tokens)
        for ext, offset_text, size_text, name in zip(fields, fields, fields, fields):
            try:
                if not (offset_text + size_text).isascii() or not offset_text.isdigit() or not size_text.isdigit():
                    raise ValueError("offset and size must be decimal numbers")
                offset, size = int(offset_text), int(size_text)  # (more than 4300 digits: ValueError)
            except ValueError as err:
                raise SourceError(at, f"bad index entry {f'{ext} {offset_text} {size_text} {name}'!r}: {err}") from err
            check_member_name(name, where=at)
            if not extensions:
                sample, extension = split_member_name(name)
            if name != f"{sample}.{ext}" or not sample:  # "<key>.<ext>", the key of the line's first member
                if split_member_name(name)[0] != sample:
                    raise SourceError(at, f"member {name!r} does not belong to sample {sample!r}: "
                                      "a line lists the members of one sample")
                raise SourceError(at, f"member {name!r} is listed with extension {ext!r}")
            if ext in extensions:
                raise SourceError(at, f"sample {sample!r} lists a {ext!r} member twice")
            extensions.append(ext)
            if offset % BLOCK or offset < BLOCK:
                raise SourceError(at, f"bad member {name!r}: offset {offset}, size {size}")
            if offset + size > file_end:
                raise SourceError(at, f"member {name!r} at offset {offset} with {size} bytes "
                                  f"runs past the end of the shard ({shard_size} bytes): truncated shard")
            if offset - BLOCK < end:
                raise SourceError(at, f"member {name!r} (its header at offset {offset - BLOCK}) overlaps the "
                                  f"member before it, which ends at {end}: an index lists each member once, in order")
            end = offset + -(-size // BLOCK) * BLOCK
            members.append(Member(name, offset, size))
        found.append(members)
    if len(found) != announced:
        raise SourceError(where, f"index announces {announced} samples but lists {len(found)}")
    return found


def check_header(header: bytes, member: Member, *, where: str) -> None:
    """Check the tar header in front of a member's data: checksum, type, name and size."""
    if _plain_header_matches(header, member):
        return  # the common case, checked without building a TarInfo (a few microseconds)
    try:
        info = tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape")
    except tarfile.HeaderError as err:
        raise SourceError(where, f"bad tar header at offset {member.offset - BLOCK}: {err}") from err
    if not info.isreg():
        raise SourceError(where, f"member {info.name!r} at offset {member.offset - BLOCK} is a "
                          f"{'link' if info.issym() or info.islnk() else 'non-file'} entry")
    if info.size != member.size or info.name != member.name:
        raise SourceError(where, f"tar header at offset {member.offset - BLOCK} says {info.name!r} with "
                          f"{info.size} bytes; the index says {member.name!r} with {member.size}")


def _plain_header_matches(header: bytes, member: Member) -> bool:
    """A regular file's USTAR header with this name (no prefix), this size and a valid checksum."""
    if len(header) != BLOCK or header[156:157] not in (b"0", b"\0"):
        return False
    name = member.name.encode()
    if len(name) >= 100 or header[:100].rstrip(b"\0") != name or header[345:346] != b"\0":
        return False
    try:
        size = int(header[124:136].strip(b"\0 ") or b"0", 8)
        checksum = int(header[148:156].strip(b"\0 ") or b"-1", 8)
    except ValueError:
        return False
    return size == member.size and checksum == sum(header[:148]) + 256 + sum(header[156:])


# -- scanning a tar (verify, and shards without an index) ---------------------------------
def scan_tar(path: str | os.PathLike) -> Iterator[Member]:
    """Walk a tar's USTAR headers without extracting anything; yield its regular members.

    Raises `SourceError` naming the shard and the offset for a link, an unsafe name,
    a bad header, a negative size, a member that runs past the end of the file, or a
    pax/GNU extended header (a shard holds plain USTAR members; an extended header's
    size is what tarfile would allocate, so it is never followed).
    """
    where = str(path)
    fd, st = open_regular(path, "shard")
    try:
        offset = 0
        while block := os.pread(fd, BLOCK, offset):
            if len(block) < BLOCK:
                raise SourceError(where, f"the file ends inside the tar header at offset {offset}: truncated shard")
            if block == bytes(BLOCK):
                return  # the end-of-archive marker
            try:
                info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
            except tarfile.HeaderError as err:
                raise SourceError(where, f"bad tar header at offset {offset}: {err}") from err
            if info.type in _EXTENDED_TYPES:
                raise SourceError(where, f"extended (pax or GNU) header at offset {offset}: a shard holds "
                                  "plain USTAR members")
            if info.size < 0:
                raise SourceError(where, f"member {info.name!r} at offset {offset} has size {info.size}")
            data = offset + BLOCK
            offset = data + -(-info.size // BLOCK) * BLOCK
            if info.isdir():
                continue
            check_member_name(info.name, where=f"{where} at offset {data - BLOCK}")
            if not info.isreg():
                kind = "symlink" if info.issym() else "hard link" if info.islnk() else "special file"
                raise SourceError(where, f"member {info.name!r} at offset {data - BLOCK} is a {kind}")
            if data + info.size > st.st_size:
                raise SourceError(where, f"member {info.name!r} at offset {data} needs {info.size} bytes; "
                                  f"the file ends at {st.st_size}: truncated shard")
            yield Member(info.name, data, info.size)
    finally:
        os.close(fd)


_EXTENDED_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                   tarfile.GNUTYPE_LONGLINK)


def group_members(members: Iterable[Member]) -> list[list[Member]]:
    """Consecutive members with the same key form one sample (as DALI and webdataset group)."""
    samples: list[list[Member]] = []
    last = None
    for m in members:
        key, _ = split_member_name(m.name)
        if key != last:
            samples.append([])
            last = key
        samples[-1].append(m)
    return samples


_DIGEST_LINE = re.compile(r"([0-9a-f]{64})  ([^\n]+)")
DIGEST_LINE_BYTES = 64 + 2 + 255 + 1  # "<sha256>  <member name>\n": a name fits USTAR's 255 bytes


def read_digests(path: str | os.PathLike, members: list[Member], *, where: str) -> dict[str, str]:
    """The sha256 of each of ``members`` (a shard's, in tar order) from its digests file,
    refused unless it lists exactly those members in that order (``where`` names the file)."""
    data = read_bounded(path, len(members) * DIGEST_LINE_BYTES, "member digests")
    lines = data.decode("utf-8", "replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    if len(lines) != len(members):
        raise SourceError(where, f"{len(lines)} member digests, the shard has {len(members)} members")
    digests = {}
    for number, (line, member) in enumerate(zip(lines, members), 1):
        match = _DIGEST_LINE.fullmatch(line)
        if match is None or match.group(2) != member.name:
            raise SourceError(f"{where}:{number}", f"expected '<sha256>  {member.name}', got {_show.repr(line)}")
        digests[member.name] = match.group(1)
    return digests


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# -- reading what a dataset says: bounded, type-checked, confined --------------------------
MAX_MANIFEST_BYTES = 64 << 20
MAX_RECORD_BYTES = 1 << 20  # one line of samples.jsonl.gz: a long video's key frames fit
SAMPLES_FLOOR_BYTES = 64 << 20  # samples.jsonl.gz inflates to at most this...
SAMPLES_BYTES_PER_RECORD = 16 << 10  # ...plus this per sample the manifest announces
INDEX_FLOOR_BYTES = 64 << 10  # an index is at most this plus its shard's size (a member takes >= 512 bytes)
MAX_SIZE = (1 << 63) - 1  # sizes, offsets and counts: what an off_t holds

_show = reprlib.Repr()  # values in messages: short, whatever a hostile file holds
_show.maxstring = _show.maxother = 60
_show.maxlong, _show.maxlist, _show.maxdict, _show.maxlevel = 40, 6, 4, 3


def show(value: object) -> str:
    """A value read from a file, as an error message quotes it: cut short, whatever it holds."""
    return _show.repr(value)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


_JSON = json.JSONDecoder(parse_constant=_no_constant)  # strict JSON: no NaN or Infinity


def parse_json(text: str | bytes, where: str, line: int | None = None) -> Any:
    """Strict JSON (no NaN, Infinity, or ints past Python's digit limit), or a `SourceError`
    naming ``where`` (and ``line``). One value, decoded by json's own C scanner."""
    try:
        text = (text.decode("utf-8") if isinstance(text, bytes) else text).strip()
        value, end = _JSON.scan_once(text, 0)
        if end != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
        return value
    except StopIteration as stop:  # no value where one must start
        reason = f"invalid JSON: expecting a value at character {stop.value}"
    except RecursionError:
        reason = "invalid JSON: nested too deeply"
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, NaN, the int digit limit
        reason = f"invalid JSON: {err}"
    raise SourceError(where if line is None else f"{where}:{line}", reason)


def open_regular(path: str | os.PathLike, what: str) -> tuple[int, os.stat_result]:
    """A descriptor on ``path`` (a real path: a link in its place now is refused) and its
    stat, refusing anything but a regular file (reading a FIFO or a device would block or
    never end)."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise SourceError(str(path), f"cannot open {what}: {err.strerror or err}") from err
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise SourceError(str(path), f"{what} is not a regular file")
    return fd, st


def stat_regular(path: str | os.PathLike, what: str) -> os.stat_result:
    """The stat of a regular file at a real path (a link in its place now is refused)."""
    try:
        st = os.lstat(path)
    except OSError as err:
        raise SourceError(str(path), f"{what}: {err.strerror or err}") from err
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(str(path), f"{what} is not a regular file")
    return st


def read_bounded(path: str | os.PathLike, limit: int, what: str) -> bytes:
    """A small file's bytes, refused before anything is read when it holds more than ``limit``."""
    fd, st = open_regular(path, what)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > limit:
            raise SourceError(str(path), f"{what} has {st.st_size} bytes, more than the {limit} it can need")
        data = f.read(st.st_size + 1)  # (a read of n bytes allocates n first)
    if len(data) != st.st_size:
        raise SourceError(str(path), f"{what} changed size while it was read")
    return data


def dataset_path(folder: str, name: object, *, where: str, field: str) -> str:
    """The real path of a file a dataset names, refused unless it lies inside the dataset's
    folder once every link is resolved (``folder`` is itself a real path)."""
    if type(name) is not str or not name or "\0" in name:
        raise SourceError(where, f"{field}: expected a file name, got {_show.repr(name)}")
    if os.path.isabs(name):
        raise SourceError(where, f"{field}: {name!r} is an absolute path, outside the dataset folder {folder}")
    real = os.path.realpath(os.path.join(folder, name))
    if real == folder or os.path.commonpath([folder, real]) != folder:
        raise SourceError(where, f"{field}: {name!r} resolves to {real}, outside the dataset folder {folder}")
    return real


# the JSON fields of the manifest, of its shard entries and of the sample records
def _count(v: Any) -> bool:
    return type(v) is int and 0 <= v <= MAX_SIZE


def is_finite_number(v: Any) -> bool:
    """An int in off_t's range or a finite float: what a field may hold (bools are not numbers)."""
    return (type(v) is int and -MAX_SIZE <= v <= MAX_SIZE) or (type(v) is float and math.isfinite(v))


def _nonnegative(v: Any) -> bool:
    return is_finite_number(v) and v >= 0


def _texts(v: Any) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


def _counts(v: Any) -> bool:
    return type(v) is list and all(type(x) is int and 0 <= x <= MAX_SIZE for x in v)


def _or_null(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_SAMPLE_KEY = re.compile(r"[^/\\.\0]{1,255}")


def _label(v: Any) -> bool:
    return v is None or (type(v) is int and -MAX_SIZE <= v <= MAX_SIZE)


@dataclass(frozen=True)
class _Field:
    check: Callable[[Any], bool] | type  # a type: exactly that type (a bool is no int); else a predicate
    expected: str
    required: bool = False


class _Schema:
    """Fields by name, split by how they are checked (exact types, counts in 0..MAX_SIZE,
    predicates), so that checking each of a million records stays cheap."""

    def __init__(self, fields: dict[str, _Field]) -> None:
        self.fields = fields
        self.exact = {n: f.check for n, f in fields.items() if isinstance(f.check, type)}
        self.counts = frozenset(n for n, f in fields.items() if f.check is _count)
        self.predicates = {n: f.check for n, f in fields.items() if n not in self.exact and n not in self.counts}
        self.required = frozenset(n for n, f in fields.items() if f.required)

    def problem(self, obj: Any, what: str, field: Callable[[str], str]) -> str | None:
        """What is wrong with ``obj`` (the first thing found), or None."""
        if type(obj) is not dict:
            return f"{what} must be a JSON object, got {_show.repr(obj)}"
        exact, counts, predicates = self.exact, self.counts, self.predicates
        for name, value in obj.items():
            want = exact.get(name)
            if want is not None:
                if type(value) is want:
                    continue
            elif name in counts:
                if type(value) is int and 0 <= value <= MAX_SIZE:
                    continue
            elif name not in predicates or predicates[name](value):
                continue
            return f"{field(name)}: expected {self.fields[name].expected}, got {_show.repr(value)}"
        if not self.required <= obj.keys():
            return f"{field(next(n for n in self.fields if n in self.required and n not in obj))}: missing"
        return None


_COUNT = _Field(_count, "an int >= 0")
_TEXT = _Field(str, "a string")
_FILE = _Field(_or_null(lambda v: type(v) is str and v != "" and "\0" not in v), "a file name or null", True)
MANIFEST_SCHEMA = _Schema({
    "format": _Field(str, "a string", True), "version": _Field(_count, "an int >= 0", True),
    "complete": _Field(bool, "true or false", True),
    "shards": _Field(list, "a list", True),
    "num_samples": _COUNT, "num_failures": _COUNT, "bytes": _COUNT,  # num_samples: required once complete
    "classes": _Field(_or_null(_texts), "a list of strings or null"), "fields": _Field(_texts, "a list of strings"),
    "plan": _Field(dict, "an object"), "source": _TEXT,
    "field_types": _Field(dict, "an object"),  # the targets in each sample's .json member (boxes, labels...)
})
SHARD_SCHEMA = _Schema({
    "shard": _Field(_count, "an int >= 0", True), "name": _FILE, "idx": _FILE,
    "digests": _Field(_FILE.check, _FILE.expected),  # member digests; datasets converted before them have none
    "samples": _Field(_count, "an int >= 0", True), "bytes": _Field(_count, "an int >= 0", True),
    "sha256": _Field(_or_null(lambda v: type(v) is str and _HEX_DIGEST.fullmatch(v) is not None),
                     "a sha256 hex digest or null", True),
})
RECORD_SCHEMA = _Schema({
    "key": _Field(lambda v: type(v) is str and _SAMPLE_KEY.fullmatch(v) is not None,
                  "a sample key (1-255 characters, no '/', '.' or NUL)", True),
    "shard": _Field(_count, "an int >= 0", True),
    "label": _Field(_label, "an int or null"),
    **dict.fromkeys(("width", "height", "frames", "sample_rate", "num_samples", "channels", "bytes"), _COUNT),
    **dict.fromkeys(("duration", "fps"), _Field(_nonnegative, "a finite number >= 0")),
    "keyframes": _Field(_counts, "a list of ints >= 0"),
    **dict.fromkeys(("codec", "audio_codec", "kind", "ext", "source"), _TEXT),
    "copied": _Field(bool, "true or false"),
    "fields": _Field(lambda v: type(v) is dict and all(is_finite_number(x) or type(x) is str for x in v.values()),
                     "numbers or text by name"),
})


def check_fields(obj: Any, schema: _Schema, *, where: str, what: str, field: Callable[[str], str],
                 line: int | None = None) -> None:
    """Refuse ``obj`` unless it is a JSON object whose fields have the schema's types and
    which holds the required ones; ``field`` names a field in messages, ``where`` (and
    ``line``) the file. Unknown fields are left alone (a later writer may add some)."""
    problem = schema.problem(obj, what, field)
    if problem is not None:
        raise SourceError(where if line is None else f"{where}:{line}", problem)


# -- manifest and sample records ----------------------------------------------------------
def read_manifest(root: str | os.PathLike) -> dict[str, Any]:
    """The manifest, refused unless every field has its type, the format and version are
    known, shard numbers are distinct and a complete manifest's counts agree."""
    path = Path(root) / MANIFEST
    where = str(path)
    if not os.path.lexists(path):
        raise SourceError(where, "no manifest.json: not a converted dataset")
    real = dataset_path(os.path.realpath(root), MANIFEST, where=where, field="manifest.json")
    return parse_manifest(read_bounded(real, MAX_MANIFEST_BYTES, "manifest"), where)


def parse_manifest(data: bytes, where: str) -> dict[str, Any]:
    """`read_manifest`'s checks on a manifest's bytes (read from a file or a remote store)."""
    manifest = parse_json(data, where)
    check_fields(manifest, MANIFEST_SCHEMA, where=where, what="the manifest", field=str)
    if manifest["format"] != FORMAT_NAME:
        raise SourceError(where, f"format {_show.repr(manifest['format'])}, expected {FORMAT_NAME!r}")
    if manifest["version"] > FORMAT_VERSION:
        raise SourceError(where, f"format version {manifest['version']} is newer than {FORMAT_VERSION}")
    if manifest["complete"] and "num_samples" not in manifest:
        raise SourceError(where, "num_samples: missing from a complete manifest")
    seen: dict[int, int] = {}
    for i, entry in enumerate(manifest["shards"]):
        prefix = f"shards[{i}]."
        check_fields(entry, SHARD_SCHEMA, where=where, what=f"shards[{i}]", field=lambda name, p=prefix: p + name)
        if entry["shard"] in seen:
            raise SourceError(where, f"{prefix}shard: shard {entry['shard']} is listed twice "
                              f"(also shards[{seen[entry['shard']]}])")
        seen[entry["shard"]] = i
        for name in ("name", "idx", "sha256"):
            if (entry[name] is None) == (entry["samples"] > 0):
                raise SourceError(where, f"{prefix}{name}: {_show.repr(entry[name])} for a shard of "
                                  f"{entry['samples']} samples")
        if entry["samples"] * BLOCK > entry["bytes"]:  # each sample takes a 512-byte header at least
            raise SourceError(where, f"{prefix}samples: {entry['samples']} samples cannot fit in "
                              f"{entry['bytes']} bytes")
    if manifest["complete"]:
        held = sum(e["samples"] for e in manifest["shards"])
        if held != manifest["num_samples"]:
            raise SourceError(where, f"num_samples: {manifest['num_samples']}, but the shards hold {held}")
    return manifest


@dataclass(frozen=True)
class ShardFiles:
    """Where one shard's tar, index and member digests are: real paths inside the dataset folder."""

    shard: int
    name: str  # as the manifest writes it, for messages
    tar: str
    idx: str
    digests: str | None = None  # None: a dataset converted before member digests were written


def resolve_shards(root: str | os.PathLike, manifest: dict[str, Any],
                   problems: list[SourceError] | None = None) -> dict[int, ShardFiles]:
    """The files of every shard that holds samples, each confined to the dataset folder and
    none shared by two entries. A refused entry raises, or with ``problems`` is appended
    there and left out."""
    folder = os.path.realpath(root)
    where = str(Path(root) / MANIFEST)
    found: dict[int, ShardFiles] = {}
    owners: dict[str, str] = {}
    for i, entry in enumerate(manifest["shards"]):
        if not entry["samples"]:
            continue
        try:
            real = {"digests": None}
            for field in ("name", "idx", "digests"):
                if field == "digests" and entry.get(field) is None:
                    continue
                label = f"shards[{i}].{field}"
                real[field] = dataset_path(folder, entry[field], where=where, field=label)
                if real[field] in owners:
                    raise SourceError(where, f"{label}: {entry[field]!r} is the same file as {owners[real[field]]}")
                owners[real[field]] = label
        except SourceError as err:
            if problems is None:
                raise
            problems.append(err)
            continue
        found[entry["shard"]] = ShardFiles(entry["shard"], entry["name"], real["name"], real["idx"], real["digests"])
    return found


def check_sample_count(root: str | os.PathLike, manifest: dict[str, Any]) -> None:
    """Refuse a manifest whose ``num_samples`` the shard files on disk cannot hold (each sample
    takes a 512-byte tar header at least), before its sample records are read: they are bounded
    in proportion to that count, and a count the manifest made up would let a small gzip take any
    memory. (The loader checks each shard's size against the manifest instead.)"""
    claimed = manifest.get("num_samples")
    if claimed is None:
        return
    size = 0
    for files in resolve_shards(root, manifest, problems=[]).values():  # (unsafe entries count nothing)
        try:
            size += stat_regular(files.tar, "shard").st_size
        except SourceError:
            continue
    if claimed * BLOCK > size:
        raise SourceError(str(Path(root) / MANIFEST), f"num_samples: {claimed} samples cannot fit in the {size} "
                          f"bytes of the shard files on disk (at most {size // BLOCK}); the sample records "
                          "are not read")


def write_manifest(root: str | os.PathLike, manifest: dict[str, Any]) -> None:
    write_atomic(Path(root) / MANIFEST, json_bytes(manifest))


def samples_bytes(records: Iterable[dict[str, Any]]) -> bytes:
    text = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records)
    return gzip_bytes(text.encode())


def read_samples(root: str | os.PathLike, num_samples: int | None = None) -> list[dict[str, Any]]:
    """The sample records, one per line, each type-checked; exactly ``num_samples`` of them
    (default: the manifest's count). The gzip is inflated as it is read, and refused at
    the first line longer than MAX_RECORD_BYTES, the first record past the count, or once
    it inflates past SAMPLES_FLOOR_BYTES + SAMPLES_BYTES_PER_RECORD per sample: a small
    file that inflates to gigabytes costs no more memory than an honest one."""
    path = Path(root) / SAMPLES
    where = str(path)
    if num_samples is None:
        num_samples = read_manifest(root).get("num_samples")
    real = dataset_path(os.path.realpath(root), SAMPLES, where=where, field=SAMPLES)
    fd, _ = open_regular(real, "sample records")
    with os.fdopen(fd, "rb") as raw:
        return parse_samples(raw, where, num_samples)


def samples_limit(num_samples: int | None) -> int:
    """The most bytes the sample records of ``num_samples`` samples may inflate to."""
    return SAMPLES_FLOOR_BYTES + SAMPLES_BYTES_PER_RECORD * (num_samples or 0)


def parse_samples(raw: io.BufferedIOBase | BinaryIO, where: str, num_samples: int | None) -> list[dict[str, Any]]:
    """`read_samples`'s checks on a gzip stream of sample records (a file or downloaded bytes)."""
    limit = samples_limit(num_samples)
    expected = MAX_SIZE if num_samples is None else num_samples
    records: list[dict[str, Any]] = []
    try:
        with gzip.GzipFile(fileobj=raw, mode="rb") as f:
            for lineno, line in enumerate(_bounded_lines(f, where, limit, f"{num_samples} samples"), 1):
                if lineno > expected:
                    raise SourceError(f"{where}:{lineno}", f"more records than the manifest's num_samples "
                                      f"({num_samples})")
                record = parse_json(line, where, lineno)
                check_fields(record, RECORD_SCHEMA, where=where, what="a sample record", field=_quoted_field,
                             line=lineno)
                records.append(record)
    except SourceError:
        raise
    except (OSError, EOFError, zlib.error) as err:
        raise SourceError(where, f"unreadable sample records: {err}") from err
    if num_samples is not None and len(records) != num_samples:
        raise SourceError(where, f"{len(records)} sample records, the manifest's num_samples is {num_samples}")
    return records


def _bounded_lines(f: io.BufferedIOBase, where: str, limit: int, needs: str) -> Iterator[bytes]:
    """The lines of a stream (inflated 1 MiB at a time), refused at the first longer than
    MAX_RECORD_BYTES or once the stream passes ``limit`` bytes (what ``needs`` may need):
    memory stays bounded whatever the stream inflates to."""
    pending, inflated, lineno = b"", 0, 0
    while chunk := f.read(1 << 20):
        inflated += len(chunk)
        if inflated > limit:
            raise SourceError(f"{where}:{lineno + 1}", f"records inflate to more than the {limit} bytes that "
                              f"{needs} may need")
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            lineno += 1
            if len(line) >= MAX_RECORD_BYTES:
                raise SourceError(f"{where}:{lineno}", f"line longer than {MAX_RECORD_BYTES} bytes")
            yield line
        if len(pending) >= MAX_RECORD_BYTES:  # the next line, unfinished already
            raise SourceError(f"{where}:{lineno + 1}", f"line longer than {MAX_RECORD_BYTES} bytes")
    if pending:
        yield pending


def _quoted_field(name: str) -> str:
    return f"field {name!r}"


def match_records(records: list[dict[str, Any]], indices: dict[int, list[list[Member]]],
                  with_samples: set[int], *, where: str) -> list[tuple[dict[str, Any], list[Member]]]:
    """Pair each record of the shards in ``indices`` with its index entry, in order. Refuses
    a record of a shard the manifest does not list with samples (``with_samples``), a
    record whose key is not the index entry's, and counts that differ."""
    position = dict.fromkeys(indices, 0)
    pairs = []
    for line, record in enumerate(records, 1):
        sid = record["shard"]
        members = indices.get(sid)
        if members is None:
            if sid not in with_samples:
                raise SourceError(f"{where}:{line}", f"a record of shard {sid}, which is not in the manifest's shards")
            continue
        n = position[sid]
        if n == len(members):
            raise SourceError(f"{where}:{line}", f"more records of shard {sid} than its index lists ({n})")
        if not members[n][0].name.startswith(f"{record['key']}."):  # (a key holds no '.', a name is "<key>.<ext>")
            raise SourceError(f"{where}:{line}", f"key {record['key']!r}, but the index of shard {sid} lists "
                              f"{members[n][0].name!r} there")
        position[sid] = n + 1
        pairs.append((record, members[n]))
    for sid, n in position.items():
        if n != len(indices[sid]):
            raise SourceError(where, f"{n} records of shard {sid}, its index lists {len(indices[sid])}")
    return pairs
