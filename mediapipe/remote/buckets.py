"""S3 and GCS reads: exact ranges through s3fs's and gcsfs's clients (their Content-Range and
ETag or generation checked), and a whole file as ranged pieces of one object."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mediapipe.remote.retry import CHUNK, Retry, _Pace, _Permanent, _Transient, _Unsatisfiable
from mediapipe.remote.versions import (
    IGNORED_RANGE,
    ObjectVersion,
    _check_version,
    _past_the_end,
    _ranged_answer,
)

PIECE = 16 << 20  # a whole file from S3 or GCS comes in ranged reads of this size, each checked


async def _s3_range(fs: Any, url: str, start: int, length: int, retry: Retry,
                    expect: ObjectVersion | None = None, to_end: bool = False) -> tuple[bytes, ObjectVersion]:
    """One ranged ``get_object`` through s3fs's client: its ContentRange gives the object's
    size, its ETag the version (see `_ranged_answer`)."""
    bucket, key, version_id = fs.split_path(url)
    end = start + length - 1
    extra = {"VersionId": version_id} if version_id else {}
    async with _past_the_end(expect, start, end):
        try:
            resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end}", **extra)
        except OSError as err:
            if getattr(err.__cause__, "response", {}).get("Error", {}).get("Code") == "InvalidRange":
                raise _Unsatisfiable(f"HTTP 416 {err}"[:200]) from None
            raise
    body = resp["Body"]
    try:
        if "ContentRange" not in resp:
            raise _Permanent(IGNORED_RANGE.format("a whole object"))
        etag = (("ETag", str(resp["ETag"])[:200]),) if resp.get("ETag") else ()
        version, want = _ranged_answer(resp["ContentRange"], start, end, etag, expect, to_end=to_end)
        data, pace = bytearray(), _Pace(retry)
        while chunk := await body.read(min(CHUNK, want + 1 - len(data))):
            data += chunk
            pace.check(len(data))
            if len(data) > want:
                raise _Permanent(f"the server sent more than the {want} bytes of the range {start}-{end}")
        if len(data) < want:
            raise _Transient(f"the connection closed after {len(data)} of {want} bytes")
        return bytes(data), version
    finally:
        body.close()


async def _gs_range(fs: Any, url: str, start: int, length: int, expect: ObjectVersion | None = None,
                    to_end: bool = False) -> tuple[bytes, ObjectVersion]:
    """One ranged GET through gcsfs's requests: its Content-Range gives the object's size,
    its ``x-goog-generation`` the version (see `_ranged_answer`)."""
    end = start + length - 1
    async with _past_the_end(expect, start, end):
        headers, data = await fs._call("GET", fs.url(url), headers={"Range": f"bytes={start}-{end}"})
    generation = headers.get("x-goog-generation")
    validators = (("generation", str(generation)[:40]),) if generation else ()
    version, want = _ranged_answer(headers.get("Content-Range"), start, end, validators, expect, to_end=to_end)
    if len(data) != want:
        raise _Transient(f"got {len(data)} bytes of the {want} of the range {start}-{end}")
    return bytes(data), version


async def _pieces(read_range: Callable[[int, int], Any], limit: int, sink: Callable[[bytes], Any], what: str,
                  retry: Retry, expect: ObjectVersion | None) -> int:
    """A whole file as ranged reads of `PIECE` bytes, streamed to ``sink``: all from one
    object (``expect`` when given), refused once its size is more than ``limit``."""
    pace = _Pace(retry)
    first: ObjectVersion | None = None
    got = 0
    while True:
        data, version = await read_range(got, min(PIECE, limit + 1 - got))
        if first is None:
            _check_version(expect, version)
            if version.size is not None and version.size > limit:
                raise _Permanent(f"{what} has {version.size} bytes, more than the {limit} it can need")
            first = version
        elif first.differs(version):
            raise _Transient(f"the file changed while it was read ({first.describe()}, then {version.describe()})")
        got += len(data)
        if got > limit:
            raise _Permanent(f"{what} has more than the {limit} bytes it can need")
        pace.check(got)
        sink(data)
        if first.size is None or got >= first.size or not data:
            return got
