"""Hostile review of the audio-channel and detection-target fixes: each test failed before its fix.

* A Lhotse recording's declared ``sampling_rate`` is the rate its samples come at (what
  ``cut.load_audio()`` gives): an Opus file, which FFmpeg decodes at 48 kHz, came at 48 kHz, and a
  converted shard stored it so.
* A recording of one file per microphone whose files have different rates (with no rate to decode
  them at) or lengths far apart is a named DecodeError; both were stacked (a 16 kHz channel next
  to an 8 kHz one, or seconds of zeros) without a word.
* A manifest's utterance that its file ends well before is a DecodeError naming both ends (the
  transcript went with a fraction of its audio).
* `mediapipe convert` of a COCO dataset whose images carry an EXIF orientation writes them upright
  and turns their boxes and masks with them (it refused every such image, "its boxes and masks
  not", though the loader turns them).
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import mediapipe as mp
from mediapipe.decoders.audio import resample
from mediapipe.errors import DecodeError

sf = pytest.importorskip("soundfile")
RATE = 16000


def tone(seconds: float, rate: int, freq: float = 300.0, level: float = 0.3) -> np.ndarray:
    t = np.arange(int(round(seconds * rate))) / rate
    return (level * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def batches(source, backend: str = "auto", **options) -> dict[str, np.ndarray]:
    pipe = mp.Pipeline(source=source, decode={"audio": mp.decoders.audio(backend=backend, **options)},
                       batch_size=1, seed=0)
    return {(b["id"] if "id" in b else b["text"])[0]: b["audio"][0, :, : int(b["audio_lengths"][0])].numpy() for b in pipe.loader(shuffle=False)}


def write_cuts(path: Path, *cuts) -> Path:
    path.write_text("".join(json.dumps(c.to_dict() if hasattr(c, "to_dict") else c) + "\n" for c in cuts))
    return path


# ---------------------------------------------------------------------------------------------
# Lhotse: the recording's rate


@pytest.fixture(scope="module")
def opus_cut(tmp_path_factory):
    lhotse = pytest.importorskip("lhotse")
    ffmpeg = pytest.importorskip("imageio_ffmpeg").get_ffmpeg_exe()
    root = tmp_path_factory.mktemp("opus")
    sf.write(root / "speech.wav", tone(2.0, RATE), RATE)
    subprocess.run([ffmpeg, "-y", "-loglevel", "error", "-i", str(root / "speech.wav"), "-c:a", "libopus",
                    str(root / "speech.opus")], check=True)
    recording = lhotse.Recording.from_file(root / "speech.opus", recording_id="speech")
    assert recording.sampling_rate == RATE  # the Opus header's input rate; FFmpeg decodes at 48 kHz
    cut = recording.to_cut().truncate(offset=0.5, duration=1.0)
    return write_cuts(root / "cuts.jsonl", cut), cut


@pytest.mark.parametrize("backend", ["soundfile", "pyav"])
def test_an_opus_recording_comes_at_its_recordings_rate(opus_cut, backend):
    path, cut = opus_cut
    got = batches(mp.loaders.lhotse(path), backend)[cut.id]
    expected = cut.load_audio()
    assert got.shape == expected.shape == (1, RATE)  # was (1, 48000)
    # lhotse resamples the cut alone, we with its neighbourhood: the edges differ
    np.testing.assert_allclose(got[:, 400:-400], expected[:, 400:-400], atol=2e-2)


def test_an_explicit_rate_still_wins_over_the_recordings(opus_cut):
    path, cut = opus_cut
    assert batches(mp.loaders.lhotse(path), sample_rate=8000)[cut.id].shape == (1, 8000)


def test_a_converted_opus_cut_is_stored_at_its_recordings_rate(opus_cut):
    from mediapipe.loaders.sources.formats import describe_inputs, read_input

    path, cut = opus_cut
    (item,) = describe_inputs(mp.loaders.lhotse(path))
    flac, rate = sf.read(io.BytesIO(read_input(item).data), dtype="float32", always_2d=True)
    assert rate == RATE and flac.shape == (RATE, 1)


@pytest.fixture(scope="module")
def mics(tmp_path_factory):
    """Mono WAVs for one-file-per-microphone recordings: 2 s at 16 kHz, 2 s at 8 kHz, 0.5 s at 16 kHz."""
    root = tmp_path_factory.mktemp("mics")
    sf.write(root / "near.wav", tone(2.0, RATE, 300), RATE)
    sf.write(root / "far8k.wav", tone(2.0, 8000, 500), 8000)
    sf.write(root / "short.wav", tone(0.5, RATE, 700), RATE)
    return root


def multicut(mics: Path, files: list[str], start: float, duration: float, rate: int | None = RATE):
    lhotse = pytest.importorskip("lhotse")
    rec = lhotse.Recording(id="rec", sampling_rate=rate or RATE, num_samples=int(2.0 * (rate or RATE)),
                           duration=2.0,
                           sources=[lhotse.AudioSource("file", [c], str(mics / f)) for c, f in enumerate(files)])
    cut = lhotse.MultiCut(id="cut", start=start, duration=duration, channel=list(range(len(files))), recording=rec)
    line = cut.to_dict()
    if rate is None:  # a hand-written manifest without the recording's rate
        del line["recording"]["sampling_rate"]
    return line


@pytest.mark.parametrize("backend", ["soundfile", "pyav"])
def test_microphone_files_of_two_rates_come_at_the_recordings_rate(mics, tmp_path, backend):
    got = batches(mp.loaders.lhotse(write_cuts(tmp_path / "c.jsonl", multicut(mics, ["near.wav", "far8k.wav"],
                                                                                0.5, 1.0))), backend)["cut"]
    assert got.shape == (2, RATE)
    np.testing.assert_allclose(got[0], tone(2.0, RATE, 300)[8000:24000], atol=1e-4)
    far = resample(tone(2.0, 8000, 500)[None], 8000, RATE)[0, 8000:24000]
    np.testing.assert_allclose(got[1, 400:-400], far[400:-400], atol=2e-3)  # was the 8 kHz samples, zero-padded


@pytest.mark.parametrize("backend", ["soundfile", "pyav"])
def test_microphone_files_of_two_rates_without_one_to_decode_at_are_refused(mics, tmp_path, backend):
    source = mp.loaders.lhotse(write_cuts(tmp_path / "c.jsonl", multicut(mics, ["near.wav", "far8k.wav"], 0.5, 1.0,
                                                                         rate=None)))
    with pytest.raises(DecodeError, match=r"far8k.wav.*8000 Hz.*near.wav.*16000 Hz.*sample_rate"):
        batches(source, backend)
    assert batches(source, backend, sample_rate=RATE)["cut"].shape == (2, RATE)


@pytest.mark.parametrize("backend", ["soundfile", "pyav"])
def test_a_microphone_file_far_shorter_than_the_others_is_refused(mics, tmp_path, backend):
    # a little short (0.3 s, under lhotse's 0.5 s tolerance): zero-padded as lhotse does
    near = multicut(mics, ["near.wav", "short.wav"], 0.2, 0.6)
    got = batches(mp.loaders.lhotse(write_cuts(tmp_path / "a.jsonl", near)), backend)["cut"]
    assert got.shape == (2, round(0.6 * RATE))
    assert not got[1, round(0.3 * RATE):].any() and got[1, : round(0.3 * RATE)].any()
    far = multicut(mics, ["near.wav", "short.wav"], 0.2, 1.5)  # 1.2 s of zeros before
    with pytest.raises(DecodeError, match=r"short.wav.*0.300 s.*near.wav 1.500 s.*differ in length"):
        batches(mp.loaders.lhotse(write_cuts(tmp_path / "b.jsonl", far)), backend)


# ---------------------------------------------------------------------------------------------
# A manifest's utterance past its file's end


@pytest.mark.parametrize("backend", ["soundfile", "pyav"])
def test_a_nemo_utterance_past_its_files_end_is_refused(tmp_path, backend):
    sf.write(tmp_path / "a.wav", tone(1.0, RATE), RATE)
    rows = [{"audio_filepath": "a.wav", "offset": 0.2, "duration": 0.7, "text": "fits"},
            {"audio_filepath": "a.wav", "offset": 0.5, "duration": 0.505, "text": "rounded"},  # 5 ms past: rounding
            {"audio_filepath": "a.wav", "offset": 0.6, "duration": 2.0, "text": "past"}]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    got = batches(mp.loaders.nemo(manifest), backend)
    assert [x.shape[1] for x in got.values()] == [round(0.7 * RATE), round(0.5 * RATE)]
    manifest.write_text(json.dumps(rows[2]) + "\n")
    with pytest.raises(DecodeError, match=r"a.wav.*segment \[0.600, 2.600\) s passes the end.*1.000 s"):
        batches(mp.loaders.nemo(manifest), backend)
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pipe = mp.Pipeline(source=mp.loaders.nemo(manifest), decode={"audio": mp.decoders.audio(backend=backend)},
                       batch_size=1, seed=0, on_error="skip")
    texts = [b["text"][0] for b in pipe.loader(shuffle=False)]
    assert texts[:2] == ["fits", "rounded"] and "past" not in texts  # skipped (its place refilled)
    # a window of the decoder's own may pass a file's end (fewer samples, as documented)
    plain = mp.Pipeline(source=mp.loaders.folder(tmp_path),
                        decode={"audio": mp.decoders.audio(offset=0.6, duration=2.0, backend=backend)}, batch_size=1)
    assert int(next(iter(plain.loader(shuffle=False)))["audio_lengths"][0]) == round(0.4 * RATE)


# ---------------------------------------------------------------------------------------------
# convert: EXIF-turned images with targets


@pytest.fixture(scope="module")
def turned_coco(tmp_path_factory):
    """One JPEG per EXIF orientation (red rectangles), with COCO boxes and polygons in the stored frame."""
    from tests.helpers import jpeg, scene

    root = tmp_path_factory.mktemp("turned_coco")
    (root / "images").mkdir()
    images, annotations = [], []
    for o in range(1, 9):
        photo, rects = scene(o)
        h, w = photo.shape[:2]
        (root / "images" / f"o{o}.jpg").write_bytes(jpeg(photo, o))
        images.append({"id": o, "file_name": f"o{o}.jpg", "width": w, "height": h})
        for k, (x0, y0, x1, y1) in enumerate(rects):
            annotations.append({"id": 10 * o + k, "image_id": o, "category_id": 1, "iscrowd": 0,
                                "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                                "segmentation": [[x0, y0, x1, y0, x1, y1, x0, y1]]})
    (root / "instances.json").write_text(json.dumps({"images": images, "annotations": annotations,
                                                     "categories": [{"id": 1, "name": "box"}]}))
    return root


@pytest.mark.parametrize("max_side", [None, 40])
def test_converting_exif_turned_images_turns_their_targets(turned_coco, tmp_path, max_side):
    pytest.importorskip("pycocotools")
    from mediapipe.dataset.convert import convert
    from mediapipe.dataset.transcode import TranscodeOptions
    from tests.helpers import check_targets_on_their_pixels

    source = mp.loaders.coco(turned_coco / "instances.json", turned_coco / "images", masks=True)
    result = convert(source, tmp_path / "out", options=TranscodeOptions(image_max_side=max_side))
    assert result.failures == [] and result.num_samples == 8  # 7 of 8 were refused
    shards = mp.loaders.shards(tmp_path / "out")
    for exif_transpose in (False, True):  # written upright: nothing left to turn
        pipe = mp.Pipeline(shards, {"image": mp.decoders.image(exif_transpose=exif_transpose)}, [], batch_size=1,
                           seed=0, device="cpu")
        seen = 0
        for batch in pipe.loader(num_workers=0, shuffle=False):
            sample = {k: (v[0] if isinstance(v, (list, torch.Tensor)) and len(v) else v) for k, v in batch.items()}
            if max_side is not None:  # masks resized with nearest: their extent is not the scaled box's
                sample.pop("masks")
                assert max(sample["image"].shape[-2:]) == max_side
            seen += check_targets_on_their_pixels(sample)
        assert seen == 24
