"""The epoch cache's entry check: each algorithm's formula written out (the CRC-32C bit by bit, XXH3-64 over
the bytes joined, checked against its published value), and the damage it must catch."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from mediapipe.stages.checksum import ALGORITHM, ALGORITHMS, entry_checksum

ROW_BYTES = 512  # a block of the damage below


def _photo_bytes(n: int, seed: int = 0) -> torch.Tensor:
    """Smooth image-like bytes (gradients and a little noise), not uniform noise."""
    rng = np.random.default_rng(seed)
    x = np.arange(n)
    wave = 128 + 60 * np.sin(x / 97.0) + 40 * np.cos(x / 13.0) + rng.normal(0, 3, n)
    return torch.from_numpy(np.clip(wave, 0, 255).astype(np.uint8))


def _crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), one bit at a time."""
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _joined(header: bytes, fields: list[torch.Tensor]) -> bytes:
    """What is checked, in order: the header, then each field's bytes and its length (8 bytes, little-endian)."""
    raw = [header]
    for field in fields:
        data = field.numpy().tobytes()
        raw += [data, len(data).to_bytes(8, "little")]
    return b"".join(raw)


def _oracle(header: bytes, fields: list[torch.Tensor], algorithm: str = ALGORITHM) -> int:
    """The check written out: XXH3-64 (seed 0) of the joined bytes; CRC-32C bit by bit; zlib's CRC-32."""
    joined = _joined(header, fields)
    if algorithm == "xxh3_64":
        import xxhash

        return xxhash.xxh3_64_intdigest(joined)
    return _crc32c(joined) if algorithm == "crc32c" else zlib.crc32(joined)


def test_the_install_checks_with_xxh3():
    pytest.importorskip("xxhash")
    assert ALGORITHM == "xxh3_64"


def test_the_oracle_is_xxh3_64():
    xxhash = pytest.importorskip("xxhash")
    assert xxhash.xxh3_64_intdigest(b"") == 0x2D06800538D394C2  # XXH3-64's published value for no input


def test_the_dev_install_has_the_crc_fallbacks():
    pytest.importorskip("crc32c")
    assert {"crc32c", "crc32"} <= set(ALGORITHMS)


def test_the_oracle_is_crc32c():
    assert _crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@pytest.mark.parametrize("sizes", [[0], [7], [512], [513 * 8], [3000, 64, 0]])
def test_the_checksum_is_the_formula(sizes, algorithm):
    fields = [_photo_bytes(n, seed=i) for i, n in enumerate(sizes)]
    assert ALGORITHMS[algorithm](b'{"h": 1}', fields) == _oracle(b'{"h": 1}', fields, algorithm)
    assert entry_checksum(b'{"h": 1}', fields) == _oracle(b'{"h": 1}', fields) < 2**64


def test_an_unaligned_view_checks_as_its_bytes():
    base = _photo_bytes(ROW_BYTES * 9 + 11)
    view = base[3:]
    assert view.storage_offset() == 3
    assert entry_checksum(b"", [view]) == entry_checksum(b"", [view.clone()])


def _damaged(data: torch.Tensor, rows: int) -> dict[str, torch.Tensor]:
    """``data`` (``rows`` whole rows, then a partial one) damaged in each way a check must catch."""
    def in_rows(change) -> torch.Tensor:
        words = data[: rows * ROW_BYTES].clone().view(torch.int64).view(rows, 64)
        change(words)
        return torch.cat([words.view(-1).view(torch.uint8), data[rows * ROW_BYTES:]])

    def swap_rows(w): w[[2, 7]] = w[[7, 2]]
    def swap_in_column(w): w[[1, 5], 9] = w[[5, 1], 9]
    def swap_in_row(w): w[4, [3, 40]] = w[4, [40, 3]]
    def flip(w): w[3, 17] ^= 1 << 33

    tail, zeroed = data.clone(), data.clone()
    tail[-1] ^= 0x80
    zeroed[len(data) // 2:] = 0
    return {"one bit in a whole row": in_rows(flip), "one bit past the last whole row": tail,
            "two rows swapped": in_rows(swap_rows), "two words of one column swapped": in_rows(swap_in_column),
            "two words of one row swapped": in_rows(swap_in_row), "second half zeroed": zeroed,
            "cut short by a row": data[:-ROW_BYTES]}


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_damage_changes_the_checksum(algorithm):
    check = ALGORITHMS[algorithm]
    data = torch.cat([_photo_bytes(ROW_BYTES * 20), _photo_bytes(100, seed=1)])
    good = check(b"h", [data])
    for what, bad in _damaged(data, 20).items():
        assert not torch.equal(bad, data), what
        assert check(b"h", [bad]) != good, what


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_the_header_and_the_field_boundaries_count(algorithm):
    check = ALGORITHMS[algorithm]
    a, b = _photo_bytes(ROW_BYTES * 3), _photo_bytes(ROW_BYTES * 2, seed=1)
    good = check(b"h", [a, b])
    assert check(b"H", [a, b]) != good
    assert check(b"h", [b, a]) != good
    assert check(b"h", [torch.cat([a, b])]) != good


def _stored_and_read(tmp_path, value: torch.Tensor) -> torch.Tensor:
    from mediapipe.stages import epoch_cache as E
    from mediapipe.stages.stats import StageStats

    bound = E.CacheBinding(E.EpochCache(tmp_path, max_bytes=1 << 24), "0" * 32, ("image",), (), ("image",))
    bound.folder.mkdir()
    stats = StageStats()
    bound.write(0, [["x"]], {"image": value}, stats)
    got = bound.read(0, [["x"]], stats)
    assert got is not None and stats.cache == {"stored": 1, "hits": 1}, dict(stats.cache)
    return got["image"]


_WORDS = torch.arange(0, 6000, dtype=torch.int64).to(torch.uint8)


@pytest.mark.parametrize("value", [
    torch.rand(7, 9, 3, generator=torch.Generator().manual_seed(0)) > 0.5,
    torch.randn(3, 17, 5, generator=torch.Generator().manual_seed(1)).half(),
    torch.randint(-300, 300, (3, 11, 13), dtype=torch.int16, generator=torch.Generator().manual_seed(2)),
    _WORDS[3 : 3 + 3 * 40 * 41].view(3, 40, 41),  # starts 3 bytes into its storage
    torch.tensor([1, 2, 3], dtype=torch.uint8).view(3, 1, 1).expand(3, 64, 64),
    torch.zeros(3, 0, 5, dtype=torch.uint8),
    _photo_bytes(600 * 700 * 3).view(600, 700, 3).permute(2, 0, 1),
    torch.randn(3, 100, 100, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 1e300,
], ids=["bool", "float16", "int16-odd-bytes", "unaligned-view", "expanded", "empty", "channels-last", "float64-huge"])
def test_every_kind_of_field_is_stored_and_read_back_checked(tmp_path, value):
    got = _stored_and_read(tmp_path, value)
    assert got.dtype == value.dtype and got.shape == value.shape and torch.equal(got, value)


def test_the_check_is_the_same_on_any_number_of_threads():
    data = torch.full((ROW_BYTES * 20,), 255, dtype=torch.uint8)
    data[::7] = 3
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = entry_checksum(b"h", [data])
        torch.set_num_threads(2)
        assert entry_checksum(b"h", [data]) == one == _oracle(b"h", [data])
    finally:
        torch.set_num_threads(threads)
