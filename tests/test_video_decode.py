"""The video decoder: seeking returns exactly the frames of a full sequential decode (bit-exact
YUV), in MP4, Matroska/WebM and IVF, with short and long GOPs; clip sampling, padding, fps
resampling, several clips per video, the fused crop/resize, and the frame index."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import av
import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe.decoders.base import DecodeHint
from mediapipe.decoders.registry import create
from mediapipe.decoders.video import plan_clips
from mediapipe.decoders.video_index import cached_index, clear_cache
from mediapipe.errors import DecodeError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.video import read_counter, render_frames, write_video

H, W = 96, 128


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """AV1 in four containers (GOP 10), AV1 with a single key frame (long GOP), H.264 with B-frames."""
    root = tmp_path_factory.mktemp("video")
    frames = list(render_frames(H, W, 45, seed=3))
    out = {}
    for suffix in ("mp4", "mkv", "webm", "ivf"):
        out[suffix] = write_video(root / f"gop10.{suffix}", frames, gop=10)
    out["long"] = write_video(root / "long.mkv", frames, gop=300)
    # H.264 with B-frames: packets arrive in decode order, frames in presentation order
    out["h264"] = write_video(root / "h264.mp4", frames, codec="libx264", gop=15, options={"preset": "fast", "bf": "3"})
    return out


def sequential_yuv(path: Path) -> list[np.ndarray]:
    """Every frame in order, as (Y, U, V) planes, through a plain PyAV decode."""
    out = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            planes = [np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, : p.width].copy()
                      for p in frame.planes]
            out.append(planes)
    return out


def expected_clip(ref: list[np.ndarray], frames: tuple[int, ...]) -> torch.Tensor:
    """(T, 3, H, W) YUV planes with the chroma upsampled as the decoder does at full size."""
    y = torch.from_numpy(np.stack([ref[f][0] for f in frames]))
    uv = torch.from_numpy(np.stack([np.stack([ref[f][1], ref[f][2]]) for f in frames]))
    uv = uv.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)  # FFmpeg's 2x2 replication
    return torch.cat([y[:, None], uv], dim=1)


def decoder(**options):
    return create("video", "pyav", output="yuv", **options)


def record_decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pts of every frame the pyav backend decodes from now on (lead-in included)."""
    import mediapipe.decoders.video_pyav as vp

    decoded: list[int] = []
    real = vp._decoded

    def counting(container, stream, ctx, tally, only=None, ready=None):
        for frame in real(container, stream, ctx, tally, only, ready):
            decoded.append(frame.pts)
            yield frame

    monkeypatch.setattr(vp, "_decoded", counting)
    return decoded


@pytest.mark.parametrize("container", ["mp4", "mkv", "webm", "ivf", "long", "h264"])
@pytest.mark.parametrize("sampling", ["random", "uniform", "all"])
def test_clips_equal_sequential_decode(clips, container, sampling):
    path = clips[container]
    ref = sequential_yuv(path)
    dec = decoder(clip_len=6, stride=2, sampling=sampling, clips_per_video=2 if sampling != "all" else 1)
    blob = Blob(str(path), path=str(path))
    index = dec.index(blob)
    assert index.frames == len(ref) == 45
    for sample in range(4 if sampling == "random" else 1):
        rng = SampleRNG(7, 0, sample, 0)
        plan = dec.plan(index, SampleRNG(7, 0, sample, 0), str(path))
        x = dec.decode(blob, DecodeHint(), rng, {}).value
        assert x.dtype == torch.uint8 and x.shape[1:] == (6, 3, H, W)
        assert x.shape[0] == len(plan.clips)
        for n, clip in enumerate(plan.clips):
            assert torch.equal(x[n], expected_clip(ref, clip)), (container, sampling, clip)
            assert [read_counter(f[0].numpy()) for f in x[n]] == list(clip)


def test_a_clip_from_the_end_decodes_one_gop(clips, monkeypatch):
    """A clip near the end seeks to the key frame before it and decodes forward: at most a
    GOP plus the clip, never the whole file."""
    path = clips["mp4"]
    dec = decoder(clip_len=4, stride=1, sampling="uniform")
    blob = Blob(str(path), path=str(path))
    index = dec.index(blob)
    decoded = record_decoded(monkeypatch)
    plan = plan_clips(index.frames, index.fps, clip_len=4, stride=1, fps=None, clips_per_video=1,
                      sampling="all", pad="error", rng=None)
    last = plan.clips[-1]  # frames 40..43
    assert last[0] >= 40
    planes, _, count = dec.decode_frames(blob, index, list(last), (0, 0, H, W))
    assert [read_counter(p) for p in planes.planes("luma").numpy()] == list(last)
    # key frames every 10: decoding starts at 40, not 0 (frame threads may add a frame or two)
    assert len(decoded) <= len(last) + 3, len(decoded)
    assert len(decoded) <= count <= len(decoded) + 2  # what came out of the decoder, frame-thread lag included


def test_index_cached_and_from_meta(clips):
    clear_cache()
    path = clips["mkv"]
    blob = Blob(str(path), path=str(path))
    dec = decoder(clip_len=4)
    index = dec.index(blob)
    assert cached_index(blob) is index
    assert index.keyframes == (0, 10, 20, 30, 40)
    assert abs(index.fps - 24) < 1e-6 and abs(index.duration - 45 / 24) < 1e-6
    assert index.matrix == "bt601" and index.range == "limited"
    # a converted dataset's metadata skips the demux pass, and clips still match
    clear_cache()
    meta = {"frames": 45, "fps": 24.0, "keyframes": [0, 10, 20, 30, 40]}
    from_meta = dec.index(blob, meta)
    assert from_meta.pts is None and from_meta.keyframes == index.keyframes
    ref = sequential_yuv(path)
    for sample in range(3):
        x = dec.decode(blob, DecodeHint(), SampleRNG(1, 0, sample, 0), meta).value
        plan = dec.plan(from_meta, SampleRNG(1, 0, sample, 0), str(path))
        assert torch.equal(x, expected_clip(ref, plan.clips[0]))
    clear_cache()


def test_plan_padding_fps_and_uniform():
    rng = SampleRNG(0, 0, 0, 0)
    kw = dict(clip_len=5, stride=2, fps=None, clips_per_video=1, sampling="random", rng=rng)
    assert plan_clips(6, 24, pad="repeat_last", **kw).clips == ((0, 2, 4, 5, 5),)
    assert plan_clips(6, 24, pad="loop", **kw).clips == ((0, 2, 4, 0, 2),)
    with pytest.raises(DecodeError, match="clip needs 9 frames"):
        plan_clips(6, 24, pad="error", path="short.mp4", **kw)
    # 30 fps source resampled to 15 fps: every other source frame, times stride
    plan = plan_clips(100, 30, clip_len=4, stride=1, fps=15, clips_per_video=1, sampling="uniform",
                      pad="error", rng=None)
    assert np.diff(plan.clips[0]).tolist() == [2, 2, 2]
    plan = plan_clips(100, 30, clip_len=4, stride=1, fps=None, clips_per_video=3, sampling="uniform",
                      pad="error", rng=None)
    assert [c[0] for c in plan.clips] == [0, 48, 96] and plan.stacked
    plan = plan_clips(20, 30, clip_len=4, stride=2, fps=None, clips_per_video=1, sampling="all",
                      pad="error", rng=None)
    assert [c[0] for c in plan.clips] == [0, 7] and plan.stacked


def test_fused_region_and_size(clips):
    """A hint crops the planes exactly as drawn (odd edges too, no snapping to the 4:2:0 grid)
    and resizes them; the crop equals cropping the full-size YUV output."""
    path = clips["webm"]
    blob = Blob(str(path), path=str(path))
    dec = decoder(clip_len=3, sampling="uniform")
    full = dec.decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {}).value
    for roi in ((10, 20, 50, 64), (11, 21, 49, 63), (0, 1, 95, 127)):
        top, left, h, w = roi
        part = dec.decode(blob, DecodeHint(roi=roi), SampleRNG(0, 0, 0, 0), {}).value
        assert torch.equal(part, full[:, :, top : top + h, left : left + w]), roi
    small = dec.decode(blob, DecodeHint(roi=(11, 21, 49, 63), size=(25, 32)), SampleRNG(0, 0, 0, 0), {}).value
    assert small.shape == (3, 3, 25, 32)
    with pytest.raises(DecodeError, match="outside"):
        dec.decode(blob, DecodeHint(roi=(200, 0, 10, 10)), SampleRNG(0, 0, 0, 0), {})


def test_pipeline_clip_batches(clips, tmp_path):
    """Through mp.Pipeline: (B, T, C, H, W) batches, the crop fused into the decoder, and a
    dataset that mixes AV1 containers with H.264."""
    from mediapipe import augment as A

    for name in ("mp4", "ivf", "h264"):
        (tmp_path / f"{name}.{clips[name].suffix[1:]}").symlink_to(clips[name])
    pipe = mp.Pipeline(source=mp.loaders.folder(tmp_path),
                       decode={"video": mp.decoders.video(clip_len=4, stride=2, output="rgb")},
                       augment=[A.RandomResizedCrop(32, key="video"), A.HorizontalFlip(key="video")],
                       batch_size=3, seed=0, device="cpu")
    assert "fused into decode" in pipe.plan.describe()
    batch = next(iter(pipe.loader(num_workers=0, shuffle=False)))
    assert batch["video"].shape == (3, 4, 3, 32, 32) and batch["video"].dtype == torch.uint8


def test_video_spec_validates_arguments():
    for bad in ({"clip_len": 0}, {"stride": 0}, {"sampling": "dense"}, {"pad": "zeros"}, {"output": "bgr"},
                {"fps": -1}, {"clips_per_video": 0}):
        with pytest.raises(ValueError):
            mp.decoders.video(**bad)
    spec = mp.decoders.video(clip_len=8, output="yuv")
    assert spec.kind == "video" and spec.options["clip_len"] == 8
    assert type(spec.from_config(spec.to_config())) is type(spec)


def test_decoded_span_says_when_the_clips_play(clips):
    """`Decoded.span` (what a field decoded from_field this one gets): from each clip's first
    frame's time to its last frame's end, on the file's timeline."""
    path = clips["mkv"]
    blob = Blob(str(path), path=str(path))
    for options in ({"clip_len": 4, "stride": 2}, {"clip_len": 3, "clips_per_video": 2, "sampling": "uniform"}):
        dec = decoder(**options)
        out = dec.decode(blob, DecodeHint(), SampleRNG(0, 0, 5, 0), {})
        plan = dec.plan(dec.index(blob), SampleRNG(0, 0, 5, 0), str(path))
        assert out.span.stacked == plan.stacked and len(out.span.spans) == len(plan.clips)
        for (start, end), clip in zip(out.span.spans, plan.clips):
            # Matroska timestamps are in milliseconds: the frames' own times, not i / 24
            assert start == pytest.approx(clip[0] / 24, abs=1e-3) and end == pytest.approx((clip[-1] + 1) / 24, abs=1e-3)


@pytest.mark.parametrize("interpolation, antialias", [("bicubic", True), ("bilinear", False), ("bicubic", False)])
def test_fused_resize_follows_the_hint_resampling(clips, interpolation, antialias):
    """The fused plane resize uses the hint's interpolation and antialias: its luma equals the
    unfused op's (full-size decode, then the op's own resize) on the same region."""
    from mediapipe.augment.functional.geometry import resized_crop_image

    path = clips["mp4"]
    blob = Blob(str(path), path=str(path))
    dec = decoder(clip_len=4, sampling="uniform")
    roi, size = (8, 16, 48, 64), (20, 24)
    full = dec.decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {}).value
    unfused = resized_crop_image(full, *roi, size, interpolation, antialias)
    fused = dec.decode(blob, DecodeHint(roi=roi, size=size, interpolation=interpolation, antialias=antialias),
                       SampleRNG(0, 0, 0, 0), {}).value
    assert fused.shape == unfused.shape
    assert torch.equal(fused[:, 0], unfused[:, 0])  # luma: the same kernel on the same plane
    assert (fused[:, 1:].int() - unfused[:, 1:].int()).abs().float().mean() < 2.0  # chroma: from its own grid
    default = dec.decode(blob, DecodeHint(roi=roi, size=size), SampleRNG(0, 0, 0, 0), {}).value
    assert not torch.equal(default[:, 0], fused[:, 0])  # the hint changed the result: the test can fail


def test_lead_in_and_skipped_frames_are_decoded_but_never_cropped(clips, monkeypatch):
    """Frames before the first wanted one (from the key frame) and between strided picks are
    only decoded: the decoder reads the planes of the wanted frames alone."""
    import mediapipe.decoders.video_pyav as vp

    path = clips["long"]  # one key frame: a clip late in the file decodes a long lead-in
    dec = decoder(clip_len=4, stride=3, sampling="uniform")
    cropped = []
    real_crop = vp.PyAVVideoDecoder._crop

    def crop(self, frame, *args):
        cropped.append(frame.pts)
        return real_crop(self, frame, *args)

    monkeypatch.setattr(vp.PyAVVideoDecoder, "_crop", crop)
    decoded = record_decoded(monkeypatch)
    result = dec.decode(Blob(str(path), path=str(path)), DecodeHint(), SampleRNG(0, 0, 0, 0), {})
    out = result.value
    assert len(cropped) == 4 and out.shape[0] == 4
    index = dec.index(Blob(str(path), path=str(path)))
    wanted = sorted({f for clip in dec.plan(index, SampleRNG(0, 0, 0, 0), str(path)).clips for f in clip})
    assert len(decoded) >= len(index.needed(wanted)) > 4  # the frames the picks reference, from frame 0 on
    assert result.frames >= len(decoded)  # counted, though never cropped


@pytest.mark.parametrize("container", ["mp4", "mkv", "webm", "ivf", "long"])
def test_index_knows_which_frames_libdav1d_keeps_when_skipping_non_reference_frames(clips, container):
    """`VideoIndex.references` (read from the AV1 frame headers) equals what libdav1d opened
    with skip_frame="NONREF" outputs."""
    path = clips[container]
    clear_cache()
    index = decoder().index(Blob(str(path), path=str(path)))
    assert index.references is not None and len(index.references) == index.frames
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        stream.codec_context.skip_frame = "NONREF"
        kept = {index.frame_at(f.pts) for f in c.decode(stream)}
    assert 0 < len(kept) < index.frames  # some are skipped: the comparison means something
    assert [i in kept for i in range(index.frames)] == index.references.tolist()


@pytest.mark.parametrize("container", ["mp4", "mkv", "webm", "ivf", "long"])
def test_reference_graph_closure_decodes_only_what_the_clip_needs_bit_exactly(clips, container, monkeypatch):
    """`VideoIndex.deps` (from the AV1 frame headers): a clip's frames and what they reference,
    transitively. Only those packets reach the decoder; the frames are bit-identical to a
    sequential decode, and fewer are decoded than from the key frame on."""
    import mediapipe.decoders.video_pyav as vp

    path = clips[container]
    blob = Blob(str(path), path=str(path))
    dec = decoder(clip_len=4, stride=2, threads=1)
    clear_cache()
    index = dec.index(blob)
    assert index.deps is not None and len(index.deps) == index.frames
    assert all(d < i for i, deps in enumerate(index.deps) for d in deps)  # only earlier frames
    assert all(index.deps[k] == () for k in index.keyframes)
    ref = sequential_yuv(path)
    decoded = record_decoded(monkeypatch)
    for wanted in ([21, 23, 25, 27], [26, 28, 30, 32], [38, 40, 42, 44], [1, 3, 5, 7]):
        needed = index.needed(wanted)
        assert set(wanted) <= set(needed) and min(needed) >= index.keyframe_before(wanted[0])
        before = dict(vp.PyAVVideoDecoder.paths)
        decoded.clear()
        planes, _, count = dec.decode_frames(blob, index, wanted, (0, 0, H, W))
        assert vp.PyAVVideoDecoder.paths["closure"] == before.get("closure", 0) + 1
        assert sorted(index.frame_at(p) for p in decoded) == needed and count == len(needed)
        assert count < wanted[-1] - index.keyframe_before(wanted[0]) + 1 or wanted[0] < 2
        assert torch.equal(planes.planes("luma"), torch.from_numpy(np.stack([ref[f][0] for f in wanted])))
        chroma = expected_clip(ref, tuple(wanted))[:, 1:].transpose(0, 1).reshape(-1, H, W)  # U..., V...
        assert torch.equal(planes.planes("chroma"), chroma)


def test_a_wrong_graph_costs_a_second_decode_never_a_wrong_frame(clips, monkeypatch):
    import mediapipe.decoders.video_pyav as vp

    path = clips["long"]
    blob = Blob(str(path), path=str(path))
    dec = decoder(threads=1)
    index = dec.index(blob)
    wanted = [30, 31]
    monkeypatch.setattr(type(index), "needed", lambda self, frames: list(frames))  # references left out
    before = dict(vp.PyAVVideoDecoder.paths)
    try:
        planes, _, count = dec.decode_frames(blob, index, wanted, (0, 0, H, W))
    except DecodeError:
        pytest.fail("the fallback decode should have produced the frames")
    ref = sequential_yuv(path)
    assert torch.equal(planes.planes("luma"), torch.from_numpy(np.stack([ref[f][0] for f in wanted])))
    retried = vp.PyAVVideoDecoder.paths["closure_retry"] - before.get("closure_retry", 0)
    closure = vp.PyAVVideoDecoder.paths["closure"] - before.get("closure", 0)
    # libdav1d either refuses the frames (then the clip is decoded again) or never outputs them
    assert retried == 1 and closure == 0, (retried, closure)


def test_decoded_frames_count_what_the_clip_needs(clips):
    """`Decoded.frames` is what the decoder produced: the clip's reference closure (one thread:
    no frame-thread lag); without the graph, every frame from the key frame before the clip on."""
    path = clips["mp4"]
    blob = Blob(str(path), path=str(path))
    dec = decoder(clip_len=3, stride=1, threads=1)
    index = dec.index(blob)
    assert index.keyframes == (0, 10, 20, 30, 40)
    for wanted in ([27, 28, 29], [12, 13, 14], [0, 1, 2]):
        _, _, count = dec.decode_frames(blob, index, wanted, (0, 0, H, W))
        assert count == len(index.needed(wanted)) <= wanted[-1] - index.keyframe_before(wanted[0]) + 1, wanted
    no_graph = replace(index, deps=None, references=None)
    _, _, count = dec.decode_frames(blob, no_graph, [27, 28, 29], (0, 0, H, W))
    assert count == 29 - 20 + 1
    # through decode(): a "uniform" clip (frames 21..23) of the same file
    uniform = decoder(clip_len=3, stride=1, sampling="uniform", threads=1)
    out = uniform.decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {})
    first, last = (int(f) for f in (index.frames - 3) // 2 + np.array([0, 2]))
    assert out.frames == len(index.needed(list(range(first, last + 1)))) >= 3


@pytest.mark.parametrize("container", ["mp4", "long"])
def test_decoded_frames_of_all_clips_are_every_frame(clips, container):
    """sampling="all" over clips that tile the file decodes it once, front to back."""
    path = clips[container]
    blob = Blob(str(path), path=str(path))
    dec = decoder(clip_len=5, stride=1, sampling="all", threads=1)  # 9 clips of 5 = the 45 frames
    out = dec.decode(blob, DecodeHint(), SampleRNG(0, 0, 0, 0), {})
    assert out.value.shape[:2] == (9, 5)
    assert out.frames == dec.index(blob).frames == 45
