"""The sample records (samples.jsonl.gz, one JSON object per sample): written deterministically, read
within a bound and type-checked, and paired with the shards' index entries."""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from mediapipe.dataset.layout import MAX_SIZE, SAMPLES
from mediapipe.dataset.manifest import read_manifest
from mediapipe.dataset.safe_io import dataset_path, gzip_bytes, open_regular, parse_json
from mediapipe.dataset.schema import RECORD_SCHEMA, check_fields
from mediapipe.dataset.tar import Member
from mediapipe.errors import SourceError

MAX_RECORD_BYTES = 1 << 20  # one line of samples.jsonl.gz: a long video's key frames fit
SAMPLES_FLOOR_BYTES = 64 << 20  # samples.jsonl.gz inflates to at most this...
SAMPLES_BYTES_PER_RECORD = 16 << 10  # ...plus this per sample the manifest announces


def samples_bytes(records: Iterable[dict[str, Any]]) -> bytes:
    text = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records)
    return gzip_bytes(text.encode())


def read_samples(root: str | os.PathLike, num_samples: int | None = None) -> list[dict[str, Any]]:
    """The sample records, one per line, each type-checked; exactly ``num_samples`` of them
    (default: the manifest's count). The gzip is inflated as it is read, and refused at
    the first line longer than MAX_RECORD_BYTES, the first record past the count, or once
    it inflates past SAMPLES_FLOOR_BYTES + SAMPLES_BYTES_PER_RECORD per sample: a small
    file that inflates to gigabytes costs no more memory than an honest one."""
    path = Path(root) / SAMPLES
    where = str(path)
    if num_samples is None:
        num_samples = read_manifest(root).get("num_samples")
    real = dataset_path(os.path.realpath(root), SAMPLES, where=where, field=SAMPLES)
    fd, _ = open_regular(real, "sample records")
    with os.fdopen(fd, "rb") as raw:
        return parse_samples(raw, where, num_samples)


def samples_limit(num_samples: int | None) -> int:
    """The most bytes the sample records of ``num_samples`` samples may inflate to."""
    return SAMPLES_FLOOR_BYTES + SAMPLES_BYTES_PER_RECORD * (num_samples or 0)


def parse_samples(raw: io.BufferedIOBase | BinaryIO, where: str, num_samples: int | None) -> list[dict[str, Any]]:
    """`read_samples`'s checks on a gzip stream of sample records (a file or downloaded bytes)."""
    limit = samples_limit(num_samples)
    expected = MAX_SIZE if num_samples is None else num_samples
    records: list[dict[str, Any]] = []
    try:
        with gzip.GzipFile(fileobj=raw, mode="rb") as f:
            for lineno, line in enumerate(_bounded_lines(f, where, limit, f"{num_samples} samples"), 1):
                if lineno > expected:
                    raise SourceError(f"{where}:{lineno}", f"more records than the manifest's num_samples "
                                      f"({num_samples})")
                record = parse_json(line, where, lineno)
                check_fields(record, RECORD_SCHEMA, where=where, what="a sample record", field=_quoted_field,
                             line=lineno)
                records.append(record)
    except SourceError:
        raise
    except (OSError, EOFError, zlib.error) as err:
        raise SourceError(where, f"unreadable sample records: {err}") from err
    if num_samples is not None and len(records) != num_samples:
        raise SourceError(where, f"{len(records)} sample records, the manifest's num_samples is {num_samples}")
    return records


def _bounded_lines(f: io.BufferedIOBase, where: str, limit: int, needs: str) -> Iterator[bytes]:
    """The lines of a stream (inflated 1 MiB at a time), refused at the first longer than
    MAX_RECORD_BYTES or once the stream passes ``limit`` bytes (what ``needs`` may need):
    memory stays bounded whatever the stream inflates to."""
    pending, inflated, lineno = b"", 0, 0
    while chunk := f.read(1 << 20):
        inflated += len(chunk)
        if inflated > limit:
            raise SourceError(f"{where}:{lineno + 1}", f"records inflate to more than the {limit} bytes that "
                              f"{needs} may need")
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            lineno += 1
            if len(line) >= MAX_RECORD_BYTES:
                raise SourceError(f"{where}:{lineno}", f"line longer than {MAX_RECORD_BYTES} bytes")
            yield line
        if len(pending) >= MAX_RECORD_BYTES:  # the next line, unfinished already
            raise SourceError(f"{where}:{lineno + 1}", f"line longer than {MAX_RECORD_BYTES} bytes")
    if pending:
        yield pending


def _quoted_field(name: str) -> str:
    return f"field {name!r}"


def match_records(records: list[dict[str, Any]], indices: dict[int, list[list[Member]]],
                  with_samples: set[int], *, where: str) -> list[tuple[dict[str, Any], list[Member]]]:
    """Pair each record of the shards in ``indices`` with its index entry, in order. Refuses
    a record of a shard the manifest does not list with samples (``with_samples``), a
    record whose key is not the index entry's, and counts that differ."""
    position = dict.fromkeys(indices, 0)
    pairs = []
    for line, record in enumerate(records, 1):
        sid = record["shard"]
        members = indices.get(sid)
        if members is None:
            if sid not in with_samples:
                raise SourceError(f"{where}:{line}", f"a record of shard {sid}, which is not in the manifest's shards")
            continue
        n = position[sid]
        if n == len(members):
            raise SourceError(f"{where}:{line}", f"more records of shard {sid} than its index lists ({n})")
        if not members[n][0].name.startswith(f"{record['key']}."):  # (a key holds no '.', a name is "<key>.<ext>")
            raise SourceError(f"{where}:{line}", f"key {record['key']!r}, but the index of shard {sid} lists "
                              f"{members[n][0].name!r} there")
        position[sid] = n + 1
        pairs.append((record, members[n]))
    for sid, n in position.items():
        if n != len(indices[sid]):
            raise SourceError(where, f"{n} records of shard {sid}, its index lists {len(indices[sid])}")
    return pairs
