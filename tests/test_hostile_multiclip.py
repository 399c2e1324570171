"""Hostile pass over the video-multiclip bench: the closure ceiling plans the clips the loader
plans (the decoder's draws, not another op's), a stream without a reference graph sends a
B-frame's forward reference too, and a video backend left out of a video scenario says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediapipe.bench import video as bv
from mediapipe.synthetic.video import render_frames, write_video


@pytest.fixture(scope="module")
def one_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile_multiclip")
    write_video(root / "only.mkv", render_frames(48, 64, 12, seed=1), gop=6)
    return root


def test_closure_ceiling_plans_the_clips_the_loader_plans(one_video, monkeypatch):
    """Random clips: the closure ceiling's item i is the clip the loader's decoder draws for row
    i (decoder_rng), not a clip of other draws (SampleRNG(0, 0, i, 0) is op 0's key)."""
    from mediapipe.decoders.video import VideoDecoder

    keys: dict[str, list[int]] = {"loader": [], "closure": []}
    who = ["loader"]
    plan = VideoDecoder.plan

    def recording(self, index, rng, path):
        keys[who[0]].append(rng.key)
        return plan(self, index, rng, path)

    monkeypatch.setattr(VideoDecoder, "plan", recording)
    kwargs = dict(workers=0, device="cpu", batches=2, clip_len=3, stride=2, size=32, batch_size=2)
    list(bv.run_mediapipe(one_video, **kwargs))
    who[0] = "closure"
    list(bv.run_closure_ceiling(one_video, **kwargs))
    assert len(keys["closure"]) == 4 and keys["loader"]
    assert set(keys["closure"]) <= set(keys["loader"]), keys


def test_closure_without_a_reference_graph_sends_what_a_b_frame_references(tmp_path, monkeypatch):
    """H.264 with B-frames (no AV1 graph: `needed` is None): a B-frame's forward reference is
    decoded before it, so the closure is the packets from the key frame to the wanted frame's own
    in decode order, not the display-order range (which leaves the reference out)."""
    from mediapipe.decoders.video import ClipPlan

    path = write_video(tmp_path / "b.mp4", render_frames(48, 64, 24, seed=2), gop=12, codec="libx264",
                       options={"bf": "2", "b-adapt": "0"})
    dataset = bv._ClosurePackets([path], 1, 1, 32, clips_per_video=1, sampling="random")
    dataset.prepare()
    _, index, packets, _ = dataset.kept[0]
    assert index.needed([5]) is None
    order = [index.frame_at(pts if pts is not None else dts) for _, pts, dts in packets]
    # a frame shown before one decoded ahead of it: a B-frame
    w = next(f for n, f in enumerate(order) if any(g > f for g in order[:n]))
    key = index.keyframe_before(w)
    expected = set(order[order.index(key) : order.index(w) + 1])
    assert max(expected) > w  # its forward reference
    monkeypatch.setattr(dataset.planner, "plan", lambda *a: ClipPlan(((w,),), stacked=False))
    assert dataset[0] == len(expected)


@pytest.mark.parametrize("backend", ["pyav", "dav1d", "ceiling"])
def test_a_video_backend_left_out_of_the_multiclip_scenario_says_why(backend):
    """`mediapipe bench --scenario video-multiclip --backends pyav` said "the PyAV baseline is for
    video and audio; torchvision is the image baseline": no reason for a video scenario."""
    from mediapipe.bench import scenarios

    why = scenarios.why_not(scenarios.SCENARIOS["video-multiclip"], backend, "cpu")
    assert why.startswith("not applicable") and "image" not in why and "is for video" not in why
    assert "clip" in why and ("clipwise" in why or "closure" in why), why


def test_clipwise_on_the_single_clip_scenario_says_why():
    from mediapipe.bench import scenarios

    why = scenarios.why_not(scenarios.SCENARIOS["video-clips"], "mediapipe-clipwise", "cpu")
    assert why.startswith("not applicable") and "video-multiclip" in why, why
