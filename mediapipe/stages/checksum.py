"""The epoch cache's entry check: CRC-32C (the CPU's CRC instruction, through ``crc32c``) of the
header, then of each field's bytes and length.

A CRC, not a sum: every error of up to two bits, every burst up to 32 bits and every reordering of
blocks changes it, where sums of words let errors that cancel (two flips of one bit in one column)
through. It guards against damage, not forgery: the cache folder's owner check is what keeps other
users' entries out.
"""

from __future__ import annotations

from collections.abc import Iterable

import crc32c
import torch

__all__ = ["entry_checksum"]


def entry_checksum(header: bytes, fields: Iterable[torch.Tensor]) -> int:
    """The check value of an entry with this ``header`` and these fields (1-D uint8 CPU tensors, in order)."""
    crc = crc32c.crc32c(header)
    for data in fields:
        crc = crc32c.crc32c(data.contiguous().numpy(), crc)
        crc = crc32c.crc32c(data.numel().to_bytes(8, "little"), crc)
    return crc
