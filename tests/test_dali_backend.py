"""The DALI backend against this library's torch backend, on DALI's CPU operators (device_id=None)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.base import Op
from mediapipe.errors import PipelineError

pytest.importorskip("nvidia.dali")

from mediapipe.loaders.dali import DaliLoader, dali_available, lowering_table  # noqa: E402

# Deterministic ops: DALI's libjpeg-turbo decode and antialiased linear resize differ from
# ours by rounding only. In normalised units (x / 255 - mean) / std with std >= 0.224, one
# grey level is 0.0175: we allow two at any pixel, and a quarter of a level on average.
MAX_ABS = 2 / 255 / 0.224
MEAN_ABS = 0.25 / 255 / 0.224


def _pipe(root, augment, batch_size=5, seed=0, source=None):
    return mp.Pipeline(source=source or mp.loaders.folder(root), decode={"image": mp.decoders.image()},
                       augment=augment, batch_size=batch_size, seed=seed, device="cpu")


def _both(pipe, **kwargs):
    return list(pipe.loader(backend="dali", **kwargs)), list(pipe.loader(backend="torch", **kwargs))


def test_importing_the_library_does_not_import_dali():
    code = "import sys, mediapipe, mediapipe.loaders.dali; print('nvidia.dali' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert dali_available()


def test_deterministic_pipeline_equals_torch_backend(image_folder):
    pipe = _pipe(image_folder, [A.Resize(128), A.CenterCrop(112), A.Normalize()])
    dali, torch_ = _both(pipe, shuffle=False)
    assert len(dali) == len(torch_) == len(pipe.loader(backend="dali")) == 5
    for a, b in zip(dali, torch_):
        assert set(a) == set(b) == {"image", "label", "index"}
        for key in b:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["label"], b["label"])
        diff = (a["image"] - b["image"]).abs()
        assert diff.max().item() <= MAX_ABS, diff.max().item()
        assert diff.mean().item() <= MEAN_ABS, diff.mean().item()


def test_converted_shards_feed_the_same_samples(image_folder, tmp_path):
    # tar members are read as byte ranges by our source and fed in our sampler's order
    from mediapipe.convert import convert

    convert(image_folder, tmp_path / "shards", shard_size=8)
    pipe = _pipe(None, [A.Resize(128), A.CenterCrop(112), A.Normalize()], batch_size=6,
                 source=mp.loaders.shards(tmp_path / "shards"))
    dali, torch_ = _both(pipe, rank=1, world_size=2)
    assert len(dali) == len(torch_) == 2
    for a, b in zip(dali, torch_):
        assert set(a) == set(b)
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["label"], b["label"])
        assert (a["image"] - b["image"]).abs().max().item() <= MAX_ABS


def test_uint8_output_without_normalize_is_chw_like_torch(image_folder):
    pipe = _pipe(image_folder, [A.Resize((96, 80)), A.VerticalFlip(p=1.0)], batch_size=8)
    dali, torch_ = _both(pipe, shuffle=False)
    for a, b in zip(dali, torch_):
        assert a["image"].dtype == torch.uint8 and a["image"].shape == b["image"].shape == (8, 3, 96, 80)
        # our decoder scales in the DCT domain when shrinking by 2 or more (DALI decodes whole and
        # resizes): two to three grey levels on average on fine texture; a missing flip gives tens
        assert (a["image"].int() - b["image"].int()).abs().float().mean() < 4.0


def test_random_ops_shapes_ranges_labels_and_sample_sets(image_manifest):
    source = mp.loaders.manifest(image_manifest)
    pipe = _pipe(None, [A.RandomResizedCrop(64, scale=(0.2, 1.0)), A.HorizontalFlip(), A.Normalize()],
                 batch_size=6, seed=3, source=source)
    dali_loader, torch_loader = pipe.loader(backend="dali"), pipe.loader(backend="torch")
    lo = (0 - max(A.IMAGENET_MEAN)) / min(A.IMAGENET_STD)
    hi = (1 - min(A.IMAGENET_MEAN)) / min(A.IMAGENET_STD)
    for epoch in range(2):
        dali, torch_ = list(dali_loader), list(torch_loader)
        assert dali_loader.epoch == torch_loader.epoch == epoch + 1
        assert len(dali) == len(torch_) == 4
        for a, b in zip(dali, torch_):
            assert set(a) == set(b) == {"image", "label", "index", "weight"}
            for key in b:
                assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
            assert torch.equal(a["index"], b["index"])  # same samples, same order, every epoch
            assert torch.equal(a["label"], b["label"]) and torch.equal(a["weight"], b["weight"])
            expected = torch.tensor([source.ref(int(i)).label for i in a["index"]])
            assert torch.equal(a["label"], expected)
            assert lo - 1e-4 <= a["image"].min() and a["image"].max() <= hi + 1e-4
            assert a["image"].std() > 0.1
    # DALI draws its own crops: random ops differ from the torch backend's (documented)
    assert not torch.allclose(dali[0]["image"], torch_[0]["image"], atol=0.1)


def test_epochs_are_reshuffled_and_a_fresh_epoch_is_reseeded(image_folder):
    pipe = _pipe(image_folder, [A.RandomResizedCrop(32), A.Normalize()], batch_size=24)
    loader = pipe.loader(backend="dali")
    (first,), (second,) = list(loader), list(loader)
    assert sorted(first["index"].tolist()) == sorted(second["index"].tolist()) == list(range(24))
    assert not torch.equal(first["index"], second["index"])
    loader.set_epoch(0)
    (again,) = list(loader)  # a pipeline started at an epoch is seeded by (seed, rank, epoch)
    assert torch.equal(again["index"], first["index"]) and torch.equal(again["image"], first["image"])


@pytest.mark.parametrize("last_batch, sizes", [("drop", [5, 5, 5, 5]), ("partial", [5, 5, 5, 5, 4]),
                                               ("pad", [5, 5, 5, 5, 5])])
def test_last_batch_policies(image_folder, last_batch, sizes):
    pipe = _pipe(image_folder, [A.RandomResizedCrop(32), A.Normalize()])
    loader = pipe.loader(backend="dali", last_batch=last_batch)
    reference = list(pipe.loader(backend="torch", last_batch=last_batch))
    batches = list(loader)
    assert len(loader) == len(batches) == len(sizes)
    assert [len(b["index"]) for b in batches] == [b["image"].shape[0] for b in batches] == sizes
    for a, b in zip(batches, reference):
        assert torch.equal(a["index"], b["index"])
        assert ("valid" in a) == ("valid" in b)
        if "valid" in b:
            assert torch.equal(a["valid"], b["valid"])
    if last_batch == "pad":
        assert [int(b["valid"].sum()) for b in batches] == [5, 5, 5, 5, 4]


def test_sharding_by_rank_matches_torch_backend(image_folder):
    pipe = _pipe(image_folder, [A.RandomResizedCrop(32), A.Normalize()], batch_size=4)
    seen = []
    for rank in range(2):
        dali = list(pipe.loader(backend="dali", rank=rank, world_size=2))
        torch_ = list(pipe.loader(backend="torch", rank=rank, world_size=2))
        assert len(dali) == len(torch_) == 3
        for a, b in zip(dali, torch_):
            assert torch.equal(a["index"], b["index"])
        seen += torch.cat([b["index"] for b in dali]).tolist()
    assert sorted(seen) == list(range(24))


def test_resume_mid_epoch_equals_uninterrupted_run(image_folder):
    augment = [A.RandomResizedCrop(48), A.HorizontalFlip(), A.Normalize()]
    full = list(_pipe(image_folder, augment, seed=7).loader(backend="dali"))
    loader = _pipe(image_folder, augment, seed=7).loader(backend="dali")
    it = iter(loader)
    for _ in range(2):
        next(it)
    state = loader.state_dict()
    assert state["sampler"]["position"] == 2 and "dali" in state
    resumed = _pipe(image_folder, augment, seed=7).loader(backend="dali")
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(rest) == len(full) - 2
    for a, b in zip(rest, full[2:]):
        assert torch.equal(a["index"], b["index"])
        assert torch.equal(a["image"], b["image"])  # DALI's generators restored from its checkpoint
    assert resumed.epoch == 1
    # breaking out and iterating again continues where the last delivered batch left off
    it2 = iter(loader)
    assert torch.equal(next(it2)["image"], full[2]["image"])


def test_resume_at_an_epoch_boundary(image_folder):
    # the pipeline runs on across epochs, so DALI's state at the boundary travels in the checkpoint
    augment = [A.RandomResizedCrop(40), A.HorizontalFlip(), A.Normalize()]
    loader = _pipe(image_folder, augment, batch_size=8, seed=5).loader(backend="dali")
    list(loader)
    state = loader.state_dict()
    assert state["sampler"]["epoch"] == 1 and state["sampler"]["position"] == 0 and "dali" in state
    second = list(loader)
    resumed = _pipe(image_folder, augment, batch_size=8, seed=5).loader(backend="dali")
    resumed.load_state_dict(state)
    for a, b in zip(resumed, second, strict=True):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])


@dataclass(frozen=True)
class Posterize(Op):
    """A test op with no DALI counterpart."""

    bits: int = 4


def test_unsupported_ops_are_listed_at_build_time(image_folder):
    pipe = _pipe(image_folder, [A.RandomResizedCrop(32), Posterize(), A.Normalize(dtype="bfloat16"), Posterize(),
                                A.ColorJitter(hue=0.1), A.MixUp(num_classes=3)])
    with pytest.raises(PipelineError) as info:
        pipe.loader(backend="dali")
    message = str(info.value)
    assert "augment[1] Posterize" in message and "augment[3] Posterize" in message
    assert "augment[2] Normalize(dtype='bfloat16'" in message
    assert "augment[4] ColorJitter(hue" in message and "augment[5] MixUp" in message
    assert "backend='torch'" in message and "RandomResizedCrop" not in message.split("Lowered ops")[0]
    with pytest.raises(PipelineError, match="on_error='skip'"):
        mp.Pipeline(source=mp.loaders.folder(image_folder), decode={"image": mp.decoders.image()},
                    on_error="skip", device="cpu").loader(backend="dali")


def test_missing_dali_says_how_to_install(image_folder, monkeypatch):
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # import nvidia.dali now raises ImportError
    with pytest.raises(ImportError, match=r"pip install mediapipe-loader\[dali\]"):
        DaliLoader(_pipe(image_folder, [A.Resize(32)]))


def test_unknown_option_is_rejected_and_table_lists_ops(image_folder):
    with pytest.raises(TypeError):
        _pipe(image_folder, [A.Resize(32)]).loader(backend="dali", worker_type="thread")
    table = lowering_table()
    assert "image_random_crop" in table["RandomResizedCrop"] and "crop_mirror_normalize" in table["Normalize"]



def test_keyed_rng_gives_the_torch_backends_crops_and_flips(image_folder):
    pipe = _pipe(image_folder, [A.RandomResizedCrop(160), A.HorizontalFlip(), A.VerticalFlip(), A.Normalize()],
                 batch_size=8, seed=1)
    dali_loader, torch_loader = pipe.loader(backend="dali", rng="keyed"), pipe.loader(backend="torch")
    for _ in range(2):  # two epochs: each epoch's draws are keyed by it
        for a, b in zip(dali_loader, torch_loader, strict=True):
            assert torch.equal(a["index"], b["index"])
            # same windows and flips: rounding apart, a few grey levels where the region's
            # edge falls between pixels of the reduced-size decode (a wrong draw: about 0.8 mean)
            diff = (a["image"] - b["image"]).abs()
            assert diff.mean().item() <= MEAN_ABS and diff.max().item() <= 8 / 255 / 0.224


def test_fields_of_one_op_share_its_crop_and_flip(image_folder):
    pipe = mp.Pipeline(source=mp.loaders.folder(image_folder), device="cpu", batch_size=8, seed=4,
                       decode={"image": mp.decoders.image(), "mask": mp.decoders.image(mode="L")},
                       augment=[A.RandomResizedCrop(48, keys=("image", "mask")),
                                A.HorizontalFlip(keys=("image", "mask"))])
    batch = next(iter(pipe.loader(backend="dali")))
    assert batch["image"].shape == (8, 3, 48, 48) and batch["mask"].shape == (8, 1, 48, 48)
    luma = (batch["image"].float() * torch.tensor([0.299, 0.587, 0.114]).reshape(1, 3, 1, 1)).sum(1, keepdim=True)
    # the same window and the same flip: the grey decode is the colour one's luma (a few levels apart)
    assert (luma - batch["mask"].float()).abs().mean() < 3.0


BLOCK = [A.Resize(128), A.CenterCrop(112)]


@pytest.mark.parametrize("ops, max_levels", [
    ([A.GaussianBlur(5, sigma=(0.5, 2.0))], 1),
    ([A.RandomGrayscale(p=0.5)], 1),
    ([A.RandomCrop(100, padding=4)], 1),
    ([A.Pad((3, 5), fill=7)], 1),
    ([A.ColorJitter(brightness=0.4)], 2),
    ([A.ColorJitter(contrast=0.4)], 2),
    ([A.ColorJitter(saturation=0.4)], 2),
    ([A.ToDtype(), A.RandomErasing(p=1.0, value=0.5)], 1),
])
def test_keyed_ops_equal_torch_backend(image_folder, ops, max_levels):
    # DALI applies the torch backend's own keyed draws: values differ by rounding only
    pipe = _pipe(image_folder, BLOCK + ops, batch_size=8, seed=2)
    a, b = next(iter(pipe.loader(backend="dali"))), next(iter(pipe.loader(backend="torch")))
    assert a["image"].shape == b["image"].shape and a["image"].dtype == b["image"].dtype
    scale = 255.0 if a["image"].is_floating_point() else 1.0
    diff = (a["image"].float() - b["image"].float()).abs() * scale
    assert diff.max().item() <= max_levels + 1e-3
    assert diff.mean().item() <= 0.5


@pytest.mark.parametrize("ops, mean_levels", [
    # ColorJitter runs its steps in a fixed order (the drawn order matters only where values clip)
    ([A.ColorJitter(0.4, 0.4, 0.4)], 1.5),
    # warps take the keyed matrices; nearest differs at rounding ties, bilinear also at the borders
    # (torchvision blends the fill by the interpolated mask, DALI fills each tap)
    ([A.RandomRotation(30)], 0.5),
    ([A.RandomAffine(20, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=10)], 0.5),
    ([A.RandomRotation(30, interpolation="bilinear", fill=128)], 1.0),
])
def test_approximate_ops_stay_close(image_folder, ops, mean_levels):
    pipe = _pipe(image_folder, BLOCK + ops, batch_size=8, seed=2)
    a, b = next(iter(pipe.loader(backend="dali"))), next(iter(pipe.loader(backend="torch")))
    assert a["image"].shape == b["image"].shape and a["image"].dtype == b["image"].dtype == torch.uint8
    assert (a["image"].float() - b["image"].float()).abs().mean().item() <= mean_levels


@pytest.mark.skipif(not torch.cuda.is_available(), reason="nvJPEG (DALI's mixed decoders) needs a CUDA device")
def test_gpu_decoding_gives_the_cpu_batches_on_the_gpu(image_folder):
    ops = [A.Resize(128), A.CenterCrop(112), A.ColorJitter(0.4, 0.4, 0.4), A.HorizontalFlip(), A.Normalize()]
    cpu = _pipe(image_folder, ops, batch_size=8)
    gpu = mp.Pipeline(source=mp.loaders.folder(image_folder), decode={"image": mp.decoders.image()},
                      augment=ops, batch_size=8, seed=0, device="cuda")
    for a, b in zip(gpu.loader(backend="dali", rng="keyed"), cpu.loader(backend="dali", rng="keyed"), strict=True):
        assert a["image"].device.type == "cuda" and a["label"].device.type == "cuda"
        assert torch.equal(a["index"].cpu(), b["index"])
        # nvJPEG and libjpeg-turbo round differently: about a grey level on average
        assert (a["image"].cpu() - b["image"]).abs().mean().item() <= 1.5 / 255 / 0.224


# -- audio ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wav_manifest(tmp_path_factory):
    """Six mono 16 kHz WAVs (0.5 to 0.85 s): a tone in noise between near-silent ends."""
    import json
    import wave

    import numpy as np

    root = tmp_path_factory.mktemp("wav")
    rng = np.random.default_rng(0)
    rows = []
    for i in range(6):
        n = 8000 + 1111 * i
        x = 0.3 * np.sin(2 * np.pi * (220 + 50 * i) * np.arange(n) / 16000) + 0.02 * rng.standard_normal(n)
        x[:1500] *= 5e-4
        x[-1200:] *= 5e-4
        path = root / f"a{i}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
        rows.append({"path": str(path), "label": i % 2})
    manifest = root / "train.jsonl"
    manifest.write_text("\n".join(json.dumps(r) for r in rows))
    return manifest


def _audio_pipe(manifest, augment, mono=True):
    return mp.Pipeline(source=mp.loaders.manifest(manifest), decode={"audio": mp.decoders.audio(mono=mono)},
                       augment=augment, batch_size=3, device="cpu")


@pytest.mark.parametrize("augment, atol", [
    # log-mel features agree to 1e-3 dB (float32 FFTs in a different order)
    ([A.PreEmphasis(), A.MelSpectrogram(n_fft=400, hop_length=160, n_mels=40), A.AmplitudeToDB()], 1e-3),
    ([A.LogMelSpectrogram(n_mels=40, pad_value=-100.0)], 1e-3),
    ([A.NonSilentRegion(cutoff_db=-40, window=256), A.PadTrim(length=12000)], 0.0),
    ([A.Gain(), A.AudioNormalize(), A.LogMelSpectrogram(n_mels=40)], 1e-3),  # Gain: the keyed draws
    ([A.MFCC(n_mels=40, n_mfcc=13, top_db=None)], 1e-3),
])
def test_audio_features_equal_torch_backend(wav_manifest, augment, atol):
    dali, torch_ = _both(_audio_pipe(wav_manifest, augment), shuffle=False)
    assert len(dali) == len(torch_) == 2
    for a, b in zip(dali, torch_):
        assert set(a) == set(b) == {"audio", "audio_lengths", "label", "index"}
        for key in b:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert torch.equal(a["audio_lengths"], b["audio_lengths"]) and torch.equal(a["index"], b["index"])
        assert (a["audio"] - b["audio"]).abs().max().item() <= atol


def test_audio_resample_approximates_torch_backend(wav_manifest):
    # DALI's windowed-sinc resampler is not torchaudio's: same lengths, close values
    dali, torch_ = _both(_audio_pipe(wav_manifest, [A.Resample(orig_freq=16000, new_freq=8000)]), shuffle=False)
    for a, b in zip(dali, torch_):
        assert a["audio"].shape == b["audio"].shape and torch.equal(a["audio_lengths"], b["audio_lengths"])
        assert (a["audio"] - b["audio"]).abs().mean().item() < 0.02


def test_audio_settings_without_counterpart_are_listed(wav_manifest):
    pipe = _audio_pipe(wav_manifest, [A.Spectrogram(win_length=200), A.SpecAugment(), A.AmplitudeToDB(top_db=80.0)],
                       mono=False)
    with pytest.raises(PipelineError) as info:
        pipe.loader(backend="dali")
    message = str(info.value)
    for part in ("augment[1] SpecAugment", "augment[2] AmplitudeToDB(top_db=80.0", "augment[0] Spectrogram(win_length=200",
                 "decode['audio'] audio(mono=False"):
        assert part in message
