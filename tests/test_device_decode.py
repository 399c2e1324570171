"""The device-decode stage (batched decoding in the training process, as on a GPU), run here
on the CPU with nvImageCodec: same parameters, same shapes, errors and policies."""

from __future__ import annotations

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from tests.conftest import state_after

pytest.importorskip("nvidia.nvimgcodec")


def pipeline(root, device_decode: bool, **kwargs) -> mp.Pipeline:
    return mp.Pipeline(mp.loaders.folder(root), {"image": mp.decoders.image("nvimgcodec", device_decode=device_decode)},
                       [A.RandomResizedCrop(40, scale=(0.3, 1.0)), A.HorizontalFlip(), A.Normalize()],
                       batch_size=6, seed=4, device="cpu", **kwargs)


def test_device_decode_gives_the_batches_of_worker_decode(image_folder):
    on_device = pipeline(image_folder, True)
    assert on_device.plan.deferred == {"image"}
    in_workers = pipeline(image_folder, False)
    assert not in_workers.plan.deferred
    for a, b in zip(on_device.loader(num_workers=2), in_workers.loader(num_workers=2)):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["label"], b["label"])
        assert a["image"].shape == b["image"].shape == (a["image"].shape[0], 3, 40, 40)
        assert torch.allclose(a["image"], b["image"])  # one decoder, one crop, one flip


def test_device_decode_resumes_like_the_worker_path(image_folder):
    pipe = pipeline(image_folder, True)
    full = [b["image"].clone() for b in pipe.loader(num_workers=1)]
    state = state_after(pipe.loader(num_workers=1), 1)
    resumed = pipe.loader(num_workers=1)
    resumed.load_state_dict(state)
    rest = [b["image"] for b in resumed]
    assert len(rest) == len(full) - 1 and all(torch.equal(x, y) for x, y in zip(rest, full[1:]))


def test_truncated_jpeg_on_the_device(tmp_path):
    from tests.conftest import write_image_folder

    write_image_folder(tmp_path, 6, classes=1, seed=2)
    bad = sorted(tmp_path.rglob("*.jpg"))[2]
    bad.write_bytes(bad.read_bytes()[:3000])
    with pytest.raises(mp.DecodeError, match=bad.name):
        list(pipeline(tmp_path, True).loader(shuffle=False))
    batches = list(pipeline(tmp_path, True, on_error="replace").loader(shuffle=False))
    assert batches[0]["valid"].tolist() == [True, True, False, True, True, True]


def test_side_fields_of_a_device_decoder_reach_the_batch(image_folder, monkeypatch):
    from mediapipe.decoders.base import Decoded
    from mediapipe.decoders.image_nvimgcodec import NvImageCodecImageDecoder

    decode_batch = NvImageCodecImageDecoder.decode_batch

    def with_sizes(self, blobs, hints, metas):  # a decoder that also reports each file's size
        out = decode_batch(self, blobs, hints, metas)
        return [Decoded(x, {"nbytes": len(b.read())}) for x, b in zip(out, blobs)]

    monkeypatch.setattr(NvImageCodecImageDecoder, "decode_batch", with_sizes)
    pipe = pipeline(image_folder, True)
    batch = next(iter(pipe.loader(shuffle=False)))
    expected = [next(iter(pipe.source.ref(i).blobs.values())).nbytes() for i in range(6)]
    assert batch["image_nbytes"].tolist() == expected
