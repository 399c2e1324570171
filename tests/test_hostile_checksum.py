"""Hostile review of the epoch cache's entry check (`mediapipe.stages.checksum`).

Written against FORMAT 3's sums of 64-bit words, which let the damage of the first tests through;
FORMAT 4 checked CRC-32C, which catches it, and FORMAT 5 checks XXH3-64, which catches it too.

Entries are written through `CacheBinding.write`, damaged on disk the way memory, a file system or a
buggy writer damages bytes, and read back through `CacheBinding.read`: a damaged entry must be a miss
(None), never a wrong tensor. Each damage test also shows that the CRC-32 of FORMAT 2 (over the header
and the whole payload) catches the same damage, so an acceptance is a regression of this change.
"""

from __future__ import annotations

import json
import multiprocessing
import zlib

import numpy as np
import pytest
import torch
from helpers import write_image_folder

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.stages import epoch_cache as E
from mediapipe.stages.checksum import ALGORITHM, entry_checksum
from mediapipe.stages.stats import StageStats
from mediapipe.synthetic import photo_like

STAMP = [["x"]]
WORD = 8

ROW_BYTES = 512  # 64 words of 8 bytes: the block the damage below is laid out in


def _binding(tmp_path, names=("image",)) -> E.CacheBinding:
    bound = E.CacheBinding(E.EpochCache(tmp_path, max_bytes=1 << 26), "0" * 32, names[:1], (), tuple(names))
    bound.folder.mkdir(exist_ok=True)
    return bound


def _photo(h: int = 224, w: int = 224, seed: int = 0) -> torch.Tensor:
    """A decoder's (C, H, W) view of a smooth (H, W, 3) photo-like image."""
    return torch.from_numpy(photo_like(h, w, seed)).permute(2, 0, 1)


def _start(raw: bytes) -> int:
    """Where the payload (the first field's bytes) starts in an entry."""
    _, header_len, _ = E._PREFIX.unpack(raw[:E._PREFIX.size])
    return E._aligned(E._PREFIX.size + header_len)


def _old_crc(raw: bytes) -> int:
    """FORMAT 2's check of an entry: CRC-32 of the header, then of every payload byte (padding too)."""
    _, header_len, _ = E._PREFIX.unpack(raw[:E._PREFIX.size])
    header = raw[E._PREFIX.size:E._PREFIX.size + header_len]
    return zlib.crc32(raw[_start(raw):], zlib.crc32(header))


def _read_damaged(bound: E.CacheBinding, index: int, good: bytes, damage) -> tuple[dict | None, StageStats]:
    bad = bytearray(good)
    damage(bad, _start(good))
    assert bytes(bad) != good, "the damage changed no byte"
    assert _old_crc(bytes(bad)) != _old_crc(good), "FORMAT 2's CRC-32 would have accepted this damage too"
    bound.path(index).write_bytes(bytes(bad))
    stats = StageStats()
    return bound.read(index, STAMP, stats), stats


def _assert_miss_or_same(got, written: dict[str, torch.Tensor], what: str) -> None:
    """A damaged entry may be a miss; if it is a hit, every field must be the one written."""
    if got is None:
        return
    wrong = [n for n, v in written.items() if not torch.equal(got[n], v)]
    assert not wrong, f"{what}: the damaged entry was accepted and read() returned wrong {wrong}"


def _flip(buf: bytearray, at: int, bit: int) -> None:
    """Flip bit ``bit`` (0..63) of the little-endian 64-bit word starting at byte ``at``."""
    buf[at + bit // 8] ^= 1 << (bit % 8)


def _word_at(start: int, row: int, column: int) -> int:
    return start + row * ROW_BYTES + column * WORD


# -- damage sums of words could not see (FORMAT 3 accepted it) ------------------------------------
def test_two_flipped_top_bits_in_one_column_are_a_miss(tmp_path):
    """Two single-bit errors: bit 63 of word (row 0, column 5) and of word (row 2, column 5), i.e. the
    0x80 bit of two pixel bytes 1024 bytes apart. Column 5's sum changes by 2 * 2**63 = 0 mod 2**64 and
    the weighted row sum by 2**63 * (1 + 3) = 0: accepted, whatever the image. XXH3-64 lets such damage
    through with a chance of about 2**-64; the CRC-32 fallbacks detect every 2-bit error in entries below 512 MB."""
    bound, image = _binding(tmp_path), _photo()
    bound.write(0, STAMP, {"image": image}, StageStats())
    good = bound.path(0).read_bytes()

    def damage(buf, start):
        _flip(buf, _word_at(start, 0, 5), 63)
        _flip(buf, _word_at(start, 2, 5), 63)

    got, _ = _read_damaged(bound, 0, good, damage)
    _assert_miss_or_same(got, {"image": image}, "two flipped bits")


@pytest.mark.parametrize("bit, rows_apart", [(62, 4), (59, 32), (56, 256)])
def test_one_bit_flipped_both_ways_rows_apart_is_a_miss(tmp_path, bit, rows_apart):
    """Two single-bit errors in one column, one 0->1 and one 1->0, 2**(64 - bit) rows apart: the column
    sum is unchanged and the weighted row sum changes by 2**bit * rows_apart = 0 mod 2**64."""
    bound, image = _binding(tmp_path), _photo()  # 150,528 bytes: 294 whole rows
    bound.write(0, STAMP, {"image": image}, StageStats())
    good = bound.path(0).read_bytes()
    start = _start(good)

    def value(buf, row, column):
        return int.from_bytes(buf[_word_at(start, row, column):][:WORD], "little") >> bit & 1

    column = next(c for c in range(64) if value(good, 0, c) != value(good, rows_apart, c))

    def damage(buf, start):
        _flip(buf, _word_at(start, 0, column), bit)
        _flip(buf, _word_at(start, rows_apart, column), bit)

    got, _ = _read_damaged(bound, 0, good, damage)
    _assert_miss_or_same(got, {"image": image}, f"bit {bit} flipped both ways {rows_apart} rows apart")


def test_the_top_bit_of_every_word_flipped_is_a_miss(tmp_path):
    """A stuck or inverted data line at bit 63 (the 0x80 bit of every 8th byte) over an even number of
    whole rows: every column sum changes by 2**63 * (an even count) = 0 and every row sum by
    64 * 2**63 = 0. An eighth of the image's bytes are off by 128 and the entry is accepted."""
    bound, image = _binding(tmp_path), _photo()
    bound.write(0, STAMP, {"image": image}, StageStats())
    good = bound.path(0).read_bytes()
    rows = image.numel() // ROW_BYTES // 2 * 2

    def damage(buf, start):
        for row in range(rows):
            for column in range(64):
                _flip(buf, _word_at(start, row, column), 63)

    got, _ = _read_damaged(bound, 0, good, damage)
    _assert_miss_or_same(got, {"image": image}, "bit 63 of every word flipped")


def _checkerboard(h: int = 64, w: int = 512, square: int = 8) -> torch.Tensor:
    """A calibration-board-like grayscale image (1, H, W): 8-pixel squares, two grays."""
    y, x = np.mgrid[0:h, 0:w]
    board = np.where((x // square + y // square) % 2 == 0, 30, 220).astype(np.uint8)
    return torch.from_numpy(board)[None]


@pytest.mark.parametrize("block", [ROW_BYTES, 4096])
def test_swapped_blocks_with_equal_sums_are_a_miss(tmp_path, block):
    """Two 512-byte blocks (or 4 KB pages) swapped whose words are a permutation of each other's: here
    two differently phased rows (pages) of a checkerboard. Column sums are unchanged by any swap of
    whole rows, and the weighted row sum changes by (i - j) * (r_j - r_i) = 0 when the rows' sums are
    equal: a board shifted by one square is returned."""
    bound, board = _binding(tmp_path), _checkerboard()
    bound.write(0, STAMP, {"image": board}, StageStats())
    good = bound.path(0).read_bytes()

    def damage(buf, start):
        a, b = start, start + 8 * ROW_BYTES  # image rows 0 and 8 (pages 0 and 1): opposite phase
        buf[a:a + block], buf[b:b + block] = buf[b:b + block], buf[a:a + block]

    got, _ = _read_damaged(bound, 0, good, damage)
    _assert_miss_or_same(got, {"image": board}, f"two {block}-byte blocks of equal sums swapped")


# -- damage the new check catches (holds) ---------------------------------------------------------
def _shift(by: int, fill_zero: bool):
    def damage(buf, start):
        n = 224 * 224 * 3
        buf[start + by:start + n] = buf[start:start + n - by]
        if fill_zero:
            buf[start:start + by] = bytes(by)
    return damage


def _zero_tail(size: int):
    def damage(buf, start):  # truncated, then padded back to its length with zeros
        end = start + 224 * 224 * 3
        buf[end - size:end] = bytes(size)
    return damage


def _swap(a: int, b: int, size: int):
    def damage(buf, start):
        x, y = start + a, start + b
        buf[x:x + size], buf[y:y + size] = buf[y:y + size], buf[x:x + size]
    return damage


def _duplicate(src: int, dst: int, size: int):
    def damage(buf, start):
        buf[start + dst:start + dst + size] = buf[start + src:start + src + size]
    return damage


DETECTED = {
    "shifted by 8 bytes": _shift(8, False),
    "shifted by 8 bytes, zero filled": _shift(8, True),
    "shifted by a row, zero filled": _shift(ROW_BYTES, True),
    "zeroed tail 4 KB": _zero_tail(4096),
    "zeroed tail 100 bytes (the partial row)": _zero_tail(100),
    "zeroed second half": _zero_tail(224 * 224 * 3 // 2),
    "rows 3 and 9 swapped": _swap(3 * ROW_BYTES, 9 * ROW_BYTES, ROW_BYTES),
    "4 KB pages 1 and 4 swapped": _swap(4096, 4 * 4096, 4096),
    "row 2 duplicated onto row 5": _duplicate(2 * ROW_BYTES, 5 * ROW_BYTES, ROW_BYTES),
    "page 0 duplicated onto page 7": _duplicate(0, 7 * 4096, 4096),
    "two words of one row swapped": _swap(3 * WORD, 40 * WORD, WORD),
}


@pytest.mark.parametrize("what", sorted(DETECTED))
def test_realistic_damage_to_a_photo_is_a_miss(tmp_path, what):
    bound, image = _binding(tmp_path), _photo()
    bound.write(0, STAMP, {"image": image}, StageStats())
    got, stats = _read_damaged(bound, 0, bound.path(0).read_bytes(), DETECTED[what])
    assert got is None and stats.cache["rejected"] == 1, what


def test_every_single_bit_flip_of_a_word_is_a_miss(tmp_path):
    bound, image = _binding(tmp_path), _photo(60, 50)  # 9,000 bytes: 17 rows and a partial one
    bound.write(0, STAMP, {"image": image}, StageStats())
    good = bound.path(0).read_bytes()
    for at in (_word_at(0, 0, 0), _word_at(0, 16, 63), 17 * ROW_BYTES):  # first, last whole-row, tail word
        for bit in range(64):
            got, _ = _read_damaged(bound, 0, good, lambda buf, start, at=at, bit=bit: _flip(buf, start + at, bit))
            assert got is None, (at, bit)


def test_damaged_alignment_padding_is_unchecked_but_returns_the_written_fields(tmp_path):
    """The 64-byte alignment padding after each field is no longer checked (FORMAT 2's CRC-32 covered
    it), but no tensor is made from it: the fields read back are the ones written."""
    bound = _binding(tmp_path, ("image", "mask"))
    image = _photo(100, 77)  # 23,100 bytes: 4 bytes of padding after it
    mask = torch.from_numpy(photo_like(33, 50, 1))[..., 0] > 128  # 1,650 bytes: 14 of padding
    bound.write(0, STAMP, {"image": image, "mask": mask}, StageStats())
    good = bound.path(0).read_bytes()
    first, second = E._aligned(image.numel()), E._aligned(mask.numel())
    assert first - image.numel() == 4 and second - mask.numel() == 14
    assert len(good) == _start(good) + first + second

    def damage(buf, start):
        buf[start + image.numel():start + first] = b"\xff" * 4
        buf[-14:] = b"\xaa" * 14

    got, stats = _read_damaged(bound, 0, good, damage)
    assert got is not None and stats.cache["hits"] == 1
    assert torch.equal(got["image"], image) and torch.equal(got["mask"], mask)


# -- layouts and dtypes: no crash, the tensor written comes back -------------------------------------
def _layouts() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = _photo(70, 90)
    flat = base.contiguous().reshape(-1)
    return {
        "0 bytes": torch.empty(0, 5, dtype=torch.uint8),
        "0-d int16": torch.tensor(-7, dtype=torch.int16),
        "bool, 111 bytes": torch.rand(3, 37, generator=g) > 0.5,
        "float16, 1030 bytes": torch.randn(5, 103, generator=g).half(),
        "bfloat16": torch.randn(3, 171, generator=g).bfloat16(),
        "int16 over rows": torch.randint(-30000, 30000, (513, 3), dtype=torch.int16, generator=g),
        "uint16": torch.randint(0, 65535, (700,), generator=g).to(torch.uint16),
        "float64": torch.randn(129, 5, generator=g, dtype=torch.float64),
        "uint8 storage offset 3": flat[3:3 + 7 * ROW_BYTES + 5],
        "uint8 storage offset 8": flat[8:8 + 4096],
        "float16 storage offset 1": torch.randn(2000, generator=g).half()[1:],
        "non-contiguous slice": base[:, ::2, 1:],
        "channels last": base.permute(1, 2, 0),
        "expanded": torch.arange(90, dtype=torch.uint8).expand(3, 70, 90),
        "expanded middle dim": torch.arange(3 * ROW_BYTES).view(3, 1, ROW_BYTES).expand(3, 4, ROW_BYTES),
        "int64 near the wrap": torch.full((1024,), -(2 ** 62), dtype=torch.int64) * 2,
        "float32 requiring grad": torch.randn(40, 40, generator=g, requires_grad=True),
    }


@pytest.mark.parametrize("what", sorted(_layouts()))
def test_any_layout_and_dtype_round_trips(tmp_path, what):
    extra = _layouts()[what]
    image = _photo(70, 90)
    bound = _binding(tmp_path, ("image", "extra"))
    stats = StageStats()
    bound.write(0, STAMP, {"image": image, "extra": extra}, stats)
    got = bound.read(0, STAMP, stats)
    assert stats.cache == {"stored": 1, "hits": 1}
    assert got["extra"].dtype == extra.dtype and torch.equal(got["extra"], extra.detach())
    assert torch.equal(got["image"], image)
    # and damage to the extra field is still caught
    raw = bytearray(bound.path(0).read_bytes())
    if extra.numel():
        raw[_start(raw) + E._aligned(image.numel())] ^= 0x10
        bound.path(0).write_bytes(bytes(raw))
        assert bound.read(0, STAMP, stats) is None and stats.cache["rejected"] == 1


# -- determinism: threads, processes --------------------------------------------------------------
def _crc_chain(header: bytes, data: bytes) -> int:
    """The check of the header, then the field's bytes, then its length, by the algorithm the library
    uses (XXH3-64 of the bytes joined; a CRC chained over them)."""
    length = len(data).to_bytes(8, "little")
    if ALGORITHM == "xxh3_64":
        return pytest.importorskip("xxhash").xxh3_64_intdigest(header + data + length)
    crc = pytest.importorskip("crc32c").crc32c if ALGORITHM == "crc32c" else zlib.crc32
    return crc(length, crc(data, crc(header)))


def test_the_checksum_is_the_same_in_any_thread_count():
    rng = np.random.default_rng(1)
    words = rng.integers(2 ** 62, 2 ** 63 - 1, size=ROW_BYTES // 8 * 4096, dtype=np.int64)  # every sum wraps
    data = torch.from_numpy(np.concatenate([words.view(np.uint8), rng.integers(0, 256, 77, dtype=np.uint8)]))
    threads = torch.get_num_threads()
    try:
        results = []
        for n in (1, 2, 1, 2):
            torch.set_num_threads(n)
            results.append(entry_checksum(b"h", [data]))
    finally:
        torch.set_num_threads(threads)
    assert len(set(results)) == 1
    assert results[0] == _crc_chain(b"h", data.numpy().tobytes())


def _child_write(folder: str, threads: int) -> None:
    torch.set_num_threads(threads)
    bound = _binding(folder)
    stats = StageStats()
    bound.write(0, STAMP, {"image": _photo(300, 301, seed=3)}, stats)
    assert stats.cache["stored"] == 1


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_an_entry_written_by_another_process_is_read(tmp_path, method):
    child = multiprocessing.get_context(method).Process(target=_child_write, args=(str(tmp_path), 1))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        stats = StageStats()
        got = _binding(tmp_path).read(0, STAMP, stats)
    finally:
        torch.set_num_threads(threads)
    assert got is not None and stats.cache == {"hits": 1}
    assert torch.equal(got["image"], _photo(300, 301, seed=3))


# -- entries of the old format ---------------------------------------------------------------------
def test_a_format_2_entry_is_a_miss_not_an_error(tmp_path):
    """An entry as FORMAT 2 wrote it (its CRC-32 over header and payload) where this version reads."""
    bound, image = _binding(tmp_path), _photo(50, 60)
    stored = image.permute(1, 2, 0)
    header = json.dumps({"format": 2, "stamp": STAMP, "fields": [["image", "uint8", list(stored.shape),
                                                                  [1, 2, 0]]]}, sort_keys=True).encode()
    start = E._aligned(E._PREFIX.size + len(header))
    payload = stored.contiguous().numpy().tobytes()
    payload += bytes(E._aligned(len(payload)) - len(payload))
    crc = zlib.crc32(payload, zlib.crc32(header))
    bound.path(0).write_bytes(E._PREFIX.pack(E.MAGIC, len(header), crc) + header
                              + bytes(start - E._PREFIX.size - len(header)) + payload)
    stats = StageStats()
    assert bound.read(0, STAMP, stats) is None
    assert stats.cache == {"rejected": 1, "misses": 1}
    bound.write(0, STAMP, {"image": image}, stats)  # stored anew over it, then read
    assert torch.equal(bound.read(0, STAMP, stats)["image"], image)


def test_the_cache_key_names_the_format(tmp_path, monkeypatch):
    root = write_image_folder(tmp_path / "images", 3)
    plan = mp.Pipeline(source=mp.loaders.folder(root), decode={"image": mp.decoders.image()},
                       augment=[A.Resize(48)], batch_size=2, seed=0, device="cpu").plan
    fields, prefix = E.cached_fields(plan), E.stored_prefix(plan)
    now = E.cache_key(plan, fields, prefix, None)
    monkeypatch.setattr(E, "FORMAT", 2)
    assert E.cache_key(plan, fields, prefix, None) != now
