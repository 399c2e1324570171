"""The DALI backend against this library's torch backend, on DALI's CPU operators (device_id=None)."""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import subprocess
import sys
import weakref
from dataclasses import dataclass

import pytest
import torch

import mediapipe as mp
from mediapipe import augment as A
from mediapipe.augment.base import Op
from mediapipe.errors import PipelineError

pytest.importorskip("nvidia.dali")

from mediapipe.loaders.dali.loader import DaliLoader, dali_available, lowering_table  # noqa: E402

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
    code = "import sys, mediapipe, mediapipe.loaders.dali.loader; print('nvidia.dali' in sys.modules)"
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
    from mediapipe.dataset.convert import convert

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
    # iterating again, without a load_state_dict, is a fresh pass: from the epoch's first batch
    it2 = iter(loader)
    assert torch.equal(next(it2)["image"], full[0]["image"])


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


def test_resume_from_a_state_taken_after_the_last_batch(image_folder):
    """A state taken after an epoch's last batch, before the pass ended (a checkpoint in the loop):
    the next pass is the next epoch, as the uninterrupted run's and the torch backend's are. It
    used to be an empty pass, then the next epoch with other draws."""
    augment = [A.RandomResizedCrop(40), A.HorizontalFlip(), A.Normalize()]
    loader = _pipe(image_folder, augment, batch_size=8, seed=5).loader(backend="dali")
    it = iter(loader)
    for _ in range(len(loader)):
        next(it)
    state = loader.state_dict()
    assert (state["sampler"]["epoch"], state["sampler"]["position"]) == (0, 3)
    second = list(loader)  # the uninterrupted run goes on: epoch 1
    assert loader.epoch == 2
    resumed = _pipe(image_folder, augment, batch_size=8, seed=5).loader(backend="dali")
    resumed.load_state_dict(state)
    for a, b in zip(resumed, second, strict=True):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])
    torch_loader = _pipe(image_folder, augment, batch_size=8, seed=5).loader(backend="torch")
    torch_loader.load_state_dict(state)
    assert [b["index"].tolist() for b in torch_loader] == [b["index"].tolist() for b in second]


def test_two_live_passes_never_share_a_pipeline(image_folder):
    """As with the torch backend, each pass delivers its own whole epoch: two iterators, or
    zip(loader, loader), used to pull from one DALI stream in turns (each got every other batch,
    then the next epoch's)."""
    augment = [A.RandomResizedCrop(40), A.HorizontalFlip(), A.Normalize()]
    uninterrupted = _pipe(image_folder, augment, seed=3).loader(backend="dali")
    reference, epoch1 = list(uninterrupted), list(uninterrupted)
    loader = _pipe(image_folder, augment, seed=3).loader(backend="dali")
    pairs = list(zip(loader, loader))
    assert len(pairs) == len(reference)
    for (a, b), r in zip(pairs, reference):
        for x in (a, b):
            assert torch.equal(x["index"], r["index"]) and torch.equal(x["image"], r["image"])
    for x, r in zip(loader, epoch1, strict=True):  # the next pass: epoch 1, as the uninterrupted run's
        assert torch.equal(x["index"], r["index"]) and torch.equal(x["image"], r["image"])
    loader.set_epoch(0)
    a = iter(loader)
    first = next(a)
    b = iter(loader)  # a fresh pass from the epoch's first batch; a goes on with its own pipeline
    rest_a, from_b = list(a), list(b)
    assert [x["index"].tolist() for x in [first, *rest_a]] == [r["index"].tolist() for r in reference]
    assert [x["index"].tolist() for x in from_b] == [r["index"].tolist() for r in reference]
    assert all(torch.equal(x["image"], r["image"]) for x, r in zip(from_b, reference, strict=True))


def test_set_epoch_while_a_pass_runs_leaves_that_pass_and_the_new_epoch_alone(image_folder):
    """The running pass keeps its epoch; the loader is then at the start of the epoch set. The
    pass used to move the new epoch's position with each of its batches."""
    pipe = _pipe(image_folder, [A.Resize((32, 32))], seed=2)
    reference = [b["index"].tolist() for b in pipe.loader(backend="dali")]
    loader = pipe.loader(backend="dali")
    it = iter(loader)
    got = [next(it)["index"].tolist()]
    loader.set_epoch(5)
    got += [b["index"].tolist() for b in it]
    assert got == reference
    assert (loader.epoch, loader.sampler.position) == (5, 0)
    fresh = pipe.loader(backend="torch")
    fresh.set_epoch(5)
    assert [b["index"].tolist() for b in loader] == [b["index"].tolist() for b in fresh]


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
    # torch's cubic without antialias is another kernel than DALI's (main: lowered, ten levels off)
    with pytest.raises(PipelineError, match=r"augment\[0\] Resize\(interpolation='bicubic', antialias=False"):
        _pipe(image_folder, [A.Resize(32, interpolation="bicubic", antialias=False)]).loader(backend="dali")
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
    ([A.RandomAffine(20, interpolation="bilinear", fill=(128, 128, 128))], 1.0),  # main: float() of a tuple
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
    # main: half torchaudio's values; these reach 5e3, so float32 rounding is 1e-3 here
    ([A.MFCC(n_mels=40, n_mfcc=13, top_db=None, dct_norm=None)], 3e-3),
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


def test_asr_segments_and_transcripts_equal_the_torch_backends(wav_manifest, tmp_path):
    # an ASR manifest's utterance is a segment of its file, its transcript a str (issue 17);
    # main: DALI decoded the whole file (0.5 to 0.85 s where the torch backend gave the segment)
    import json

    paths = [json.loads(line)["path"] for line in wav_manifest.read_text().splitlines()]
    rows = [{"audio_filepath": p, "offset": 0.05 * i, "duration": 0.3 + 0.01 * i, "text": f"utterance {i}"}
            for i, p in enumerate(paths)]
    rows[0].pop("offset")  # from the file's start
    manifest = tmp_path / "asr.json"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for rate in (None, 16000):
        pipe = mp.Pipeline(source=mp.loaders.nemo(manifest), decode={"audio": mp.decoders.audio(mono=True, sample_rate=rate)},
                           augment=[A.LogMelSpectrogram(n_mels=40)], batch_size=3, device="cpu")
        dali, torch_ = _both(pipe, shuffle=False)
        assert len(dali) == len(torch_) == 2
        for a, b in zip(dali, torch_):
            assert set(a) == set(b) == {"audio", "audio_lengths", "text", "index"}
            assert a["text"] == b["text"] and all(isinstance(t, str) for t in a["text"])
            assert torch.equal(a["audio_lengths"], b["audio_lengths"]) and a["audio"].shape == b["audio"].shape
            assert (a["audio"] - b["audio"]).abs().max().item() <= 1e-3


def test_audio_settings_without_counterpart_are_listed(wav_manifest):
    pipe = _audio_pipe(wav_manifest, [A.Spectrogram(win_length=200), A.SpecAugment(), A.AmplitudeToDB(top_db=80.0)],
                       mono=False)
    with pytest.raises(PipelineError) as info:
        pipe.loader(backend="dali")
    message = str(info.value)
    for part in ("augment[1] SpecAugment", "augment[2] AmplitudeToDB(top_db=80.0", "augment[0] Spectrogram(win_length=200",
                 "decode['audio'] audio(mono=False"):
        assert part in message


# -- the same behaviour as the torch backend: set-up, fields, masks, resampling, order ----------
@pytest.fixture(scope="module")
def png_folder(tmp_path_factory):
    """16 lossless PNGs of several sizes (both decoders give the same pixels): resampling and
    colour are compared exactly, without JPEG decoders' rounding in the way."""
    from PIL import Image

    from mediapipe.synthetic import photo_like

    root = tmp_path_factory.mktemp("png") / "class0"
    root.mkdir()
    for i in range(16):
        Image.fromarray(photo_like(50 + 7 * i, 120 - 5 * i, 900 + i)).save(root / f"img{i:02d}.png")
    return root.parent


@pytest.fixture(scope="module")
def mask_manifest(tmp_path_factory):
    """12 rows: a JPEG photo with a bright disc, ``"mask"``: a PNG of the disc (0/255), a label
    and a numeric ``weight``; sizes differ from row to row."""
    import json

    import numpy as np
    from PIL import Image

    from mediapipe.synthetic import photo_like

    root = tmp_path_factory.mktemp("masks")
    rows = []
    for i in range(12):
        h, w = 60 + 9 * i, 140 - 6 * i
        yy, xx = np.mgrid[0:h, 0:w]
        inside = (yy - h * 0.45) ** 2 + (xx - w * 0.55) ** 2 < (min(h, w) * 0.3) ** 2
        photo = photo_like(h, w, 300 + i)
        photo[inside] = np.clip(photo[inside].astype(int) + 60, 0, 255).astype(np.uint8)
        Image.fromarray(photo).save(root / f"{i}.jpg", quality=92)
        Image.fromarray((inside * 255).astype(np.uint8)).save(root / f"{i}_mask.png")
        rows.append({"path": f"{i}.jpg", "mask": f"{i}_mask.png", "label": i % 3, "weight": 0.25 * i})
    path = root / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def _mask_pipe(manifest, augment, batch_size=4, seed=3):
    return mp.Pipeline(source=mp.loaders.manifest(manifest), device="cpu", batch_size=batch_size, seed=seed,
                       decode={"image": mp.decoders.image(), "mask": mp.decoders.mask()}, augment=augment)


def test_a_source_split_by_rank_is_not_split_again(image_folder, tmp_path):
    # main: DaliLoader built its own sampler and split the rank's shards again (half the batches)
    from mediapipe.dataset.convert import convert

    convert(image_folder, tmp_path / "shards", shard_size=6)
    whole = mp.loaders.shards(tmp_path / "shards")
    seen = []
    for rank in range(2):
        part = whole.for_rank(rank, 2)
        pipe = _pipe(None, [A.Resize((32, 32))], batch_size=4, source=part)
        dali_loader = pipe.loader(backend="dali", rank=rank, world_size=2, shuffle=False)
        dali, torch_ = list(dali_loader), list(pipe.loader(backend="torch", rank=rank, world_size=2, shuffle=False))
        assert len(dali_loader) == len(dali) == len(torch_) == 3
        assert dali_loader.ranks.rank == rank  # the true rank keys DALI's seed; the sampler reads all of the part
        for a, b in zip(dali, torch_):
            assert torch.equal(a["index"], b["index"]) and torch.equal(a["label"], b["label"])
        seen += [part.ref(int(i)).key for b in dali for i in b["index"]]
    assert len(seen) == len(set(seen)) == 24


def test_valid_is_on_every_batch_when_some_rank_may_pad(image_folder):
    # 24 samples on 5 ranks: a rank with fewer samples pads, so every batch carries "valid"
    # (main: DALI added it only to the padded batch, or under last_batch="pad")
    pipe = _pipe(image_folder, [A.Resize((24, 24))], batch_size=2)
    for last_batch, rank in itertools.product(("partial", "pad", "drop"), (0, 4)):
        dali = list(pipe.loader(backend="dali", rank=rank, world_size=5, last_batch=last_batch))
        torch_ = list(pipe.loader(backend="torch", rank=rank, world_size=5, last_batch=last_batch))
        assert len(dali) == len(torch_) > 0
        for a, b in zip(dali, torch_):
            assert set(a) == set(b) and torch.equal(a["index"], b["index"])
            assert ("valid" in a) == (last_batch != "drop")
            if "valid" in b:
                assert torch.equal(a["valid"], b["valid"])


def test_a_manifests_mask_column_is_decoded_from_its_own_file(mask_manifest):
    # main: the feed read ref.blob("image") for every image field: "mask" got the photo's bytes
    pipe = _mask_pipe(mask_manifest, [A.CenterCrop(48)])
    for a, b in zip(pipe.loader(backend="dali", shuffle=False), pipe.loader(backend="torch", shuffle=False),
                    strict=True):
        assert set(a) == set(b) == {"image", "mask", "label", "index", "weight"}
        assert torch.equal(a["mask"], b["mask"])  # lossless PNG: the same pixels
        assert set(torch.unique(a["mask"]).tolist()) == {0, 255}
        assert torch.equal(a["weight"], b["weight"]) and torch.equal(a["label"], b["label"])


@pytest.mark.parametrize("ops", [
    [A.Resize((40, 52))],
    [A.RandomResizedCrop(44, scale=(0.3, 1.0)), A.HorizontalFlip()],
    [A.RandomResizedCrop(44, scale=(0.3, 1.0), interpolation="nearest-exact")],
    [A.Resize((40, 52)), A.RandomRotation(25, interpolation="bilinear", fill=128)],
    [A.CenterCrop(48), A.RandomCrop(40, padding=5, fill=99), A.VerticalFlip(), A.Pad(3, fill=7)],
    [A.CenterCrop(56), A.RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2), fill=128)],
])
def test_masks_are_resampled_with_nearest_as_the_torch_backend_does(mask_manifest, ops):
    # main: mask_keys was accepted and the mask resized (and warped) bilinearly: blended values;
    # now a mask is a mask by its kind (mp.decoders.mask()): nearest, never antialiased, fill 0
    pipe = _mask_pipe(mask_manifest, ops)
    for a, b in zip(pipe.loader(backend="dali", rng="keyed"), pipe.loader(backend="torch"), strict=True):
        assert torch.equal(a["index"], b["index"])
        assert torch.equal(a["mask"], b["mask"])  # the same windows, flips, matrices and source pixels
        assert set(torch.unique(a["mask"]).tolist()) <= {0, 255}  # never a blend, nor the image's fill
        # the image: our decoder's DCT-scaled decode rounds differently (a wrong window: tens of levels)
        assert (a["image"].float() - b["image"].float()).abs().mean().item() <= 4.0


@pytest.mark.parametrize("interpolation", ["nearest-exact", "nearest"])
def test_nearest_resizes_pick_the_torch_backends_pixels(png_folder, interpolation):
    # main: "nearest-exact" raised a bare KeyError, and "nearest" took DALI's pixel-centre nearest
    # (torch's "nearest-exact"): a different source pixel in about 40% of the rows and columns
    for ops in ([A.Resize((37, 61), interpolation=interpolation)],
                [A.Resize(45, max_size=80, interpolation=interpolation), A.CenterCrop((45, 45))],
                [A.RandomResizedCrop((41, 39), interpolation=interpolation)]):
        pipe = _pipe(png_folder, ops, batch_size=8, seed=5)
        for a, b in zip(pipe.loader(backend="dali", rng="keyed"), pipe.loader(backend="torch"), strict=True):
            assert a["image"].shape == b["image"].shape and torch.equal(a["index"], b["index"])
            # a row or column differs only where torch's float32 index rounds down at a pixel edge
            off = (a["image"] != b["image"]).any(dim=1).float().mean().item()
            assert off <= 0.01, (ops, off)


@pytest.mark.parametrize("jitter", [
    dict(brightness=(0.4, 1.9), contrast=(0.2, 1.9), saturation=(0.0, 2.0)),
    dict(brightness=(0.4, 1.9), contrast=(0.2, 1.9)),
    dict(contrast=(0.2, 1.9), saturation=(0.0, 2.0)),
])
def test_color_jitter_follows_each_samples_drawn_order(png_folder, jitter):
    # main ran brightness, contrast, saturation in a fixed order: up to 28 levels off where a
    # sample drew another order and values clipped
    pipe = _pipe(png_folder, [A.CenterCrop(48), A.ColorJitter(**jitter)], batch_size=16, seed=11)
    a, b = next(iter(pipe.loader(backend="dali"))), next(iter(pipe.loader(backend="torch")))
    diff = (a["image"].int() - b["image"].int()).abs()
    # the same pixels but where float32 rounding of the grey or its mean moves a truncation by
    # a level (which a later saturation of up to 2 can double)
    assert diff.max().item() <= 2 and (diff > 1).float().mean().item() <= 0.001
    assert (diff > 0).float().mean().item() <= 0.01


def test_batch_fields_are_the_plans(mask_manifest, monkeypatch):
    pipe = _mask_pipe(mask_manifest, [A.Resize((32, 32)),
                                      A.Normalize(out="normalized")])
    fields = pipe.plan.batch_fields()
    assert [(f.name, f.origin) for f in fields] == [("image", "decoder"), ("mask", "decoder"), ("normalized", "op")]
    a, b = next(iter(pipe.loader(backend="dali"))), next(iter(pipe.loader(backend="torch")))
    assert set(a) == set(b) == {f.name for f in fields} | {"index", "label", "weight"}
    # a decoder's side field the DALI decoders cannot give is refused, named, at build time
    from mediapipe.decoders.registry import decoder_class

    monkeypatch.setattr(decoder_class("image", "auto"), "side_fields", ("exif",))
    assert [f.name for f in pipe.plan.batch_fields() if f.origin == "side"] == ["image_exif", "mask_exif"]
    with pytest.raises(PipelineError, match="image_exif"):
        pipe.loader(backend="dali")


def test_from_field_is_refused_at_build_time(image_folder):
    pipe = mp.Pipeline(source=mp.loaders.folder(image_folder), device="cpu",
                       decode={"image": mp.decoders.image(), "audio": mp.decoders.audio(from_field="image")})
    with pytest.raises(PipelineError, match=r"decode\['audio'\] audio\(from_field='image'"):
        pipe.loader(backend="dali")


def test_nearest_exact_lowers_on_the_resize_and_crop_paths(image_folder):
    # main: interpolation="nearest-exact" raised KeyError('nearest-exact') from the lowering
    for op in (A.Resize(40, interpolation="nearest-exact"), A.RandomResizedCrop(32, interpolation="nearest-exact")):
        loader = _pipe(image_folder, [op, A.CenterCrop(32)]).loader(backend="dali")
        assert next(iter(loader))["image"].shape == (5, 3, 32, 32)


def test_an_argument_the_lowering_does_not_consume_is_named_at_build_time(image_folder, monkeypatch):
    from mediapipe.loaders.dali import lowering as dali_lowering

    entry = dali_lowering.LOWERINGS["Resize"]
    monkeypatch.setitem(dali_lowering.LOWERINGS, "Resize",
                        dali_lowering.Lowering(entry.lower, entry.consumes - {"max_size", "antialias"}, entry.dali_ops))
    with pytest.raises(PipelineError) as info:
        _pipe(image_folder, [A.CenterCrop(64), A.Resize(32, max_size=40, antialias=False)]).loader(backend="dali")
    assert "augment[1] Resize(max_size=40, antialias=False: arguments the DALI lowering does not read)" in str(info.value)
    _pipe(image_folder, [A.Resize(32)]).loader(backend="dali")  # defaults left alone: lowered


def test_resume_mid_epoch_on_a_rank_of_split_shards(image_folder, tmp_path):
    from mediapipe.dataset.convert import convert

    convert(image_folder, tmp_path / "shards", shard_size=4)
    part = mp.loaders.shards(tmp_path / "shards").for_rank(1, 2)
    augment = [A.RandomResizedCrop(40), A.HorizontalFlip(), A.ColorJitter(0.3, 0.3, 0.3), A.Normalize()]

    def loader():
        return _pipe(None, augment, batch_size=4, seed=9, source=part).loader(backend="dali", rank=1, world_size=2)

    full = list(loader())
    assert len(full) == 3
    interrupted = loader()
    it = iter(interrupted)
    next(it)
    state = interrupted.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    for a, b in zip(resumed, full[1:], strict=True):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])


def test_colour_ops_on_a_grey_field_do_what_the_torch_backend_does(tmp_path):
    # main: the luma read three channels of a one-channel decode and DALI failed at the first batch;
    # torch's contrast blends with the field's own mean, saturation and grayscale leave it as it is
    from PIL import Image

    from mediapipe.synthetic import photo_like

    (tmp_path / "c").mkdir()
    for i in range(8):  # grey PNGs: both decoders give the same pixels
        Image.fromarray(photo_like(50 + 5 * i, 60, 40 + i)).convert("L").save(tmp_path / "c" / f"{i}.png")
    pipe = mp.Pipeline(source=mp.loaders.folder(tmp_path), device="cpu", batch_size=8, seed=4,
                       decode={"image": mp.decoders.image(mode="L")},
                       augment=[A.CenterCrop(48), A.RandomGrayscale(p=0.5),
                                A.ColorJitter(brightness=(0.4, 1.9), contrast=(0.2, 1.9), saturation=(0.0, 2.0))])
    a, b = next(iter(pipe.loader(backend="dali"))), next(iter(pipe.loader(backend="torch")))
    assert a["image"].shape == b["image"].shape == (8, 1, 48, 48)
    diff = (a["image"].int() - b["image"].int()).abs()
    assert diff.max().item() <= 1 and (diff > 0).float().mean().item() <= 0.01


def test_max_pixels_is_checked_on_headers_before_dali_decodes(png_folder):
    # main: DALI decoded every image whatever max_pixels said, unless an op read its header
    # (DALI draws this crop itself: nothing of the sample is needed on the host but its bytes)
    from mediapipe.errors import LimitError

    pipe = mp.Pipeline(source=mp.loaders.folder(png_folder), decode={"image": mp.decoders.image()},
                       augment=[A.RandomResizedCrop(32)], batch_size=8, device="cpu", max_pixels=5000)
    loader = pipe.loader(backend="dali", shuffle=False)
    for _ in range(2):  # and again: the loader starts a fresh pipeline after the error
        with pytest.raises(LimitError, match=r"img\d\d\.png.*above max_pixels=5000"):
            next(iter(loader))


def test_a_torch_loader_with_workers_started_after_a_dali_loader_works(image_folder):
    # DALI runs threads of its own (decoding the batches it prefetches): the torch loader's
    # workers then start from a forkserver (a fork would inherit locks those threads hold)
    pipe = _pipe(image_folder, [A.Resize((32, 32)), A.Normalize()], batch_size=4, seed=1)
    dali_loader = pipe.loader(backend="dali", shuffle=False)
    it = iter(dali_loader)
    next(it)  # mid-epoch: DALI works on the next batches
    reference = list(pipe.loader(backend="torch", num_workers=0))
    workers = pipe.loader(backend="torch", num_workers=2)
    passes = iter(workers)
    assert passes._pool.start_method == "forkserver"
    got = list(passes)
    assert len(got) == len(reference) == 6
    for a, b in zip(got, reference):
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])
    assert next(it)["index"].tolist() == [4, 5, 6, 7]  # the DALI pass goes on


def test_close_lets_the_pipeline_go_and_its_state_resumes_where_it_stopped(image_folder):
    augment = [A.RandomResizedCrop(40), A.HorizontalFlip(), A.Normalize()]
    full = list(_pipe(image_folder, augment, seed=3).loader(backend="dali"))
    loader = _pipe(image_folder, augment, seed=3).loader(backend="dali")
    it = iter(loader)
    next(it), next(it)
    loader.close()
    assert loader._live is None
    state = loader.state_dict()  # still carries the closed pipeline's checkpoint
    assert "dali" in state and state["sampler"]["position"] == 2
    loader.load_state_dict(state)
    for a, b in zip(loader, full[2:], strict=True):  # a fresh pipeline from the closed one's checkpoint
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["image"], b["image"])


def _dropped_loader(root, rng="dali"):
    """Weak references to a DALI loader that delivered a batch, and to its DALI pipeline, once
    the loader is dropped (it goes out of scope here)."""
    loader = _pipe(root, [A.RandomResizedCrop(32), A.HorizontalFlip(), A.ColorJitter(brightness=0.4),
                          A.Resize(24, interpolation="nearest"), A.Normalize()], batch_size=4).loader(
        backend="dali", rng=rng)
    next(iter(loader))
    return weakref.ref(loader), weakref.ref(loader._live.pipe)


@pytest.mark.parametrize("rng", ["dali", "keyed"])
def test_a_dropped_loader_frees_its_dali_pipeline_at_once(image_folder, rng):
    # main: the feed's callbacks held the loader (loader -> pipeline -> callbacks -> loader), so
    # only the cyclic GC freed the pipeline, at a moment of its choosing
    gc.collect()
    gc.disable()  # freed by reference counting alone
    try:
        loader, pipeline = _dropped_loader(image_folder, rng)
        assert loader() is None and pipeline() is None
    finally:
        gc.enable()


def _collect_and_exit():
    gc.collect()


def test_a_child_forked_after_a_loader_was_dropped_exits_promptly(image_folder):
    # main: the dropped loader's pipeline waited in a reference cycle; a forked child's GC then
    # ran DALI's teardown, which waits on threads that exist only in the parent (a hang, or SIGSEGV)
    gc.collect()  # no garbage of earlier tests for the child to find
    gc.disable()
    try:
        _, pipeline = _dropped_loader(image_folder)
        child = multiprocessing.get_context("fork").Process(target=_collect_and_exit)
        child.start()
    finally:
        gc.enable()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail("a child forked after a DALI loader was dropped hung in its garbage collection")
    assert child.exitcode == 0 and pipeline() is None


def test_close_is_idempotent_and_a_with_block_closes(image_folder):
    pipe = _pipe(image_folder, [A.Resize((32, 32))], batch_size=4)
    with pipe.loader(backend="dali", shuffle=False) as loader:
        first = next(iter(loader))["index"].tolist()
        pipeline = weakref.ref(loader._live.pipe)
    assert loader._live is None and pipeline() is None
    loader.close()
    assert [b["index"].tolist() for b in loader][0] == first == [0, 1, 2, 3]  # a new pass: the epoch's first batch


def test_a_file_gone_mid_epoch_is_named_when_its_batch_is_due(image_folder, tmp_path):
    # a failed read in the feed (which DALI calls ahead of the training loop) surfaces in the
    # training loop, naming the file, after the batches before it
    import shutil

    from mediapipe.errors import SourceError

    root = tmp_path / "imgs"
    shutil.copytree(image_folder, root)
    source = mp.loaders.folder(root)
    pipe = _pipe(root, [A.Resize((32, 32)), A.Normalize()], batch_size=4, source=source)
    victim = source.ref(21).blobs["jpg"].path  # in the sixth of six batches (no shuffle)
    got = []
    with pytest.raises(SourceError, match=victim.rsplit("/", 1)[-1]):
        for batch in pipe.loader(backend="dali", shuffle=False, prefetch=1):
            if not got:
                (root / victim).unlink()  # gone after the first batch was read
            got.append(batch["index"].tolist())
    assert got[:3] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def _char_ids(text: str) -> list[int]:
    return [ord(c) % 97 for c in text]


def test_text_fields_and_token_ids_are_collated_as_the_torch_backend_does(mask_manifest, tmp_path):
    # a manifest's text column passes through as a list, and tokenize()'s ids are padded with
    # their lengths: the same sample fields, collated with the same policies (main: ids stacked)
    import json

    rows = [json.loads(line) for line in mask_manifest.read_text().splitlines()]
    for i, row in enumerate(rows):
        row["path"] = str(mask_manifest.parent / row["path"])
        row["mask"] = str(mask_manifest.parent / row["mask"])
        row["caption"] = "a disc" + " on a photo" * (i % 3)
    path = tmp_path / "captions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    source = mp.loaders.tokenize(mp.loaders.manifest(path), _char_ids, field="caption", out="ids")
    pipe = mp.Pipeline(source=source, decode={"image": mp.decoders.image()}, augment=[A.Resize((32, 32))],
                       batch_size=4, device="cpu")
    for a, b in zip(pipe.loader(backend="dali", shuffle=False), pipe.loader(backend="torch", shuffle=False),
                    strict=True):
        assert set(a) == set(b) and {"caption", "ids", "ids_lengths", "weight"} <= set(a)
        assert a["caption"] == b["caption"] and isinstance(a["caption"], list)
        assert torch.equal(a["ids"], b["ids"]) and torch.equal(a["ids_lengths"], b["ids_lengths"])


def test_a_pass_dropped_before_its_first_batch_frees_its_pipeline(image_folder):
    """A pass holds its DALI pipeline until it ends, is closed or is dropped, even unstarted;
    the next pass then goes on with that pipeline instead of building another."""
    loader = _pipe(image_folder, [A.Resize((32, 32))]).loader(backend="dali")
    live = loader._live
    it = iter(loader)
    assert live.busy
    del it
    assert not live.busy
    next(iter(loader))
    assert loader._live is live
