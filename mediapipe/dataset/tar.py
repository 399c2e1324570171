"""A shard's tar members: USTAR headers written reproducibly and checked when read, a tar scanned
without extracting anything, and members grouped into samples."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from mediapipe.dataset.layout import BLOCK, check_member_name, split_member_name
from mediapipe.dataset.safe_io import open_regular
from mediapipe.errors import SourceError


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
