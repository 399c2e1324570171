"""A shard's member digests ("<sha256>  <member name>" per member, in tar order), so `verify` names
the damaged member, and a file's sha256."""

from __future__ import annotations

import hashlib
import os
import re

from mediapipe.dataset.safe_io import _show, read_bounded
from mediapipe.dataset.tar import Member
from mediapipe.errors import SourceError

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
