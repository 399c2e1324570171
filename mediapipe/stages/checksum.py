"""The epoch cache's entry check: a 32-bit sum over 64-bit words, cheaper than CRC-32 over every byte.

Each field's bytes are read as rows of 64 64-bit words, in native byte order (an entry is read on
the machine that wrote it): the 64 column sums catch any changed word (a flipped bit, a zeroed or
torn tail), and the sum of row sums weighted by row number catches rows or words moved between
rows. CRC-32 of those sums, of the few bytes past the last whole row and of the header gives the
stored 32-bit value. It guards against damage, not forgery: the cache folder's owner check is what
keeps other users' entries out.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import torch

__all__ = ["entry_checksum"]

ROW_WORDS = 64  # 64-bit words per row
ROW_BYTES = ROW_WORDS * 8


def entry_checksum(header: bytes, fields: Iterable[torch.Tensor]) -> int:
    """The check value of an entry with this ``header`` and these fields (1-D uint8 CPU tensors, in order)."""
    crc = zlib.crc32(header)
    for data in fields:
        crc = zlib.crc32(_digest(data), crc)
    return crc


def _digest(data: torch.Tensor) -> bytes:
    """The column sums, the weighted row sum, the bytes past the last whole row and the length of ``data``."""
    n = data.numel()
    whole = n - n % ROW_BYTES
    parts = []
    if whole:
        words = _as_words(data[:whole]).view(-1, ROW_WORDS)
        rows = words.sum(1)  # integer sums wrap modulo 2**64, in any order
        weights = torch.arange(1, rows.numel() + 1, dtype=torch.int64)
        parts += [words.sum(0).numpy().tobytes(), torch.dot(rows, weights).numpy().tobytes()]
    parts += [data[whole:].numpy().tobytes(), n.to_bytes(8, "little")]
    return b"".join(parts)


def _as_words(data: torch.Tensor) -> torch.Tensor:
    """``data`` (a whole number of words) as int64 words: a view where its start is 8-byte aligned."""
    try:
        return data.view(torch.int64)
    except RuntimeError:  # a storage offset that is not a multiple of 8
        return data.clone().view(torch.int64)
