"""The converted dataset format: WebDataset tar shards, DALI index files, a manifest.

    out/
      manifest.json       format version, fields, label names, per-shard counts, sizes, sha256
      samples.jsonl.gz    one JSON object per sample: key, shard, label and media metadata
      shard-000000.tar    <key>.<ext> members, grouped by key (the WebDataset layout)
      shard-000000.idx    DALI's webdataset index ("v1.2 N", then "ext offset size name"... per sample)

Everything written here is deterministic (no timestamps, owners or random ids), so two
conversions with the same inputs and settings give byte-identical files. Files are
written under a temporary name, fsynced and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a fsynced temporary file and a rename."""
    path = Path(path)
    tmp = temp_name(path)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
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
@dataclass(frozen=True)
class Member:
    """One tar member of a shard: its name, where its data starts, its size."""

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
    """Writes one shard: the tar under a temporary name, then `commit` fsyncs and renames
    the tar and its DALI index into place. Returns the shard's manifest entry."""

    def __init__(self, directory: str | os.PathLike, index: int) -> None:
        self.directory, self.index = Path(directory), index
        self.path = self.directory / shard_name(index)
        self.tmp = temp_name(self.path)
        self._file = open(self.tmp, "wb")
        self._hash = hashlib.sha256()
        self._offset = 0
        self.samples: list[list[Member]] = []

    def _write(self, data: bytes) -> None:
        self._file.write(data)
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
            if len(data) % BLOCK:
                self._write(b"\0" * (BLOCK - len(data) % BLOCK))
        self.samples.append(entries)

    def commit(self) -> dict[str, Any]:
        self._write(b"\0" * (2 * BLOCK))  # end-of-archive marker
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        write_atomic(self.directory / index_name(self.index), index_text(self.samples).encode())
        os.replace(self.tmp, self.path)
        fsync_dir(self.directory)
        return {"name": self.path.name, "index": index_name(self.index), "samples": len(self.samples),
                "bytes": self._offset, "sha256": self._hash.hexdigest()}

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        self.tmp.unlink(missing_ok=True)


# -- DALI's index format ------------------------------------------------------------------
def index_text(samples: list[list[Member]]) -> str:
    """DALI's webdataset index (as its ``wds2idx`` writes it): "v1.2 <samples>", then per
    sample the "<ext> <data offset> <size> <member name>" of each of its members."""
    lines = [f"{INDEX_VERSION} {len(samples)}"]
    for members in samples:
        lines.append(" ".join(f"{m.extension} {m.offset} {m.size} {m.name}" for m in members))
    return "\n".join(lines) + "\n"


def read_index(path: str | os.PathLike, *, shard_size: int | None = None) -> list[list[Member]]:
    """Parse a DALI index (v1.2) and check every entry: safe names,
    block-aligned offsets, data inside the shard when its size is given."""
    where = str(path)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise SourceError(where, f"cannot read index: {err}") from err
    head = lines[0].split() if lines else []
    if len(head) != 2 or head[0] != INDEX_VERSION or not head[1].isdigit():
        raise SourceError(where, f"not a DALI webdataset index v1.2 (first line {lines[:1]})")
    width = 4
    samples = []
    for lineno, line in enumerate(lines[1:], 2):
        tokens = line.split()
        if not tokens:
            continue
        if len(tokens) % width:
            raise SourceError(f"{where}:{lineno}", f"expected groups of {width} fields, got {len(tokens)}")
        members = []
        for i in range(0, len(tokens), width):
            try:
                offset, size, name = int(tokens[i + 1]), int(tokens[i + 2]), tokens[i + 3]
            except ValueError as err:
                raise SourceError(f"{where}:{lineno}", f"bad index entry: {err}") from err
            check_member_name(name, where=f"{where}:{lineno}")
            if offset % BLOCK or offset < BLOCK or size < 0:
                raise SourceError(f"{where}:{lineno}", f"bad member {name!r}: offset {offset}, size {size}")
            if shard_size is not None and offset + size > shard_size:
                raise SourceError(f"{where}:{lineno}", f"member {name!r} at offset {offset} with {size} bytes "
                                  f"runs past the end of the shard ({shard_size} bytes): truncated shard")
            members.append(Member(name, offset, size))
        samples.append(members)
    if len(samples) != int(head[1]):
        raise SourceError(where, f"index announces {head[1]} samples but lists {len(samples)}")
    return samples


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
    """Walk a tar's headers without extracting anything; yield its regular members.

    Raises `SourceError` naming the shard and the offset for a link, an unsafe name,
    a bad header or a member that runs past the end of the file.
    """
    where = str(path)
    size = os.path.getsize(path)
    try:
        with tarfile.open(path, mode="r:") as tar:
            while True:
                try:
                    info = tar.next()
                except tarfile.TarError as err:
                    raise SourceError(where, f"bad tar header at offset {tar.offset}: {err}") from err
                if info is None:
                    break
                if info.isdir():
                    continue
                check_member_name(info.name, where=f"{where} at offset {info.offset}")
                if not info.isreg():
                    kind = "symlink" if info.issym() else "hard link" if info.islnk() else "special file"
                    raise SourceError(where, f"member {info.name!r} at offset {info.offset} is a {kind}")
                if info.offset_data + info.size > size:
                    raise SourceError(where, f"member {info.name!r} at offset {info.offset_data} needs "
                                      f"{info.size} bytes; the file ends at {size}: truncated shard")
                yield Member(info.name, info.offset_data, info.size)
    except tarfile.ReadError as err:
        raise SourceError(where, f"not a tar file: {err}") from err


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


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# -- manifest and sample records ----------------------------------------------------------
def read_manifest(root: str | os.PathLike) -> dict[str, Any]:
    path = Path(root) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise SourceError(str(path), "no manifest.json: not a converted dataset") from err
    except (OSError, json.JSONDecodeError) as err:
        raise SourceError(str(path), f"unreadable manifest: {err}") from err
    if manifest.get("format") != FORMAT_NAME:
        raise SourceError(str(path), f"format {manifest.get('format')!r}, expected {FORMAT_NAME!r}")
    if manifest.get("version", 0) > FORMAT_VERSION:
        raise SourceError(str(path), f"format version {manifest['version']} is newer than {FORMAT_VERSION}")
    return manifest


def write_manifest(root: str | os.PathLike, manifest: dict[str, Any]) -> None:
    write_atomic(Path(root) / MANIFEST, json_bytes(manifest))


def samples_bytes(records: Iterable[dict[str, Any]]) -> bytes:
    text = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records)
    return gzip_bytes(text.encode())


def read_samples(root: str | os.PathLike) -> list[dict[str, Any]]:
    path = Path(root) / SAMPLES
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, EOFError, json.JSONDecodeError) as err:
        raise SourceError(str(path), f"unreadable sample records: {err}") from err
