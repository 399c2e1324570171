"""image-train-128/160/192: image-train at progressive resizing's smaller sizes, on every backend
of the scenario (this library, torchvision, DALI; FFCV where installed): each delivers crops of
the scenario's side, and the fused decode of this library picks a reduced DCT scale more often
as the side shrinks."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediapipe.bench import images, scenarios
from mediapipe.bench.image_data import CROP, TRAIN, TRAIN_SIDES, scenario_ops, sized, torchvision_transform


def test_the_sized_scenarios_are_image_train_at_their_side():
    assert [sized(f"image-train-{side}") for side in TRAIN_SIDES] == [(TRAIN, side) for side in TRAIN_SIDES]
    assert sized("image-train") == (TRAIN, CROP) and sized("image-eval") == ("image-eval", CROP)
    assert sized("image-train-recipe") == ("image-train-recipe", CROP)
    assert sized("image-train-100") == ("image-train-100", CROP)  # not a registered side
    for side in TRAIN_SIDES:
        name = f"image-train-{side}"
        assert name in scenarios.SCENARIOS and scenarios.SCENARIOS[name].kind == "image"
        ours = scenario_ops(name)
        assert [type(op).__name__ for op in ours] == [type(op).__name__ for op in scenario_ops(TRAIN)]
        assert ours[0].size == (side, side)
        assert list(torchvision_transform(name).transforms[0].size) == [side, side]


@pytest.mark.parametrize("backend", ["mediapipe", "torchvision", "dali"])
def test_each_backend_delivers_crops_of_the_side(backend: str, image_folder: Path, monkeypatch):
    if backend == "dali":
        pytest.importorskip("nvidia.dali")
    shapes = []

    def record(batch):
        shapes.append(tuple(batch["image"].shape))
        return int(batch["image"].shape[0])

    monkeypatch.setattr(images, "touch_image", record)
    stream = images.open_stream("image-train-128", backend, image_folder, device="cpu", workers=1, batch_size=4,
                                options={"max_batches": 2})
    try:
        samples, _ = next(iter(stream))
    finally:
        stream.close()
    assert samples == 4 and shapes[0] == (4, 3, 128, 128)


def test_a_smaller_side_decodes_at_a_reduced_scale_more_often(image_folder: Path):
    """The reason the sizes are in the bench: RandomResizedCrop at a smaller side lets the JPEG
    decode at 1/2, 1/4 or 1/8 scale more often (`plan_decode`), where a full decode costs the same."""
    from mediapipe.decoders.image import plan_decode
    from mediapipe.rng import SampleRNG

    meta = {"size": (600, 800)}

    def reduced(side: int) -> int:
        op = scenario_ops(f"image-train-{side}" if side != CROP else TRAIN)[0]
        hints = [op.decode_hint(op.sample_params(SampleRNG(0, 0, i, 0), meta), meta) for i in range(200)]
        return sum(plan_decode(h, meta["size"]).denominator > 1 for h in hints)

    counts = [reduced(side) for side in (*TRAIN_SIDES, CROP)]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1], counts
