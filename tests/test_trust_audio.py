"""Audio that must be the data the manifest or the window names, not something near it.

* Lhotse channels: a cut's ``channel`` (MonoCut), ``channel`` list (MultiCut), a supervision's
  ``channel``, and a recording's ``sources[*].channels`` (several mono files, one per channel)
  decode what ``cut.load_audio()`` gives, through both audio backends and ``mono=True``.
* Windows in Matroska/WebM (whose timestamps are whole milliseconds) are placed by the decoded
  sample count, so a window is the whole-file decode sliced at ``round(offset * rate)``, as in
  MP4 and Ogg, and the FFmpeg command line (``-ss`` after ``-i``) agrees.
* A NeMo offset past its file's end says the offset asked and the file's duration.
"""

from __future__ import annotations

import gzip
import io
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mediapipe as mp
from mediapipe.decoders.audio import resample
from mediapipe.decoders.base import NO_HINT, DecodeHint, TimeSpans
from mediapipe.errors import DecodeError, SourceError
from mediapipe.rng import SampleRNG
from mediapipe.sample import Blob
from mediapipe.synthetic.audio import encode_audio

sf = pytest.importorskip("soundfile")
RATE = 16000
BACKENDS = ["soundfile", "pyav"]


def voices(channels: int, seconds: float, rate: int) -> np.ndarray:
    """(channels, n) float32: a different chirp and level in each channel, so a swapped or mixed
    channel differs by far more than a rounding step."""
    t = np.arange(int(seconds * rate)) / rate
    rows = [(0.25 + 0.1 * c) * np.sin(2 * np.pi * (150 + 350 * c + (90 + 40 * c) * t) * t + c) for c in range(channels)]
    return np.stack(rows).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Lhotse channels


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory):
    """Lhotse recordings: a stereo WAV, a 3-channel FLAC, and one made of two mono WAVs (one
    file per channel)."""
    lhotse = pytest.importorskip("lhotse")
    root = tmp_path_factory.mktemp("channels")
    sf.write(root / "stereo.wav", voices(2, 1.5, RATE).T, RATE)
    sf.write(root / "three.flac", voices(3, 1.5, RATE).T, RATE)
    split = voices(2, 1.5, RATE)[::-1]  # other signals than stereo.wav's
    for c in range(2):
        sf.write(root / f"mic{c}.wav", split[c], RATE)
    stereo = lhotse.Recording.from_file(root / "stereo.wav", recording_id="stereo")
    three = lhotse.Recording.from_file(root / "three.flac", recording_id="three")
    mics = lhotse.Recording(id="mics", sampling_rate=RATE, num_samples=split.shape[1], duration=1.5,
                            sources=[lhotse.AudioSource("file", [c], str(root / f"mic{c}.wav")) for c in range(2)])
    return root, lhotse.RecordingSet.from_recordings([stereo, three, mics])


SUPERVISIONS = [  # (id, recording, start, duration, channel)
    ("left", "stereo", 0.10, 0.50, 0), ("right", "stereo", 0.30, 0.80, 1), ("both", "stereo", 0.20, 0.50, [0, 1]),
    ("outer", "three", 0.05, 0.60, [0, 2]), ("reversed", "three", 0.40, 0.70, [2, 1]), ("last", "three", 0.0, 1.5, 2),
    ("all", "three", 0.30, 0.60, [0, 1, 2]),
    ("mic1", "mics", 0.25, 0.50, 1), ("mic0", "mics", 0.50, 0.75, 0), ("array", "mics", 0.10, 1.20, [0, 1]),
]


@pytest.fixture(scope="module")
def manifests(recordings, tmp_path_factory):
    """Recording, supervision and cut manifests written by lhotse; the cuts (MonoCuts and
    MultiCuts, one per supervision) by id."""
    import lhotse

    _, recs = recordings
    out = tmp_path_factory.mktemp("manifests")
    sups = lhotse.SupervisionSet.from_segments(
        [lhotse.SupervisionSegment(i, r, start=s, duration=d, channel=c, text=i) for i, r, s, d, c in SUPERVISIONS])
    cuts = lhotse.CutSet.from_manifests(recordings=recs, supervisions=sups).trim_to_supervisions(keep_overlapping=False)
    recs.to_file(out / "recordings.jsonl.gz")
    sups.to_file(out / "supervisions.jsonl.gz")
    cuts.to_file(out / "cuts.jsonl.gz")
    return out, {c.id: c for c in cuts}


def batches(source, backend: str, mono: bool = False, **options) -> dict[str, np.ndarray]:
    """Each sample's audio (C, n) by its id, one sample per batch (channel counts differ)."""
    pipe = mp.Pipeline(source=source, decode={"audio": mp.decoders.audio(mono=mono, backend=backend, **options)},
                       batch_size=1, seed=0)
    return {b["id"][0]: b["audio"][0, :, : int(b["audio_lengths"][0])].numpy() for b in pipe.loader(shuffle=False)}


def lhotse_audio(cut, mono: bool) -> np.ndarray:
    x = cut.load_audio()
    return x.mean(axis=0, keepdims=True) if mono else x


@pytest.mark.parametrize("mono", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_cut_channels_decode_what_lhotse_loads(manifests, backend, mono):
    out, cuts = manifests
    kinds = {type(c).__name__ for c in cuts.values()}
    assert kinds == {"MonoCut", "MultiCut"}  # both kinds are exercised
    got = batches(mp.loaders.lhotse(out / "cuts.jsonl.gz"), backend, mono)
    assert sorted(got) == sorted(cuts)
    for cut_id, cut in cuts.items():
        expected = lhotse_audio(cut, mono)
        assert got[cut_id].shape == expected.shape, (cut_id, got[cut_id].shape, expected.shape)
        np.testing.assert_allclose(got[cut_id], expected, atol=1e-6, err_msg=cut_id)


@pytest.mark.parametrize("backend", BACKENDS)
def test_supervision_channels_decode_what_lhotse_loads(manifests, backend):
    out, cuts = manifests
    source = mp.loaders.lhotse(recordings=out / "recordings.jsonl.gz", supervisions=out / "supervisions.jsonl.gz")
    for mono in (False, True):
        got = batches(source, backend, mono)
        assert sorted(got) == sorted(cuts)
        for sup_id, cut in cuts.items():  # the cut trimmed to a supervision is what lhotse trains on
            expected = lhotse_audio(cut, mono)
            assert got[sup_id].shape == expected.shape, (sup_id, got[sup_id].shape, expected.shape)
            np.testing.assert_allclose(got[sup_id], expected, atol=1e-6, err_msg=sup_id)


def test_a_resampled_channel_is_that_channel_resampled(manifests):
    out, cuts = manifests
    got = batches(mp.loaders.lhotse(out / "cuts.jsonl.gz"), "soundfile", sample_rate=8000)
    for cut_id in ("right", "mic1", "outer"):
        expected = resample(cuts[cut_id].load_audio().astype(np.float32), RATE, 8000)
        assert got[cut_id].shape == expected.shape
        # the window is resampled with its neighbourhood, lhotse's slice alone: the edges differ
        np.testing.assert_allclose(got[cut_id][:, 200:-200], expected[:, 200:-200], atol=2e-3, err_msg=cut_id)


def test_a_converted_cut_keeps_its_channels(manifests):
    from mediapipe.loaders.sources.formats import describe_inputs, read_input

    out, cuts = manifests
    source = mp.loaders.lhotse(out / "cuts.jsonl.gz")
    for item in describe_inputs(source):
        cut = cuts[dict(item.fields)["id"]]
        flac, _ = sf.read(io.BytesIO(read_input(item).data), dtype="float32", always_2d=True)
        expected = cut.load_audio()
        assert flac.T.shape == expected.shape, (cut.id, flac.shape, expected.shape)
        np.testing.assert_allclose(flac.T, expected, atol=1e-6, err_msg=cut.id)


def cut_line(manifests, cut_id: str) -> dict:
    out, _ = manifests
    for line in gzip.open(out / "cuts.jsonl.gz", "rt"):
        cut = json.loads(line)
        if cut["id"] == cut_id:
            return cut
    raise KeyError(cut_id)


def write_cuts(path: Path, *cuts: dict) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in cuts))
    return path


def test_a_channel_the_recording_lacks_is_refused_naming_the_cut(manifests, tmp_path):
    cut = cut_line(manifests, "right")
    cut["channel"] = 3
    with pytest.raises(SourceError, match=r"cuts.jsonl:2.*cut 'right'.*channel 3.*recording 'stereo'.*\[0, 1\]"):
        mp.loaders.lhotse(write_cuts(tmp_path / "cuts.jsonl", cut_line(manifests, "left"), cut))
    cut = cut_line(manifests, "array")
    cut["channel"] = [0, 7]
    with pytest.raises(SourceError, match=r"cut 'array'.*channel 7"):
        mp.loaders.lhotse(write_cuts(tmp_path / "cuts.jsonl", cut))


def test_a_monocut_without_a_channel_is_refused_on_a_multichannel_recording(manifests, tmp_path):
    cut = cut_line(manifests, "right")
    del cut["channel"]
    with pytest.raises(SourceError, match=r"cut 'right'.*no 'channel'.*2 channels"):
        mp.loaders.lhotse(write_cuts(tmp_path / "cuts.jsonl", cut))
    mono = cut_line(manifests, "mic1")  # a recording of one channel: channel 0 is the only one
    mono["recording"]["sources"] = mono["recording"]["sources"][1:]
    mono["recording"]["sources"][0]["channels"] = [0]
    mono["recording"]["channel_ids"] = [0]
    del mono["channel"]
    source = mp.loaders.lhotse(write_cuts(tmp_path / "mono.jsonl", mono))
    got = batches(source, "soundfile")["mic1"]
    assert got.shape == (1, round(0.5 * RATE))


def test_a_supervision_channel_the_recording_lacks_is_refused(manifests, tmp_path):
    out, _ = manifests
    lines = [json.loads(s) for s in gzip.open(out / "supervisions.jsonl.gz", "rt")]
    lines[1]["channel"] = 2  # "right" of the stereo recording
    path = tmp_path / "sups.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in lines))
    with pytest.raises(SourceError, match=r"sups.jsonl:2.*supervision 'right'.*channel 2.*recording 'stereo'"):
        mp.loaders.lhotse(recordings=out / "recordings.jsonl.gz", supervisions=path)


def test_dali_refuses_a_source_that_takes_some_channels_of_its_files(manifests):
    from mediapipe.errors import PipelineError
    from mediapipe.loaders.dali.loader import check_lowerable

    out, _ = manifests
    source = mp.loaders.lhotse(out / "cuts.jsonl.gz")
    pipe = mp.Pipeline(source=source, decode={"audio": mp.decoders.audio(mono=True)}, batch_size=2, seed=0)
    with pytest.raises(PipelineError, match="channels"):
        check_lowerable(pipe)


def test_dali_refuses_lhotse_audio_at_the_files_own_rate(manifests):
    """A Lhotse recording states its rate (an Opus file decodes at 48 kHz whatever it says); DALI's
    decoder keeps the file's, so it needs sample_rate= to give what cut.load_audio() gives."""
    from mediapipe.errors import PipelineError
    from mediapipe.loaders.dali.loader import check_lowerable

    out, _ = manifests
    source = mp.loaders.lhotse(recordings=out / "recordings.jsonl.gz", supervisions=out / "supervisions.jsonl.gz")
    with pytest.raises(PipelineError, match=r"sample_rate=None\) with recordings that declare their rate"):
        check_lowerable(mp.Pipeline(source=source, decode={"audio": mp.decoders.audio(mono=True)}, batch_size=2,
                                    seed=0))
    with pytest.raises(PipelineError) as err:  # still refused (the cuts take channels), but not for the rate
        check_lowerable(mp.Pipeline(source=source, decode={"audio": mp.decoders.audio(mono=True, sample_rate=16000)},
                                    batch_size=2, seed=0))
    assert "declare their rate" not in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_source_that_maps_more_channels_than_its_file_has_is_a_decode_error(manifests, tmp_path, backend):
    cut = cut_line(manifests, "mic1")
    cut["recording"]["sources"] = [{**cut["recording"]["sources"][0], "channels": [0, 1]}]  # mic0.wav is mono
    source = mp.loaders.lhotse(write_cuts(tmp_path / "cuts.jsonl", cut))
    with pytest.raises(DecodeError, match=r"mic0.wav.*channel.*1.*1 channel"):
        batches(source, backend)


# ---------------------------------------------------------------------------------------------
# Windows in Matroska / WebM


@pytest.fixture(scope="session")
def ffmpeg() -> str:
    return pytest.importorskip("imageio_ffmpeg").get_ffmpeg_exe()


@pytest.fixture(scope="module")
def containers(tmp_path_factory, ffmpeg) -> dict[str, tuple[Path, int]]:
    """name -> (path, rate): Matroska AAC at 44.1 and 48 kHz, Matroska Vorbis, WebM Opus, MP4
    AAC, Ogg Opus and Vorbis, written by the FFmpeg command line; and two muxed by PyAV."""
    root = tmp_path_factory.mktemp("containers")
    sources = {}
    for rate in (44100, 48000):
        sources[rate] = root / f"src{rate}.wav"
        sf.write(sources[rate], voices(2, 3.0, rate).T, rate, subtype="FLOAT")
    made = {"aac44.mka": (44100, "aac"), "aac48.mka": (48000, "aac"), "vorbis.mka": (44100, "libvorbis"),
            "opus.webm": (48000, "libopus"), "aac44.m4a": (44100, "aac"), "opus.ogg": (48000, "libopus"),
            "vorbis.ogg": (44100, "libvorbis")}
    out = {}
    for name, (rate, codec) in made.items():
        path = root / name
        subprocess.run([ffmpeg, "-v", "error", "-i", str(sources[rate]), "-c:a", codec, str(path)], check=True)
        out[name] = (path, rate)
    # muxed by PyAV: an AAC stream's first packet lies at its priming delay (23 ms at 44.1 kHz), which a
    # millisecond timestamp rounds
    out["pyav-aac44.mka"] = (encode_audio(root / "pyav-aac44.mka", voices(2, 3.0, 44100), 44100), 44100)
    out["pyav-opus.webm"] = (encode_audio(root / "pyav-opus.webm", voices(2, 3.0, 48000), 48000), 48000)
    return out


def pyav_decode(path: Path, **options) -> np.ndarray:
    decoder = mp.decoders.audio(backend="pyav", **options).create()
    return decoder.decode(Blob(str(path), path=str(path)), NO_HINT, SampleRNG(0, 0, 0, 0), {}).numpy()


OFFSETS = [0.0102, 0.0731, 0.1234, 0.2488, 0.3333, 0.5017, 0.7777, 0.9876, 1.2345, 1.5003, 1.7391, 2.0021,
           2.2222, 2.4567, 2.6999]
WINDOW = 0.2
# A lossy decoder that starts after a seek converges on the whole decode's samples but for its
# state (AAC's noise-substitution generator: about 2e-5; Opus's predictors, after its 0.3 s of
# pre-roll: about 3e-5). A window a sample off differs by 0.05 to 0.9 on these signals.
LOSSY_TOLERANCE = 1e-4


@pytest.mark.parametrize("name", ["aac44.mka", "aac48.mka", "vorbis.mka", "opus.webm", "aac44.m4a", "opus.ogg",
                                  "vorbis.ogg", "pyav-aac44.mka", "pyav-opus.webm"])
def test_a_window_is_the_whole_decode_sliced_at_its_sample(containers, name):
    path, rate = containers[name]
    whole = pyav_decode(path)
    for offset in OFFSETS:
        window = pyav_decode(path, offset=offset, duration=WINDOW)
        first = round(offset * rate)
        expected = whole[:, first : first + round(WINDOW * rate)]
        assert window.shape == expected.shape, (offset, window.shape, expected.shape)
        error = float(np.abs(window - expected).max())
        assert error < LOSSY_TOLERANCE, (name, offset, error)


def first_placed(path: Path, first: int) -> int:
    """Where the first frame a window decode of native sample ``first`` on lies: after a seek,
    or 0 where it decodes from the start."""
    import av

    from mediapipe.decoders.audio_pyav import _placed_frames

    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        _, position = next(iter(_placed_frames(container, stream, stream.codec_context.sample_rate, first)))
    return position


def test_matroska_aac_and_webm_opus_seek_vorbis_decodes_from_the_start(containers):
    """AAC and Opus packets hold multiples of a known number of samples: a seek's frame is placed
    on that grid. Vorbis blocks vary in size: its windows are decoded from the start."""
    for name in ("aac44.mka", "aac48.mka", "opus.webm", "pyav-aac44.mka", "pyav-opus.webm"):
        path, rate = containers[name]
        assert first_placed(path, round(2.5 * rate)) > rate, name  # it seeked, to a little before 2.5 s
    path, rate = containers["vorbis.mka"]
    assert first_placed(path, round(2.5 * rate)) == 0


def test_a_frame_off_its_grid_is_decoded_from_the_start(containers, monkeypatch):
    """Where a frame after the seek strays from where the grid puts it, the window is decoded
    again from the start, counting: still the whole decode's slice."""
    import mediapipe.decoders.audio_pyav as pyav_backend

    path, rate = containers["aac44.mka"]
    whole = pyav_decode(path)
    strays = []

    def stray(*args):
        strays.append(args)
        raise pyav_backend._Misplaced
        yield

    monkeypatch.setattr(pyav_backend, "_seek_on_grid", stray)
    window = pyav_decode(path, offset=1.7391, duration=WINDOW)
    first = round(1.7391 * rate)
    assert strays and window.shape == (2, round(WINDOW * rate))
    assert float(np.abs(window - whole[:, first : first + window.shape[1]]).max()) == 0.0


def ffmpeg_window(ffmpeg: str, path: Path, offset: float, duration: float) -> np.ndarray:
    cmd = [ffmpeg, "-v", "error", "-i", str(path), "-ss", f"{offset:.6f}", "-t", f"{duration:.6f}",
           "-f", "f32le", "-acodec", "pcm_f32le", "-"]
    raw = subprocess.run(cmd, capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.float32).reshape(-1, 2).T


@pytest.mark.parametrize("name", ["aac44.mka", "aac48.mka", "vorbis.mka", "opus.webm", "aac44.m4a", "opus.ogg"])
def test_ffmpeg_cuts_the_same_window(containers, ffmpeg, name):
    path, rate = containers[name]
    for offset in (0.1234, 0.7777, 1.5003, 2.2222):
        ours = pyav_decode(path, offset=offset, duration=WINDOW)
        theirs = ffmpeg_window(ffmpeg, path, offset, WINDOW)  # decodes from the start, drops up to offset
        assert ours.shape == theirs.shape, (offset, ours.shape, theirs.shape)
        error = float(np.abs(ours - theirs).max())
        assert error < LOSSY_TOLERANCE, (name, offset, error)


def test_a_video_tracks_audio_in_webm_lines_up_with_the_whole_decode(tmp_path, ffmpeg):
    """``audio(from_field="video")`` over a WebM's clips: the same samples as the whole track."""
    src = tmp_path / "src.wav"
    sf.write(src, voices(2, 2.0, 48000).T, 48000, subtype="FLOAT")
    video = tmp_path / "v.webm"
    subprocess.run([ffmpeg, "-v", "error", "-f", "lavfi", "-i", "color=c=gray:s=64x48:r=25:d=2", "-i", str(src),
                    "-c:v", "libvpx", "-b:v", "100k", "-c:a", "libopus", "-shortest", str(video)], check=True)
    whole = pyav_decode(video)
    decoder = mp.decoders.audio(backend="pyav", from_field="video").create()
    spans = [(0.52, 0.84), (1.04, 1.36)]  # clips of 8 frames at 25 fps
    x = decoder.decode(Blob(str(video), path=str(video)), DecodeHint(span=TimeSpans(tuple(spans), True)),
                       SampleRNG(0, 0, 0, 0), {}).value.numpy()
    for (s, e), got in zip(spans, x):
        first = round(s * 48000)
        expected = whole[:, first : first + round((e - s) * 48000)]
        assert got.shape == expected.shape
        assert float(np.abs(got - expected).max()) < LOSSY_TOLERANCE, s


# ---------------------------------------------------------------------------------------------
# A NeMo offset past the file's end


@pytest.mark.parametrize(("ext", "backend"), [("wav", "soundfile"), ("wav", "pyav"), ("opus", "pyav")])
def test_an_offset_past_the_end_names_the_offset_and_the_duration(tmp_path, ext, backend):
    from mediapipe.synthetic.audio import encode_audio

    path = encode_audio(tmp_path / f"one-second.{ext}", voices(1, 1.0, RATE), RATE)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"audio_filepath": path.name, "offset": 5.0, "duration": 0.5, "text": "x"}) + "\n")
    pipe = mp.Pipeline(source=mp.loaders.nemo(manifest), decode={"audio": mp.decoders.audio(backend=backend)},
                       batch_size=1, seed=0)
    with pytest.raises(DecodeError) as info:
        next(iter(pipe.loader(shuffle=False)))
    message = str(info.value)
    declared = mp.decoders.audio(backend=backend).create().probe(Blob(str(path), path=str(path)))["duration"]
    assert f"one-second.{ext}" in message and abs(declared - 1.0) < 0.05  # Opus's header counts its padding
    assert "5.000 s" in message and f"({declared:.3f} s long)" in message, message
