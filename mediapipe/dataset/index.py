"""DALI's webdataset index of a shard (v1.2): written from the shard's members, parsed with every
entry checked before the loader trusts it."""

from __future__ import annotations

import os

from mediapipe.dataset.layout import BLOCK, MAX_MANIFEST_BYTES, MAX_SIZE, check_member_name, split_member_name
from mediapipe.dataset.safe_io import _show, read_bounded
from mediapipe.dataset.tar import Member
from mediapipe.errors import SourceError

INDEX_VERSION = "v1.2"
INDEX_FLOOR_BYTES = 64 << 10  # an index is at most this plus its shard's size (a member takes >= 512 bytes)


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
