"""A small HTTP/1.1 file server on 127.0.0.1 that honours Range requests, with injected faults.

The bench serves converted shards with it (``mediapipe-http``: shards over HTTP against the
same shards on disk, same run), and the tests inject faults into it. Loopback only.

``server.fail("shard-000000.tar", "500", "drop")`` makes the next two requests for a path
ending so fail: with an HTTP 500, then by closing the connection halfway through the body.
Faults: "500", "503", "403", "404", "drop" (half the body, then the connection closes),
"lie-length" (announces 100 bytes more than it sends, then closes), "ignore-range" (a 200
with the whole file), "huge-length" (announces 10**15 bytes, sends a few, closes),
"short-length" (a body 100 bytes shorter than asked, its length announced so), "no-length" (no Content-Length:
half the body, then the connection closes), "wrong-range" (a 206 of the range one block
later, as its Content-Range says), "drip" (the body a byte every `drip_seconds`), "stall"
(the headers, then silence until the server closes), "redirect=URL" (a 302 to URL followed
by the path asked for).
``server.requests`` lists (path, Range header or None) of every request served.
"""

from __future__ import annotations

import re
import socket
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a batch's ranged reads connect at once: a short backlog drops SYNs (retried after 1, 3, 7... s)


class RangeServer:
    """Serves ``root`` at ``url`` (127.0.0.1, a free port) from a thread until `close`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.faults: dict[str, list[str]] = defaultdict(list)
        self.requests: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()
        self.drip_seconds = 0.2
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                server._serve(self)

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def fail(self, suffix: str, *faults: str) -> None:
        with self.lock:
            self.faults[suffix].extend(faults)

    def _take_fault(self, path: str) -> str | None:
        with self.lock:
            for suffix, queue in self.faults.items():
                if queue and path.endswith(suffix):
                    return queue.pop(0)
        return None

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("?", 1)[0]
        rng = h.headers.get("Range")
        with self.lock:
            self.requests.append((path, rng))
        fault = self._take_fault(path)
        if fault in ("500", "503", "403", "404"):
            return self._status(h, int(fault))
        if fault and fault.startswith("redirect="):
            h.send_response(302)
            h.send_header("Location", fault.split("=", 1)[1] + path)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        file = (self.root / path.lstrip("/")).resolve()
        if self.root not in file.parents or not file.is_file():
            return self._status(h, 404)
        size = file.stat().st_size
        status, start, end, extra = 200, 0, size - 1, {}
        m = _RANGE.match(rng or "")
        if m and fault != "ignore-range":
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            if fault == "wrong-range":
                start, end = start + 512, min(end + 512, size - 1)
            if start >= size:
                return self._status(h, 416)
            status = 206
            extra["Content-Range"] = f"bytes {start}-{end}/{size}"
        with open(file, "rb") as f:  # only the range: a shard is not read whole for one sample
            f.seek(start)
            body = f.read(end + 1 - start)
        length = {"lie-length": len(body) + 100, "huge-length": 10**15,
                  "short-length": max(0, len(body) - 100)}.get(fault or "", len(body))
        h.send_response(status)
        if fault == "no-length":
            h.send_header("Connection", "close")
        else:
            h.send_header("Content-Length", str(length))
        h.send_header("Accept-Ranges", "bytes")
        for k, v in extra.items():
            h.send_header(k, v)
        h.end_headers()
        if fault in ("drop", "no-length"):
            body = body[: len(body) // 2]
        elif fault == "huge-length":
            body = body[:16]
        elif fault == "short-length":
            body = body[:length]
        if fault == "stall":
            h.wfile.flush()
            self.closing.wait(600)
            body = b""
        elif fault == "drip":
            for i in range(len(body)):
                if self.closing.is_set():
                    break
                h.wfile.write(body[i:i + 1])
                h.wfile.flush()
                self.closing.wait(self.drip_seconds)
            body = b""
        try:
            h.wfile.write(body)
            h.wfile.flush()
        except OSError:  # the client went away (a drip or stall it gave up on)
            h.close_connection = True
            return None
        if fault in ("drop", "lie-length", "huge-length", "no-length", "stall", "drip"):
            h.close_connection = True
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    @staticmethod
    def _status(h: BaseHTTPRequestHandler, status: int) -> None:
        body = f"status {status}\n".encode()
        h.send_response(status)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


