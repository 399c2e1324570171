"""The epoch cache's entry check: a CRC of the header, then of each field's bytes and length.

CRC-32C through ``crc32c`` (the CPU's CRC instruction) where it is installed, else zlib's CRC-32:
`ALGORITHM` names which, and the cache key holds it, so processes of either kind never read each
other's entries. A CRC, not a sum: every error of up to two bits, every burst up to 32 bits and every
reordering of blocks changes it, where sums of words let errors that cancel through. It guards
against damage, not forgery: the cache folder's owner check keeps other users' entries out.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import torch

try:
    from crc32c import crc32c as _crc
    ALGORITHM = "crc32c"
except ImportError:  # an optional package (the tfrecord and dev extras install it)
    _crc = zlib.crc32
    ALGORITHM = "crc32"

__all__ = ["ALGORITHM", "entry_checksum"]


def entry_checksum(header: bytes, fields: Iterable[torch.Tensor]) -> int:
    """The check value of an entry with this ``header`` and these fields (1-D uint8 CPU tensors, in order)."""
    crc = _crc(header)
    for data in fields:
        crc = _crc(data.contiguous().numpy(), crc)
        crc = _crc(data.numel().to_bytes(8, "little"), crc)
    return crc
