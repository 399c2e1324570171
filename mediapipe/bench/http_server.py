"""A small HTTP/1.1 file server on 127.0.0.1 that honours Range requests, with injected faults.

The bench serves converted shards with it (``mediapipe-http``: shards over HTTP against the
same shards on disk, same run), and the tests inject faults into it. Loopback only.

``server.fail("shard-000000.tar", "500", "drop")`` makes the next two requests for a path
ending so fail: with an HTTP 500, then by closing the connection halfway through the body.
Faults: "500", "503", "403", "404", "drop" (half the body, then the connection closes),
"lie-length" (announces 100 bytes more than it sends, then closes), "ignore-range" (a 200
with the whole file), "huge-length" (announces 10**15 bytes, sends a few, closes).
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


class RangeServer:
    """Serves ``root`` at ``url`` (127.0.0.1, a free port) from a thread until `close`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.faults: dict[str, list[str]] = defaultdict(list)
        self.requests: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                server._serve(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
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
        file = (self.root / path.lstrip("/")).resolve()
        if self.root not in file.parents or not file.is_file():
            return self._status(h, 404)
        size = file.stat().st_size
        status, start, end, extra = 200, 0, size - 1, {}
        m = _RANGE.match(rng or "")
        if m and fault != "ignore-range":
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            if start >= size:
                return self._status(h, 416)
            status = 206
            extra["Content-Range"] = f"bytes {start}-{end}/{size}"
        with open(file, "rb") as f:  # only the range: a shard is not read whole for one sample
            f.seek(start)
            body = f.read(end + 1 - start)
        length = {"lie-length": len(body) + 100, "huge-length": 10**15}.get(fault or "", len(body))
        h.send_response(status)
        h.send_header("Content-Length", str(length))
        h.send_header("Accept-Ranges", "bytes")
        for k, v in extra.items():
            h.send_header(k, v)
        h.end_headers()
        if fault == "drop":
            body = body[: len(body) // 2]
        elif fault == "huge-length":
            body = body[:16]
        h.wfile.write(body)
        h.wfile.flush()
        if fault in ("drop", "lie-length", "huge-length"):
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


