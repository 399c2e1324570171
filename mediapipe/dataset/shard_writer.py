"""Writing one shard: its tar under a temporary name, then its DALI index and member digests, each
fsynced and renamed into place so a reader never sees half a shard."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from mediapipe.dataset.index import index_text
from mediapipe.dataset.layout import BLOCK, check_member_name, digests_name, index_name, shard_name
from mediapipe.dataset.safe_io import fsync_dir, temp_name, write_atomic, write_error
from mediapipe.dataset.tar import Member, member_header


class ShardWriter:
    """Writes one shard: the tar under a temporary name, then `commit` writes its DALI index
    and member digests and fsyncs and renames the tar into place. Returns the shard's files,
    count, size and sha256."""

    def __init__(self, directory: str | os.PathLike, index: int) -> None:
        self.directory, self.index = Path(directory), index
        self.path = self.directory / shard_name(index)
        self.tmp = temp_name(self.path)
        self._file = open(self.tmp, "wb")
        self._hash = hashlib.sha256()
        self._offset = 0
        self.samples: list[list[Member]] = []
        self._digests: list[str] = []  # "<sha256>  <member name>" lines

    def _write(self, data: bytes) -> None:
        try:
            self._file.write(data)
        except OSError as err:
            raise write_error(err, self.tmp) from err
        self._hash.update(data)
        self._offset += len(data)

    def add(self, key: str, members: dict[str, bytes]) -> None:
        """Add one sample: ``members`` maps an extension to the member's bytes, in order."""
        check_member_name(key, where=str(self.path))
        if "/" in key or "." in key:
            raise ValueError(f"key {key!r} must not contain '/' or '.'")
        entries = []
        for ext, data in members.items():
            name = f"{key}.{ext}"
            self._write(member_header(name, len(data)))
            entries.append(Member(name, self._offset, len(data)))
            self._write(data)
            self._digests.append(f"{hashlib.sha256(data).hexdigest()}  {name}\n")
            if len(data) % BLOCK:
                self._write(b"\0" * (BLOCK - len(data) % BLOCK))
        self.samples.append(entries)

    def commit(self) -> dict[str, Any]:
        self._write(b"\0" * (2 * BLOCK))  # end-of-archive marker
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as err:
            raise write_error(err, self.tmp) from err
        write_atomic(self.directory / index_name(self.index), index_text(self.samples).encode())
        write_atomic(self.directory / digests_name(self.index), "".join(self._digests).encode())
        os.replace(self.tmp, self.path)
        fsync_dir(self.directory)
        return {"name": self.path.name, "index": index_name(self.index), "digests": digests_name(self.index),
                "samples": len(self.samples), "bytes": self._offset, "sha256": self._hash.hexdigest()}

    def abort(self) -> None:
        try:
            if not self._file.closed:
                self._file.close()
        except OSError:  # the write that failed left data it cannot flush either (a full disk)
            pass
        self.tmp.unlink(missing_ok=True)
