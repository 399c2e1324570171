"""`RemoteStore`: one dataset folder of a store through this process's fsspec file system, its
reads, downloads and uploads each retried and bounded by the `Retry` rule."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mediapipe.errors import SourceError
from mediapipe.remote.buckets import _gs_range, _pieces, _s3_range
from mediapipe.remote.httpfs import _http_get, _http_probe, _http_range
from mediapipe.remote.retry import Retry, _bounded, _Permanent, _Transient
from mediapipe.remote.urls import _SCHEME, REMOTE_HINT, REMOTE_SCHEMES, is_remote, remote_name
from mediapipe.remote.versions import REWRITTEN_HINT, ObjectVersion

PROBES = 32  # version probes in flight at once when a dataset is opened


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
