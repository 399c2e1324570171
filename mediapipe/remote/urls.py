"""Remote URLs: which of them name a store this library reads, and the file names a remote
dataset may give (confined to its folder)."""

from __future__ import annotations

import re

from mediapipe.errors import SourceError

REMOTE_SCHEMES = ("http", "https", "s3", "gs", "gcs")
REMOTE_HINT = 'remote datasets need fsspec and its protocol packages: pip install "mediapipe-loader[remote]"'
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*")  # one path component: no '/', '%', '?', '#', ':'


def is_remote(path: object) -> bool:
    """Whether ``path`` is a URL of a remote store this library reads (http, https, s3, gs)."""
    if not isinstance(path, str):
        return False
    m = _SCHEME.match(path)
    return m is not None and m.group(1).lower() in REMOTE_SCHEMES


def remote_name(name: object, *, where: str, field: str) -> str:
    """A file name a remote dataset names, refused unless it is a relative path of plain
    components inside the dataset's folder: no scheme or other host, no ``..``, no query."""
    if type(name) is not str or not name or len(name) > 1024:
        raise SourceError(where, f"{field}: expected a file name, got {name!r:.80}")
    parts = name.split("/")
    if not all(_SAFE_NAME.fullmatch(p) and p not in (".", "..") for p in parts):
        raise SourceError(where, f"{field}: {name!r:.80} is not a plain file name inside the dataset folder "
                          "(another host, '..', an absolute path, a query or an escape)")
    return name
