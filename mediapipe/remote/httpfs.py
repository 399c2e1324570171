"""HTTP(S) reads through fsspec's aiohttp session: redirects kept on the dataset's host, statuses,
lengths and encodings checked, exact ranges, version probes and whole bounded GETs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin, urlsplit

from mediapipe.remote.retry import CHUNK, Retry, _Pace, _Permanent, _Transient, _Unsatisfiable
from mediapipe.remote.versions import (
    IGNORED_RANGE,
    ObjectVersion,
    _check_version,
    _past_the_end,
    _ranged_answer,
)

MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
PERMANENT_STATUS = {400: "bad request", 401: "authentication required", 403: "access denied",
                    404: "not found", 410: "gone", 416: "range not satisfiable"}


def _check_status(status: int, reason: str | None) -> None:
    if status in PERMANENT_STATUS:
        message = PERMANENT_STATUS[status]
        if status == 416:
            raise _Unsatisfiable(f"HTTP 416 {reason or message}")
        if status == 404:
            raise FileNotFoundError(message)
        if status in (401, 403):
            raise PermissionError(f"HTTP {status} {reason or message}")
        raise _Permanent(f"HTTP {status} {reason or message}")
    if status >= 400:
        raise _Transient(f"HTTP {status} {reason or ''}".strip())
    if not 200 <= status < 300:
        raise _Permanent(f"HTTP {status} {reason or ''}".strip())


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


@contextlib.asynccontextmanager
async def _http_response(fs: Any, url: str, headers: dict[str, str]) -> Any:
    """The response to a GET of ``url``, status checked, after redirects that stay on its host
    (a redirect to another host is refused: the dataset's files come from where it lies)."""
    session = await fs.set_session()
    kwargs = {**fs.kwargs, "allow_redirects": False}
    # storage_options={"headers": {...}} (credentials) go with every request, as fsspec sends them;
    # this request's own (Range, Accept-Encoding) win over them
    headers = {**dict(kwargs.pop("headers", None) or {}), **headers}
    for _ in range(MAX_REDIRECTS + 1):
        r = await session.get(fs.encode_url(url), headers=headers, **kwargs)
        if r.status not in _REDIRECTS:
            break
        target = urljoin(url, r.headers.get("Location", ""))
        r.close()
        if _origin(target) != _origin(url):
            raise _Permanent(f"the server redirected to another host ({target[:200]}); redirects are followed "
                             f"on {_origin(url)[1]} only")
        url = target
    else:
        r.close()
        raise _Permanent(f"more than {MAX_REDIRECTS} redirects")
    try:
        _check_status(r.status, r.reason)
        yield r
    except BaseException:
        r.close()  # a response left unread (or lying about its length): its connection is not reused
        raise
    r.release()


def _declared_length(headers: Any) -> int | None:
    text = headers.get("Content-Length")
    if text is None:
        return None
    if not text.strip().isdigit() or len(text.strip()) > 19:
        raise _Permanent(f"bad Content-Length {text[:40]!r}")
    return int(text)


DECODED = ("gzip", "x-gzip", "deflate")  # encodings aiohttp always decodes


def _encoding(headers: Any) -> str | None:
    """The Content-Encoding of an answer (asked for identity), None when there is none."""
    text = (headers.get("Content-Encoding") or "").strip().lower()
    return None if text in ("", "identity") else text[:40]


def _refuse_encoded_range(headers: Any, start: int, end: int) -> None:
    """A range of an encoded (compressed) answer: its Content-Range counts the encoded bytes,
    never the file's; refused so, not as a damaged or rewritten file."""
    encoding = _encoding(headers)
    if encoding is not None:
        raise _Permanent(f"the server answered the range {start}-{end} with Content-Encoding {encoding!r} although "
                         "identity was asked: those are not the file's bytes; serve the dataset's files without "
                         "compression (no gzip for .tar), or pass cache_dir= to download whole shards")


def _http_validators(headers: Any) -> tuple[tuple[str, str], ...]:
    return tuple((k, headers[k][:200]) for k in ("ETag", "Last-Modified") if headers.get(k))


async def _http_range(fs: Any, url: str, start: int, length: int, retry: Retry,
                      expect: ObjectVersion | None = None) -> tuple[bytes, ObjectVersion]:
    """One ranged GET: a 206 with exactly this range, of the object ``expect`` when given,
    read to exactly ``length`` bytes."""
    end = start + length - 1
    headers = {"Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
    pace = _Pace(retry)
    async with _past_the_end(expect, start, end), _http_response(fs, url, headers) as r:
        if r.status != 206:
            raise _Permanent(IGNORED_RANGE.format(f"HTTP {r.status}"))
        _refuse_encoded_range(r.headers, start, end)
        version, _ = _ranged_answer(r.headers.get("Content-Range"), start, end, _http_validators(r.headers), expect)
        declared = _declared_length(r.headers)
        if declared is not None and declared != length:
            raise _Permanent(f"the server announced {declared} bytes for a range of {length}")
        data = bytearray()
        while len(data) < length:
            chunk = await r.content.read(min(CHUNK, length - len(data)))
            if not chunk:
                raise _Transient(f"the connection closed after {len(data)} of {length} bytes")
            data += chunk
            pace.check(len(data))
        return bytes(data), version


async def _http_probe(fs: Any, url: str) -> ObjectVersion:
    """The object at ``url`` now, from a GET of its first byte: a 206's total size, or a whole
    answer's length (its body left unread), and its validators."""
    async with _http_response(fs, url, {"Range": "bytes=0-0", "Accept-Encoding": "identity"}) as r:
        validators = _http_validators(r.headers)
        if _encoding(r.headers) is not None:  # its lengths are the encoded answer's, not the file's
            r.close()
            return ObjectVersion(None, validators)
        if r.status != 206:
            r.close()  # a whole file: not read for its size
            return ObjectVersion(_declared_length(r.headers), validators)
        version, _ = _ranged_answer(r.headers.get("Content-Range"), 0, 0, validators, None, to_end=True)
        await r.read()
        return version


async def _http_get(fs: Any, url: str, limit: int, sink: Callable[[bytes], Any], what: str, retry: Retry,
                    expect: ObjectVersion | None = None) -> int:
    """One whole GET, of the object ``expect`` when given, streamed to ``sink``, refused once
    it announces or sends more than ``limit``."""
    pace = _Pace(retry)
    async with _http_response(fs, url, {"Accept-Encoding": "identity"}) as r:
        encoding = _encoding(r.headers)
        if encoding is not None and encoding not in DECODED:
            raise _Permanent(f"the server sent {what} with Content-Encoding {encoding!r} although identity was "
                             "asked; serve the dataset's files without compression")
        # an encoded answer's Content-Length is the compressed size: the file's bytes (decoded) are counted
        declared = _declared_length(r.headers) if encoding is None else None
        _check_version(expect, ObjectVersion(declared, _http_validators(r.headers)))
        if declared is not None and declared > limit:
            raise _Permanent(f"{what} has {declared} bytes, more than the {limit} it can need")
        got = 0
        async for chunk in r.content.iter_chunked(CHUNK):
            got += len(chunk)
            if got > limit:
                raise _Permanent(f"{what} sent more than the {limit} bytes it can need")
            pace.check(got)
            sink(chunk)
        if declared is not None and got != declared:
            raise _Transient(f"the connection closed after {got} of {declared} bytes")
        return got
