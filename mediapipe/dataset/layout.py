"""The converted dataset's layout: its format name and version, its file names, the bounds on what it
holds, and the keys and member names of its samples."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from mediapipe.errors import SourceError

FORMAT_NAME = "mediapipe-shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SAMPLES = "samples.jsonl.gz"
REPORT = "report.json"
PARTS = ".parts"  # per-shard sample records of committed shards, until the dataset is complete
BLOCK = 512
MAX_KEY_CHARS = 80  # "<key>.<ext>" must fit a 100-byte USTAR name field
_UNSAFE_KEY_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
META_EXTENSIONS = ("cls", "json")  # members that are not media
MAX_MANIFEST_BYTES = 64 << 20
MAX_SIZE = (1 << 63) - 1  # sizes, offsets and counts: what an off_t holds


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
