"""The epoch cache's entry check: a 64-bit XXH3 of the header, then of each field's bytes and length.

XXH3-64 through ``xxhash`` (a dependency); where it cannot be imported, CRC-32C through ``crc32c``,
else zlib's CRC-32. `ALGORITHM` names which, and the cache key holds it, so processes of different
kinds never read each other's entries. A hash of every byte in order, not a sum: damage that
cancels in a sum of words (two words swapped, opposite changes), blocks reordered, a cut or zeroed
tail all change it, and any damage passes it with a chance of about 2**-64 (2**-32 for the CRCs,
which also catch every burst of up to 32 bits for certain). It guards against damage, not
forgery: the cache folder's owner check keeps other users' entries out.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator

import torch

__all__ = ["ALGORITHM", "ALGORITHMS", "entry_checksum"]


def _parts(header: bytes, fields: Iterable[torch.Tensor]) -> Iterator[object]:
    """What is checked, in order: the header, then each field's bytes and its length (8 bytes, little-endian)."""
    yield header
    for data in fields:
        yield data.contiguous().numpy()
        yield data.numel().to_bytes(8, "little")


def _crc(update: Callable[[object, int], int]) -> Callable[[bytes, Iterable[torch.Tensor]], int]:
    """A CRC's entry check: ``update(data, crc)`` chained over the parts."""
    def check(header: bytes, fields: Iterable[torch.Tensor]) -> int:
        crc = 0
        for part in _parts(header, fields):
            crc = update(part, crc)
        return crc
    return check


def _xxh3(header: bytes, fields: Iterable[torch.Tensor]) -> int:
    """XXH3-64 of the parts, in order (one streaming state)."""
    state = xxhash.xxh3_64()
    for part in _parts(header, fields):
        state.update(part)
    return state.intdigest()


ALGORITHMS: dict[str, Callable[[bytes, Iterable[torch.Tensor]], int]] = {"crc32": _crc(zlib.crc32)}
try:
    from crc32c import crc32c as _crc32c
    ALGORITHMS["crc32c"] = _crc(_crc32c)
except ImportError:  # an optional package (the tfrecord and dev extras install it)
    pass
try:
    import xxhash
    ALGORITHMS["xxh3_64"] = _xxh3
except ImportError:  # a dependency; a broken install falls back to a CRC
    pass
ALGORITHM = next(name for name in ("xxh3_64", "crc32c", "crc32") if name in ALGORITHMS)
_CHECK = ALGORITHMS[ALGORITHM]


def entry_checksum(header: bytes, fields: Iterable[torch.Tensor]) -> int:
    """The check value (below 2**64) of an entry with this ``header`` and these fields (1-D uint8 CPU
    tensors, in order), by `ALGORITHM`."""
    return _CHECK(header, fields)
