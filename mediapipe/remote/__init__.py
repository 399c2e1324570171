"""Datasets in object storage (``https://``, ``s3://``, ``gs://``) through fsspec.

A `RemoteStore` is one dataset folder of a store: it names files only inside that folder
(`remote_name`: no other host, no ``..``, no query), reads exact byte ranges with retries
and exponential backoff on transient failures (a dropped connection, HTTP 5xx or 429, a
timeout, a transfer slower than ``Retry.min_rate``), refuses at once what retrying cannot
fix (403, 404, a server that ignores Range or announces another length than the range
asked for, a redirect to another host), and bounds every read before it spends memory: a
range is exactly its length, a whole small file at most its limit, a shard download at
most the manifest's size. Errors are `SourceError`s naming the URL.

Every answer says which object it came from (`ObjectVersion`: the total size a 206's
Content-Range states, or a whole answer's length, and the ETag / Last-Modified / GCS
generation the store gives); a read given the version seen when the dataset was opened
refuses an answer from another one (a file rewritten on the server).

One `Retry` rule bounds every store alike: each request may stay silent ``timeout``
seconds and must end within ``2 * timeout + bytes / min_rate``; the protocol packages' own
retries are turned off (botocore's and s3fs's for S3) so that ``attempts`` is the number of
tries. HTTP(S) goes through fsspec's HTTP file system and its aiohttp session, with the
checks above applied to each response (fsspec's own ``cat_file`` reads whatever body
comes back); S3 through s3fs's client (``get_object``, its ContentRange and ETag checked),
GCS through gcsfs's requests (Content-Range, ``x-goog-generation``). fsspec and its
protocol packages are the ``remote`` extra, imported on first use only.

`ShardCache` keeps whole shards on local disk, bounded in bytes, least recently used
evicted first; a shard enters it only once its size and sha256 match the manifest's,
under a name that includes the version the store gave (a shard rewritten on the server
is another entry). Readers read through descriptors, so evicting a shard never pulls it
from under a read.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import re
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from mediapipe.errors import SourceError

REMOTE_SCHEMES = ("http", "https", "s3", "gs", "gcs")
REMOTE_HINT = 'remote datasets need fsspec and its protocol packages: pip install "mediapipe-loader[remote]"'
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*")  # one path component: no '/', '%', '?', '#', ':'
CHUNK = 1 << 20
PIECE = 16 << 20  # a whole file from S3 or GCS comes in ranged reads of this size, each checked
PROBES = 32  # version probes in flight at once when a dataset is opened
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
PERMANENT_STATUS = {400: "bad request", 401: "authentication required", 403: "access denied",
                    404: "not found", 410: "gone", 416: "range not satisfiable"}


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


class _Permanent(Exception):
    """A failure retrying cannot fix: reported at once."""


class _Changed(_Permanent):
    """An answer from another version of the file than the one expected."""


class _Unsatisfiable(_Permanent):
    """HTTP 416: the range asked for lies past the file's end."""


class _Transient(Exception):
    """A failure worth another try (a dropped connection, a 5xx)."""


@dataclass(frozen=True)
class Retry:
    """How often and how patiently a failed request is tried again (exponential backoff with
    jitter), and how long one request may take: the same rule for every store."""

    attempts: int = 5
    backoff: float = 0.2  # seconds before the second try; doubled each time
    max_backoff: float = 10.0
    timeout: float = 60.0  # seconds a connection may stay silent
    min_rate: float = 32 << 10  # bytes a second a transfer must average once `timeout` seconds have passed

    def delays(self) -> list[float]:
        return [min(self.max_backoff, self.backoff * 2**i) * (0.5 + random.random() / 2)
                for i in range(self.attempts - 1)]

    def deadline(self, nbytes: int) -> float:
        """Seconds one request moving ``nbytes`` may take in all: connecting and the first
        byte ``timeout`` each, then the rest at ``min_rate``."""
        return 2 * self.timeout + max(0, nbytes) / self.min_rate


@dataclass(frozen=True)
class ObjectVersion:
    """Which object of a store an answer came from: its total size (None where the answer
    does not state it) and the validators the store gave (ETag, Last-Modified, generation)."""

    size: int | None
    validators: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        sizes = f"{self.size} bytes" if self.size is not None else "no stated size"
        return ", ".join([sizes, *(f"{k} {v}" for k, v in self.validators)])

    def differs(self, seen: ObjectVersion) -> bool:
        """Whether ``seen`` is another object than this one, by what both state."""
        if self.size is not None and seen.size is not None and self.size != seen.size:
            return True
        mine = dict(self.validators)
        return any(k in mine and mine[k] != v for k, v in seen.validators)

    def tag(self) -> str:
        """The validators as one string (empty when the store gave none)."""
        return "\0".join(f"{k}={v}" for k, v in self.validators)


REWRITTEN_HINT = ("re-convert the dataset (mediapipe convert), or re-upload the shard the manifest describes, "
                  "then open the dataset again")


def _check_version(expect: ObjectVersion | None, seen: ObjectVersion) -> None:
    """Refuse an answer from another object than ``expect`` (the one the dataset was opened with)."""
    if expect is not None and expect.differs(seen):
        raise _Changed(f"the file changed on the server since the dataset was opened: expected "
                       f"{expect.describe()}, the server now has {seen.describe()}; a dataset must not be "
                       f"rewritten while it is read: {REWRITTEN_HINT}")


def _import_fsspec() -> Any:
    try:
        import fsspec
    except ImportError as err:
        raise ImportError(REMOTE_HINT) from err
    return fsspec


class RemoteStore:
    """One dataset folder of a remote store: confined names, exact ranged reads, bounded
    whole-file reads, downloads and uploads, each retried on transient failures and each
    request bounded in time by the `Retry` policy.

    Pickles without its file system (each process opens its own, as fsspec's async file
    systems must not cross a fork)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, retry: Retry = Retry()) -> None:
        if not is_remote(url):
            raise ValueError(f"{url!r} is not a URL of a remote store ({', '.join(REMOTE_SCHEMES)})")
        if "?" in url or "#" in url:
            raise ValueError(f"{url!r}: a dataset URL names a folder, without a query or fragment (the "
                             "files' names are appended to it); pass credentials in storage_options")
        self.url = url.rstrip("/")
        self.protocol = _SCHEME.match(url).group(1).lower()  # type: ignore[union-attr]
        self.http = self.protocol in ("http", "https")
        self.storage_options = dict(storage_options or {})
        self.retry = retry
        self._fs: Any = None
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fs": None, "_pid": -1}

    @property
    def fs(self) -> Any:
        """This process's fsspec file system for the store, its timeouts and retries set from `retry`."""
        if self._fs is None or self._pid != os.getpid():
            fsspec = _import_fsspec()
            try:
                fs = fsspec.filesystem(self.protocol, **self._fs_options())
            except ImportError as err:
                raise ImportError(f"{REMOTE_HINT} ({err})") from err
            if self.protocol == "s3":
                fs.retries = 1  # s3fs's own retry loop: this store retries, with its backoff
            self._fs, self._pid = fs, os.getpid()
        return self._fs

    def _fs_options(self) -> dict[str, Any]:
        """The storage options with this store's timeouts where the user set none: aiohttp's
        for HTTP and GCS, botocore's (and no botocore retries) for S3."""
        options = dict(self.storage_options)
        options.setdefault("skip_instance_cache", True)  # its settings are this store's, not shared
        timeout = self.retry.timeout
        if self.http:
            client = dict(options.pop("client_kwargs", {}))
            client.setdefault("timeout", _client_timeout(timeout))
            options["client_kwargs"] = client
        elif self.protocol == "s3":
            config = dict(options.pop("config_kwargs", {}))
            config.setdefault("connect_timeout", timeout)
            config.setdefault("read_timeout", timeout)
            config.setdefault("retries", {"total_max_attempts": 1})
            options["config_kwargs"] = config
        else:
            options.setdefault("requests_timeout", _client_timeout(timeout))
        return options

    def child(self, name: str) -> str:
        """The URL of ``name`` (a `remote_name`) inside the folder."""
        return f"{self.url}/{remote_name(name, where=self.url, field='name')}"

    # -- retries --------------------------------------------------------------------------
    def _retrying(self, url: str, what: str, attempt: Callable[[], Any]) -> Any:
        failures: list[str] = []
        for delay in [*self.retry.delays(), None]:
            try:
                return attempt()
            except SourceError:
                raise
            except _Permanent as err:
                raise SourceError(url, f"{what}: {err}") from None
            except FileNotFoundError as err:
                raise SourceError(url, f"{what}: not found (404){_detail(err)}") from None
            except PermissionError as err:
                raise SourceError(url, f"{what}: access denied (403){_detail(err)}") from None
            except (_Transient, OSError, asyncio.TimeoutError, *_client_errors()) as err:
                failures.append(f"{type(err).__name__}: {err}"[:200])
                if delay is None:
                    break
                time.sleep(delay)
        raise SourceError(url, f"{what} failed {len(failures)} times; last: {failures[-1]}")

    # -- reads ----------------------------------------------------------------------------
    def read(self, name: str, start: int, length: int, expect: ObjectVersion | None = None) -> bytes:
        """Exactly ``length`` bytes of ``name`` from ``start``, from the object ``expect`` when given."""
        url = self.child(name)
        if length <= 0:
            return b""
        return self._retrying(url, f"reading {length} bytes at offset {start}",
                              lambda: self._sync(self._range(url, start, length, expect), length)[0])

    def version(self, name: str) -> ObjectVersion:
        """What the store has under ``name`` now (its first byte read, the answer's size and validators)."""
        url = self.child(name)
        return self._retrying(url, "asking its size", lambda: self._sync(self._probe(url), 1))

    def versions(self, names: Sequence[str]) -> list[ObjectVersion]:
        """`version` of each name, asked concurrently; one that fails is asked again on its own
        (with retries and its error)."""
        if not names:
            return []
        urls = [self.child(n) for n in names]

        async def gather() -> list[Any]:
            gate = asyncio.Semaphore(PROBES)

            async def probe(url: str) -> ObjectVersion:
                async with gate:
                    return await _bounded(self._probe(url), self.retry.deadline(1))

            return await asyncio.gather(*(probe(u) for u in urls), return_exceptions=True)

        try:
            out = self._sync(gather(), 0, seconds=self.retry.deadline(1) * (1 + len(urls) // PROBES))
        except Exception:  # noqa: BLE001 - each is asked again below
            out = [None] * len(urls)
        return [v if isinstance(v, ObjectVersion) else self.version(n) for v, n in zip(out, names)]

    def _range(self, url: str, start: int, length: int, expect: ObjectVersion | None, to_end: bool = False) -> Any:
        """One ranged read of this store's protocol: a coroutine giving the bytes and their
        `ObjectVersion` (``to_end``: the range may stop at the file's end; S3 and GCS only)."""
        if self.http:
            return _http_range(self.fs, url, start, length, self.retry, expect)
        if self.protocol == "s3":
            return _s3_range(self.fs, url, start, length, self.retry, expect, to_end)
        return _gs_range(self.fs, url, start, length, expect, to_end)

    async def _probe(self, url: str) -> ObjectVersion:
        if self.http:
            return await _http_probe(self.fs, url)
        return (await self._range(url, 0, 1, None))[1]

    def read_many(self, requests: Sequence[tuple[str, int, int, ObjectVersion | None]]) -> list[bytes | None]:
        """Several (name, start, length, expected version) ranges fetched concurrently, one try
        each: None where one failed or came from another object (its reader then tries it
        again on its own, with retries and its error)."""
        if not requests:
            return []
        urls = [self.child(r[0]) for r in requests]

        async def gather() -> list[Any]:
            return await asyncio.gather(*(self._range(u, s, n, e) for u, (_, s, n, e) in zip(urls, requests)),
                                        return_exceptions=True)

        try:
            out = self._sync(gather(), sum(n for _, _, n, _ in requests))
        except Exception:  # noqa: BLE001 - only a prefetch: each read reports its own failure
            return [None] * len(requests)
        return [d[0] if isinstance(d, tuple) and len(d[0]) == r[2] else None for d, r in zip(out, requests)]

    def read_small(self, name: str, limit: int, what: str) -> bytes:
        """A whole file of at most ``limit`` bytes, refused before it is read when larger."""
        url = self.child(name)

        def once() -> bytes:
            chunks: list[bytes] = []
            self._sync(self._whole(url, limit, chunks.append, what, None), limit)
            return b"".join(chunks)

        return self._retrying(url, f"reading the {what}", once)

    def download(self, name: str, dest: Path, size: int, sha256: str | None,
                 expect: ObjectVersion | None = None) -> None:
        """``name`` into the file ``dest``: exactly ``size`` bytes, with that digest when given,
        from the object ``expect`` when given."""
        url = self.child(name)

        def once() -> None:
            digest = hashlib.sha256()
            with open(dest, "wb") as out:
                def sink(chunk: bytes) -> None:
                    out.write(chunk)
                    digest.update(chunk)

                got = self._sync(self._whole(url, size, sink, "shard", expect), size)
            if got < size:  # the connection ended early (no length announced): another try
                raise _Transient(f"the transfer ended after {got} of the manifest's {size} bytes")
            if sha256 is not None and digest.hexdigest() != sha256:
                raise _Permanent(f"sha256 {digest.hexdigest()} differs from the manifest's {sha256}: the shard on "
                                 f"the server is not the one the manifest describes (rewritten after the "
                                 f"conversion, or damaged); {REWRITTEN_HINT}")

        self._retrying(url, "downloading", once)

    def _whole(self, url: str, limit: int, sink: Callable[[bytes], Any], what: str,
               expect: ObjectVersion | None) -> Any:
        """The coroutine of one whole-file read of this store's protocol, streamed to ``sink``."""
        if self.http:
            return _http_get(self.fs, url, limit, sink, what, self.retry, expect)
        return _pieces(lambda s, n: self._range(url, s, n, None, to_end=True), limit, sink, what, self.retry, expect)

    # -- writes ---------------------------------------------------------------------------
    def exists(self, name: str) -> bool:
        url = self.child(name)
        return bool(self._retrying(url, "checking", lambda: self._sync(self.fs._exists(url), 0)))

    def put_file(self, local: str | os.PathLike, name: str) -> None:
        url = self.child(name)
        size = os.path.getsize(local)
        self._retrying(url, "uploading", lambda: self._sync(self.fs._put_file(str(local), url), size))

    def put_bytes(self, name: str, data: bytes) -> None:
        url = self.child(name)
        self._retrying(url, "uploading", lambda: self._sync(self.fs._pipe_file(url, data), len(data)))

    def _sync(self, coro: Any, nbytes: int, seconds: float | None = None) -> Any:
        """Run ``coro`` on the file system's loop, abandoned past ``seconds`` (default: the
        `Retry.deadline` of ``nbytes``)."""
        from fsspec.asyn import sync

        fs = self.fs
        return sync(fs.loop, lambda: _bounded(coro, self.retry.deadline(nbytes) if seconds is None else seconds))


async def _bounded(coro: Any, seconds: float) -> Any:
    """``coro``'s result, or a transient failure once it has run ``seconds`` (it is cancelled)."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise _Transient(f"no complete answer within {seconds:.1f} s (2 x timeout, then min_rate for its bytes)")
    return task.result()


def _client_timeout(seconds: float) -> Any:
    try:
        import aiohttp
    except ImportError as err:
        raise ImportError(REMOTE_HINT) from err
    return aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)


def _detail(err: BaseException) -> str:
    text = str(err)
    return f" ({text[:200]})" if text else ""


def _client_errors() -> tuple[type[BaseException], ...]:
    """The protocol packages' errors worth another try (aiohttp's, botocore's connection and read errors)."""
    errors: list[type[BaseException]] = []
    with contextlib.suppress(ImportError):
        import aiohttp

        errors.append(aiohttp.ClientError)
    with contextlib.suppress(ImportError):
        from botocore import exceptions

        errors += [exceptions.HTTPClientError, exceptions.ConnectionError, exceptions.IncompleteReadError]
    return tuple(errors)


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


class _Pace:
    """A transfer that must keep moving: after ``timeout`` seconds it must average at least
    ``min_rate`` bytes a second (a server that drips bytes never trips a silence timeout)."""

    def __init__(self, retry: Retry) -> None:
        self.start, self.grace, self.min_rate = time.monotonic(), retry.timeout, retry.min_rate

    def check(self, got: int) -> None:
        elapsed = time.monotonic() - self.start
        if elapsed > self.grace + got / self.min_rate:
            raise _Transient(f"too slow: {got} bytes in {elapsed:.1f} s (less than {self.min_rate:.0f} bytes/s "
                             f"after {self.grace:g} s)")


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


_CONTENT_RANGE = re.compile(r"bytes (\d{1,19})-(\d{1,19})/(\d{1,19}|\*)$")


def _ranged_answer(content_range: str | None, start: int, end: int, validators: tuple[tuple[str, str], ...],
                   expect: ObjectVersion | None, *, to_end: bool = False) -> tuple[ObjectVersion, int]:
    """The object a ranged answer came from (its Content-Range's total size, its validators),
    refused when it is not ``expect``; and the bytes it carries: refused unless they are the
    range ``start``-``end`` asked for (or, ``to_end``, that range cut at the file's end)."""
    m = _CONTENT_RANGE.match(content_range or "")
    wrong = _Permanent(f"the server answered the range {start}-{end} with Content-Range {(content_range or '')[:60]!r}")
    if m is None:
        raise wrong
    version = ObjectVersion(None if m.group(3) == "*" else int(m.group(3)), validators)
    _check_version(expect, version)
    first, last = int(m.group(1)), int(m.group(2))
    cut = to_end and version.size is not None and last == version.size - 1 < end
    if first != start or (last != end and not cut):
        raise wrong
    return version, last + 1 - start


@contextlib.asynccontextmanager
async def _past_the_end(expect: ObjectVersion | None, start: int, end: int) -> Any:
    """A 416 to a range inside the file ``expect`` is: that file is shorter now (rewritten)."""
    try:
        yield
    except _Unsatisfiable as err:
        if expect is None:
            raise
        raise _Changed(f"the file changed on the server since the dataset was opened: expected "
                       f"{expect.describe()}, the server has fewer than {end + 1} bytes ({err} to the range "
                       f"{start}-{end}); a dataset must not be rewritten while it is read: {REWRITTEN_HINT}") from None


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


IGNORED_RANGE = ("the server ignored the Range request ({}, not 206 Partial Content): ranged reads need a "
                 "server that honours Range, or pass cache_dir= to download whole shards")


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


# -- the local cache of whole shards ----------------------------------------------------------
_ENTRY = re.compile(r"[0-9a-f]{32}")  # a cached shard is "<key>.tar"; "<key>.partial" while it downloads
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


class ShardCache:
    """Whole shards on local disk, at most ``max_bytes`` of them (and the downloads in
    flight), least recently used evicted first. A shard enters under a name made of its URL and digest, once downloaded whole and
    checked (size, sha256); processes and datasets share the folder (a download holds the
    shard's lock and ends in an atomic rename; the others wait for it). Readers get a
    descriptor (`open`), so a shard evicted meanwhile stays readable to them. A shard larger
    than the whole cache is not cached (its samples are read by range)."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"cache_bytes={max_bytes}: expected > 0")
        self.directory, self.max_bytes = Path(directory), int(max_bytes)

    def file_for(self, url: str, size: int, sha256: str | None, version: ObjectVersion | None = None) -> Path:
        """Where the copy of this shard lives: a name made of its URL, size, digest and the
        validators its store gave (a shard rewritten on the server is another entry)."""
        tag = version.tag() if version is not None else ""
        text = f"{url}\0{size}\0{sha256}" + (f"\0{tag}" if tag else "")  # (no tag: the name it always had)
        key = hashlib.sha256(text.encode()).hexdigest()[:32]
        return self.directory / f"{key}.tar"

    def fits(self, size: int) -> bool:
        return size <= self.max_bytes

    def open(self, store: RemoteStore, name: str, size: int, sha256: str | None, *, verify: bool = False,
             version: ObjectVersion | None = None) -> int:
        """A descriptor on the cached copy of shard ``name`` (downloaded now when absent, of
        another size, or, with ``verify``, of another sha256: checked once per process),
        marked as just used; ``version``: the object the store had when the dataset was
        opened (a download from another is refused). The caller closes it."""
        path = self.file_for(store.child(name), size, sha256, version)
        check = sha256 if verify else None
        fd = _open_entry(path, size, check)
        if fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            with _locked(path.with_suffix(".lock")):
                fd = _open_entry(path, size, check)  # another process downloaded it meanwhile
                if fd is None:
                    fd = self._download(store, name, path, size, sha256, version)
        _touch(fd)
        return fd

    def get(self, store: RemoteStore, name: str, size: int, sha256: str | None,
            version: ObjectVersion | None = None) -> Path:
        """The path of shard ``name``'s cached copy (see `open`); it may be evicted at any time."""
        os.close(self.open(store, name, size, sha256, version=version))
        return self.file_for(store.child(name), size, sha256, version)

    def _download(self, store: RemoteStore, name: str, path: Path, size: int, sha256: str | None,
                  version: ObjectVersion | None) -> int:
        """Download under the shard's lock: into "<key>.partial", opened, then renamed into place."""
        self.evict(keep=size)
        partial = path.with_suffix(".partial")
        try:
            store.download(name, partial, size, sha256, version)
            fd = os.open(partial, _OPEN_FLAGS)
            try:
                os.replace(partial, path)
                _touch(fd)
                self.evict()  # again: another process may have added a shard while this one downloaded
            except BaseException:
                os.close(fd)
                raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
        if sha256 is not None:
            _VERIFIED.add(_identity(os.fstat(fd)))
        return fd

    def discard(self, path: Path, fd: int) -> None:
        """Remove the cached copy ``fd`` reads (found damaged), unless another has replaced it."""
        with contextlib.suppress(OSError):
            st = os.fstat(fd)
            _VERIFIED.discard(_identity(st))
            if _identity(path.stat()) == _identity(st):
                path.unlink()

    def evict(self, keep: int = 0) -> None:
        """Remove the least recently used shards until ``keep`` more bytes fit in the bound
        (a shard being read stays readable through its descriptor), and the partial downloads
        no process is writing any more (one killed mid-download)."""
        entries = []
        for p in self.directory.iterdir():
            if not _ENTRY.fullmatch(p.stem):
                continue
            if p.suffix == ".partial":
                _remove_abandoned(p)
            elif p.suffix == ".tar":
                with contextlib.suppress(OSError):
                    st = p.stat()
                    entries.append((st.st_atime_ns, st.st_size, p))
        total = sum(size for _, size, _ in entries)
        for _, size, p in sorted(entries):
            if total + keep <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                p.unlink()
                total -= size


class _Verified:
    """The cached shards (device, inode, size, modification time) whose sha256 this process has checked."""

    def __init__(self) -> None:
        self.lock, self.seen = threading.Lock(), set()

    def add(self, key: tuple[int, int, int, int]) -> None:
        self.seen.add(key)

    def discard(self, key: tuple[int, int, int, int]) -> None:
        self.seen.discard(key)

    def check(self, fd: int, st: os.stat_result, sha256: str) -> bool:
        key = _identity(st)
        if key in self.seen:
            return True
        with self.lock:  # one thread hashes a shard; the others wait for its verdict
            if key not in self.seen:
                digest, offset = hashlib.sha256(), 0
                while block := os.pread(fd, CHUNK, offset):
                    digest.update(block)
                    offset += len(block)
                if digest.hexdigest() != sha256:
                    return False
                self.seen.add(key)
        return True


_VERIFIED = _Verified()


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """A cached file's identity: its modification time is when it entered the cache (use moves
    only its access time), so a later file on a reused inode is another."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _open_entry(path: Path, size: int, sha256: str | None) -> int | None:
    """A descriptor on a cached shard, or None when it is absent, not a regular file, of
    another size or (``sha256`` given) of another digest: then it is downloaded again."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size == size and (sha256 is None or _VERIFIED.check(fd, st, sha256)):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _touch(fd: int) -> None:
    """Mark a cached shard as just used: its access time, set here (reads may not move it),
    is the eviction order; its modification time stays when it entered the cache."""
    with contextlib.suppress(OSError):
        os.utime(fd, ns=(time.time_ns(), os.fstat(fd).st_mtime_ns))


def _remove_abandoned(partial: Path) -> None:
    """Remove a partial download whose shard's lock nobody holds (its process is gone)."""
    try:
        import fcntl
    except ImportError:
        return
    try:
        with open(partial.with_suffix(".lock"), "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # being downloaded now
            try:
                partial.unlink()
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
    except OSError:
        pass


@contextlib.contextmanager
def _locked(path: Path) -> Any:
    try:
        import fcntl
    except ImportError:  # no advisory locks: two processes may both download (the rename is atomic)
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
