"""What a worker keeps between clips of one file (issue 15): the file's packets and decoder
(`SourceCache`), bounded in bytes and keyed by the file on disk; clips from them stay
bit-identical to a full sequential decode. And the decode's time by part, in the loader's stats."""

from __future__ import annotations

import json
import os
from pathlib import Path

import av
import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.registry import create
from mediapipe.decoders.video_cache import PACKET_OVERHEAD, SourceCache
from mediapipe.decoders.video_index import clear_cache
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.video import read_counter, render_frames, write_video

H, W = 64, 96


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reuse")
    frames = list(render_frames(H, W, 40, seed=5))
    return {s: write_video(root / f"gop12.{s}", frames, gop=12) for s in ("mp4", "ivf")}


def sequential_luma(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [np.frombuffer(f.planes[0], np.uint8).reshape(f.planes[0].height, -1)[:, : f.width].copy()
                for f in container.decode(video=0)]


def count_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import mediapipe.decoders.video_pyav as vp

    opened: list[str] = []
    real = vp.open_container

    def counting(blob, path, decoder):
        opened.append(path)
        return real(blob, path, decoder)

    monkeypatch.setattr(vp, "open_container", counting)
    return opened


@pytest.mark.parametrize("suffix", ["mp4", "ivf"])
def test_clips_of_a_seen_file_reuse_its_packets_and_decoder_bit_exactly(files, suffix, monkeypatch):
    """One open for the index pass; every later clip of the file, in this epoch and the next,
    decodes from the kept packets with the same (flushed) decoder, frames equal to a full decode."""
    path = files[suffix]
    ref = sequential_luma(path)
    clear_cache()
    opened = count_opens(monkeypatch)
    dec = create("video", "pyav", output="yuv", clip_len=5, stride=2, threads=1)
    blob = Blob(str(path), path=str(path))
    for epoch in range(2):
        for sample in range(5):
            rng = SampleRNG(3, epoch, sample, 0)
            plan = dec.plan(dec.index(blob), SampleRNG(3, epoch, sample, 0), str(path))
            x = dec.decode(blob, DecodeHint(), rng, {}).value
            for t, frame in enumerate(plan.clips[0]):
                assert torch.equal(x[t, 0], torch.from_numpy(ref[frame])), (epoch, sample, frame)
            assert [read_counter(f[0].numpy()) for f in x] == list(plan.clips[0])
    assert opened == [str(path)]  # the index pass only
    assert dec._sources().nbytes > 0
    clear_cache()


def test_a_kept_file_holds_its_packets_bytes_not_a_decoder(files):
    """Between clips a kept file is its packets' bytes: no decoder (whose frame pool is most of
    its memory) and no av.Packet (which keeps its stream, container and decoder alive)."""
    path = files["mp4"]
    clear_cache()
    dec = create("video", "pyav", output="yuv", clip_len=4, stride=2, threads=1)
    blob = Blob(str(path), path=str(path))
    for sample in range(2):
        dec.decode(blob, DecodeHint(), SampleRNG(0, 0, sample, 0), {})
        (source,) = dec._sources().entries.values()
        assert source.ctx is None and not source.ready
        assert all(type(p[0]) is bytes for p in source.packets)
        payload = sum(len(p[0]) for p in source.packets)
        assert 0 < payload < path.stat().st_size
        assert source.nbytes == payload + PACKET_OVERHEAD * len(source.packets)
    clear_cache()


def test_a_file_changed_on_disk_is_read_again(tmp_path, monkeypatch):
    """The cache is keyed by the file on disk (size and modification time): a file rewritten in
    place gives its new frames, not the kept packets of the old one."""
    path = tmp_path / "clip.mkv"
    write_video(path, render_frames(H, W, 24, seed=1), gop=8)
    clear_cache()
    dec = create("video", "pyav", output="yuv", clip_len=4, stride=1, sampling="uniform", threads=1)
    blob = Blob(str(path), path=str(path))
    first = dec.decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {}).value
    stat = path.stat()
    write_video(path, render_frames(H, W, 24, seed=2), gop=8)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # a later write, whatever the clock
    opened = count_opens(monkeypatch)
    second = dec.decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {}).value
    ref = sequential_luma(path)
    assert opened  # read again
    assert not torch.equal(first, second)
    for t, frame in enumerate(range(10, 14)):  # uniform: the middle clip of 24 frames
        assert torch.equal(second[t, 0], torch.from_numpy(ref[frame]))
    clear_cache()


class _Fake:
    def __init__(self, nbytes: int) -> None:
        self.nbytes, self.closed = nbytes, False

    def close(self) -> None:
        self.closed = True


def test_source_cache_is_bounded_in_bytes_and_files():
    cache = SourceCache(max_bytes=100, max_files=3)
    a, b, c = _Fake(40), _Fake(40), _Fake(40)
    cache.put(("a",), a)
    cache.put(("b",), b)
    cache.put(("c",), c)  # 120 bytes: the least recently used goes, closed
    assert a.closed and not b.closed and cache.nbytes == 80 and list(cache.entries) == [("b",), ("c",)]
    big = _Fake(101)
    cache.put(("big",), big)  # larger than the whole budget: never kept
    assert big.closed and cache.nbytes == 80
    assert cache.take(("b",)) is b and cache.take(("b",)) is None and cache.nbytes == 40
    for key in "defg":
        cache.put((key,), _Fake(1))
    assert len(cache.entries) == 3 and c.closed  # the file bound
    cache.clear()
    assert cache.nbytes == 0 and not cache.entries


def test_a_failed_decode_does_not_return_its_source(files, monkeypatch):
    """A decode that raises leaves nothing behind: the decoder's state is unknown."""
    import mediapipe.decoders.video_pyav as vp

    path = files["mp4"]
    clear_cache()
    dec = create("video", "pyav", output="yuv", clip_len=4, stride=1, threads=1)
    blob = Blob(str(path), path=str(path))
    dec.index(blob)
    assert dec._sources().nbytes > 0

    def broken(self, frame, top, left, height, width):
        raise RuntimeError("boom")

    monkeypatch.setattr(vp.PyAVVideoDecoder, "_crop", broken)
    with pytest.raises(Exception, match="boom"):
        dec.decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {})
    assert dec._sources().nbytes == 0 and not dec._sources().entries
    clear_cache()


def test_loader_stats_split_the_decode_into_its_parts(files, tmp_path):
    """open, index, lead-in decode, useful decode, conversion and resize, each in ``stats.seconds``
    as decode_<part>, within the decode total (seek where a clip seeks)."""
    clear_cache()
    manifest = tmp_path / "v.jsonl"
    manifest.write_text("".join(json.dumps({"path": str(files[s]), "label": 0}) + "\n" for s in ("mp4", "ivf") * 2))
    pipe = mp.Pipeline(source=mp.loaders.manifest(manifest),
                       decode={"video": mp.decoders.video(clip_len=4, stride=2, sampling="uniform", threads=1)},
                       augment=[A.RandomResizedCrop(32, scale=(0.25, 1.0), key="video")], batch_size=2, seed=0)
    loader = pipe.loader(num_workers=0)
    assert sum(1 for _ in loader) == 2
    seconds = loader.stats.seconds
    parts = ["decode_open", "decode_index", "decode_lead_in", "decode_useful", "decode_convert", "decode_resize"]
    assert all(seconds[p] > 0 for p in parts), dict(seconds)
    assert sum(seconds[p] for p in parts) + seconds.get("decode_seek", 0.0) <= seconds["decode"]
    clear_cache()


@pytest.mark.parametrize(("suffix", "matrix", "colour_range"), [("mp4", "bt709", "full"), ("mkv", "bt2020", "limited")])
def test_a_new_decoder_for_a_kept_file_reads_the_colour_as_the_first(tmp_path, suffix, matrix, colour_range):
    """The second clip of a file decodes with a new decoder made from the kept parameters: the
    same RGB and colour code as the first clip (the index pass's decoder) for the same draw."""
    path = write_video(tmp_path / f"c.{suffix}", render_frames(H, W, 20, seed=4), gop=10, matrix=matrix,
                       range=colour_range)
    clear_cache()
    dec = create("video", "pyav", clip_len=4, stride=2, threads=1)
    blob = Blob(str(path), path=str(path))
    first = dec.decode(blob, DecodeHint(), SampleRNG(0, 0, 1, 0), {})
    assert dec._sources().entries  # kept: the second decode uses a new decoder
    second = dec.decode(blob, DecodeHint(), SampleRNG(0, 0, 1, 0), {})
    assert torch.equal(first.value, second.value)
    assert int(first.fields["colour"]) == int(second.fields["colour"])
    from mediapipe.augment.functional.video import colour_code

    assert int(second.fields["colour"]) == int(colour_code(matrix, colour_range))
    clear_cache()
