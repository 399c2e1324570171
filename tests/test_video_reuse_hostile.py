"""A worker's kept video files (`SourceCache`) against a hostile user: files replaced or
rewritten on disk with their mtime set back, or changed while they are read; files over the
limits; files of many tiny packets; failed samples; a decoder copied by pickle."""

from __future__ import annotations

import os
import pickle
import sys
import threading
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from mediapipe.decoders.base import DecodeHint, Limits
from mediapipe.decoders.registry import create
from mediapipe.decoders.video_index import Demuxed, cached_index, clear_cache, file_key
from mediapipe.errors import LimitError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.video import render_frames, write_video

H, W = 48, 64


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Two different 24-frame clips' bytes (Matroska, AV1)."""
    root = tmp_path_factory.mktemp("hostile_reuse")
    return {name: write_video(root / f"{name}.mkv", render_frames(H, W, 24, seed=seed), gop=8).read_bytes()
            for name, seed in (("a", 1), ("b", 2))}


def luma(data: bytes, tmp: Path) -> list[np.ndarray]:
    """Every frame's Y plane, decoded sequentially by PyAV (the oracle)."""
    path = tmp / "oracle.mkv"
    path.write_bytes(data)
    with av.open(str(path)) as container:
        return [np.frombuffer(f.planes[0], np.uint8).reshape(f.planes[0].height, -1)[:, : f.width].copy()
                for f in container.decode(video=0)]


def middle_clip(dec, blob: Blob) -> torch.Tensor:
    """The uniform (middle) clip of 4 frames: frames 10..13 of 24."""
    return dec.decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {}).value


def yuv_decoder(**options):
    return create("video", "pyav", output="yuv", clip_len=4, stride=1, sampling="uniform", threads=1, **options)


def assert_frames_of(clip: torch.Tensor, ref: list[np.ndarray]) -> None:
    for t, frame in enumerate(range(10, 14)):
        assert torch.equal(clip[t, 0], torch.from_numpy(ref[frame])), frame


@pytest.mark.parametrize("how", ["replaced", "in_place"])
def test_a_file_changed_with_its_mtime_set_back_is_read_again(videos, tmp_path, how):
    """A file replaced (rename over it) or rewritten in place, then given back its old
    modification time with ``os.utime``: the next clip has the new file's frames."""
    path = tmp_path / "clip.mkv"
    path.write_bytes(videos["a"])
    clear_cache()
    dec = yuv_decoder()
    blob = Blob(str(path), path=str(path))
    assert_frames_of(middle_clip(dec, blob), luma(videos["a"], tmp_path))
    st = path.stat()
    if how == "replaced":
        (tmp_path / "new.mkv").write_bytes(videos["b"])
        os.replace(tmp_path / "new.mkv", path)
    else:
        with open(path, "r+b") as f:
            f.write(videos["b"])
            f.truncate()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns
    assert_frames_of(middle_clip(dec, blob), luma(videos["b"], tmp_path))
    clear_cache()


def test_a_file_replaced_while_it_is_indexed_is_read_again(videos, tmp_path, monkeypatch):
    """The file is stat'ed before it is read: one replaced during its index pass is not kept
    under the new file's identity, so the next clip reads the new file."""
    import mediapipe.decoders.video_pyav as vp

    path = tmp_path / "clip.mkv"
    path.write_bytes(videos["a"])
    clear_cache()
    real = vp.build_index

    def replacing(*args, **kwargs):
        index = real(*args, **kwargs)
        (tmp_path / "new.mkv").write_bytes(videos["b"])
        os.replace(tmp_path / "new.mkv", path)
        return index

    monkeypatch.setattr(vp, "build_index", replacing)
    dec = yuv_decoder()
    blob = Blob(str(path), path=str(path))
    dec.decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {})  # indexed as "a", decoded from a's packets
    monkeypatch.setattr(vp, "build_index", real)
    assert_frames_of(middle_clip(dec, blob), luma(videos["b"], tmp_path))
    clear_cache()


def test_the_index_lookup_survives_a_key_that_changes_between_stats(videos, tmp_path, monkeypatch):
    """The index cache is looked up and refreshed under one key: a file touched (or an entry
    evicted by another thread) between the two is no KeyError."""
    import mediapipe.decoders.video_index as vi

    path = tmp_path / "clip.mkv"
    path.write_bytes(videos["a"])
    clear_cache()
    blob = Blob(str(path), path=str(path))
    index = yuv_decoder().index(blob)
    keys = iter([file_key(blob), ("touched",)])
    monkeypatch.setattr(vi, "file_key", lambda b: next(keys))
    assert cached_index(blob) is index
    clear_cache()


def test_an_over_limit_file_keeps_no_packets(videos, tmp_path):
    """A file refused by the limits leaves nothing in the worker's cache."""
    path = tmp_path / "clip.mkv"
    path.write_bytes(videos["a"])
    clear_cache()
    dec = yuv_decoder(limits=Limits(max_frames=20))
    with pytest.raises(LimitError, match="max_frames=20"):
        dec.index(Blob(str(path), path=str(path)))
    assert not dec._sources().entries and dec._sources().nbytes == 0
    assert dec._sources().live is None
    clear_cache()


def test_kept_packets_count_what_they_hold(videos, tmp_path):
    """A kept file's size in the cache's budget covers its packets' Python objects, not only their
    payload: many tiny packets cannot hold far more memory than the bound."""
    path = tmp_path / "clip.mkv"
    path.write_bytes(videos["a"])
    clear_cache()
    dec = yuv_decoder()
    middle_clip(dec, Blob(str(path), path=str(path)))
    (source,) = dec._sources().entries.values()
    held = sys.getsizeof(source.packets) + sum(sys.getsizeof(p) + sum(sys.getsizeof(x) for x in p[:3])
                                               for p in source.packets)  # p[3]: a bool, a singleton
    assert source.nbytes >= held
    clear_cache()


class _Packet:
    size = 1


def test_the_index_pass_bounds_packets_by_count_too():
    """The index pass stops keeping packets once their objects, not only their payload, pass the
    budget: a hostile container of millions of one-byte packets keeps none."""
    keep = Demuxed(max_bytes=16 << 10)
    for _ in range(1000):
        keep.add(_Packet())
    assert keep.packets is None


def test_a_failed_sample_leaves_no_stage_seconds_to_the_next(videos, tmp_path):
    """The parts of a decode that failed (here: opened and indexed, then over the frame limit)
    are not handed out with the next sample's, a kept file's clip, which opened nothing."""
    good, bad = tmp_path / "good.mkv", tmp_path / "bad.mkv"
    good.write_bytes(videos["a"])
    bad.write_bytes(videos["b"])
    clear_cache()
    dec = yuv_decoder(limits=Limits(max_frames=30))
    good_blob = Blob(str(good), path=str(good))
    middle_clip(dec, good_blob)  # kept: its next clip opens nothing
    dec.limits = Limits(max_frames=20)  # the next file is refused after its open and index pass
    with pytest.raises(LimitError):
        dec.decode(Blob(str(bad), path=str(bad)), DecodeHint(), SampleRNG(0, 0, 0, 0), {})
    dec.limits = Limits(max_frames=30)
    stages = dec.decode(good_blob, DecodeHint(), SampleRNG(0, 0, 1, 0), {}).stages
    assert stages.get("open", 0) == 0 and stages.get("index", 0) == 0, stages
    assert stages["useful"] > 0
    clear_cache()


def test_a_used_decoder_pickles_and_its_copy_decodes_the_same(videos, tmp_path):
    """A decoder that kept files (thread-local state) still pickles (spawn, Ray, deepcopy); the
    copy starts with no kept files of its own and gives the same clip."""
    path = tmp_path / "clip.mkv"
    path.write_bytes(videos["a"])
    clear_cache()
    dec = yuv_decoder()
    blob = Blob(str(path), path=str(path))
    first = middle_clip(dec, blob)
    assert dec._sources().entries
    copy = pickle.loads(pickle.dumps(dec))
    assert not copy._sources().entries
    assert torch.equal(middle_clip(copy, blob), first)
    clear_cache()


def test_a_file_indexed_by_a_thread_that_ended_serves_another_threads_clips(videos, tmp_path, monkeypatch):
    """Thread workers share the decoder's kept files: a file indexed by one thread (thread workers
    start new threads each epoch) is decoded by another without opening it again."""
    import mediapipe.decoders.video_pyav as vp

    path = tmp_path / "clip.mkv"
    path.write_bytes(videos["a"])
    clear_cache()
    dec = yuv_decoder()
    blob = Blob(str(path), path=str(path))
    worker = threading.Thread(target=dec.index, args=(blob,))
    worker.start()
    worker.join()
    opened: list[str] = []
    real = vp.open_container
    monkeypatch.setattr(vp, "open_container", lambda b, p, d: opened.append(p) or real(b, p, d))
    assert_frames_of(middle_clip(dec, blob), luma(videos["a"], tmp_path))
    assert opened == []
    clear_cache()


def test_threads_decoding_the_same_kept_file_at_once_get_exact_clips(videos, tmp_path):
    """Two threads decode clips of one file at once from the shared cache (a kept source is taken
    out while one decodes it; the other opens the file): every clip equals a full decode's frames."""
    path = tmp_path / "clip.mkv"
    path.write_bytes(videos["b"])
    clear_cache()
    ref = luma(videos["b"], tmp_path)
    dec = create("video", "pyav", output="yuv", clip_len=4, stride=2, threads=1)
    blob = Blob(str(path), path=str(path))
    wrong: list = []

    def clips(seed: int) -> None:
        try:
            for sample in range(8):
                rng = SampleRNG(seed, 0, sample, 0)
                plan = dec.plan(dec.index(blob), SampleRNG(seed, 0, sample, 0), str(path))
                x = dec.decode(blob, DecodeHint(), rng, {}).value
                wrong.extend((seed, sample) for t, f in enumerate(plan.clips[0]) if not torch.equal(x[t, 0], torch.from_numpy(ref[f])))
        except Exception as err:  # noqa: BLE001 - reported by the assertion below
            wrong.append(repr(err))

    threads = [threading.Thread(target=clips, args=(seed,)) for seed in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    assert len(dec._sources().entries) == 1
    clear_cache()
