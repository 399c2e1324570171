"""ASR manifests: NeMo JSON lines and Lhotse manifests written by lhotse; segments decode as the
same slice of the whole file (soundfile as the oracle); durations plan buckets without opening a
file; transcripts reach the batch as str and, through tokenize(), as padded ids with lengths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import mediapipe as mp
from mediapipe.errors import SourceError

sf = pytest.importorskip("soundfile")
RATE = 16000
TEXTS = ["hello world", "ok", "the quick brown fox"]


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    """Three mono FLAC files of 1.0, 1.5 and 2.0 s (chirps, so any misplaced slice differs)."""
    root = tmp_path_factory.mktemp("speech")
    waves = []
    for i in range(3):
        t = np.arange(int(RATE * (1.0 + 0.5 * i))) / RATE
        x = (0.4 * np.sin(2 * np.pi * (200 + 300 * t + 40 * i) * t)).astype(np.float32)
        sf.write(root / f"utt{i}.flac", x, RATE)
        waves.append(sf.read(root / f"utt{i}.flac", dtype="float32")[0])
    return root, waves


def write_nemo(root: Path, rows: list[dict]) -> Path:
    path = root / "manifest.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_nemo_segments_decode_the_slice_and_texts_reach_the_batch(speech, tmp_path):
    root, waves = speech
    rows = [{"audio_filepath": str(root / "utt0.flac"), "duration": 1.0, "text": TEXTS[0], "lang": "en"},
            {"audio_filepath": str(root / "utt1.flac"), "offset": 0.25, "duration": 0.5, "text": TEXTS[1],
             "lang": "de"},
            {"audio_filepath": "utt2.flac", "offset": 1.0, "duration": 0.75, "text": TEXTS[2], "lang": "fr"}]
    source = mp.loaders.nemo(write_nemo(root, rows))  # a relative path is relative to the manifest
    assert [source.meta(i)["duration"] for i in range(3)] == [1.0, 0.5, 0.75]
    pipe = mp.Pipeline(source=source, decode={"audio": mp.decoders.audio(sample_rate=RATE)}, batch_size=3, seed=0)
    batch = next(iter(pipe.loader(shuffle=False)))
    assert batch["text"] == TEXTS and batch["lang"] == ["en", "de", "fr"]
    for i, row in enumerate(rows):
        start, n = round(row.get("offset", 0) * RATE), round(row["duration"] * RATE)
        assert int(batch["audio_lengths"][i]) == n
        np.testing.assert_allclose(batch["audio"][i, 0, :n].numpy(), waves[i][start:start + n], atol=1e-5)


def test_durations_plan_buckets_without_opening_a_file(speech, tmp_path):
    root, _ = speech
    rows = [{"audio_filepath": f"missing/{i}.flac", "duration": 0.5 + 0.25 * (i % 5), "text": "x"} for i in range(20)]
    source = mp.loaders.nemo(write_nemo(tmp_path, rows))
    durations = mp.loaders.source_durations(source)
    assert durations.tolist() == [r["duration"] for r in rows]
    sampler = mp.loaders.DurationBucketSampler(durations, max_duration=2.0, num_buckets=2, seed=0)
    batches = sampler.batches()
    assert sorted(int(i) for b in batches for i in b.indices) == list(range(20))
    assert all(durations[b.indices].sum() <= 2.0 + 1e-9 for b in batches)


@pytest.mark.parametrize(("line", "reason"), [
    ({"audio_filepath": "a.flac", "text": "no duration"}, "no 'duration'"),
    ({"audio_filepath": "a.flac", "duration": float("nan")}, "expected finite seconds"),
    ({"audio_filepath": "a.flac", "duration": 1.0, "offset": -2}, "offset=-2"),
    ({"duration": 1.0}, "audio_filepath=None"),
])
def test_bad_nemo_rows_are_named_by_line(tmp_path, line, reason):
    good = {"audio_filepath": "a.flac", "duration": 1.0}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(SourceError, match=rf"m.json:2.*{reason}"):
        mp.loaders.nemo(path)


def test_a_non_utf8_manifest_is_named(tmp_path):
    path = tmp_path / "m.json"
    path.write_bytes(b'{"audio_filepath": "a.flac", "duration": 1.0, "text": "\xff\xfe"}\n')
    with pytest.raises(SourceError, match="not UTF-8"):
        mp.loaders.nemo(path)


@pytest.fixture(scope="module")
def lhotse_manifests(speech, tmp_path_factory):
    lhotse = pytest.importorskip("lhotse")
    root, _ = speech
    out = tmp_path_factory.mktemp("lhotse")
    recordings = lhotse.RecordingSet.from_recordings(
        lhotse.Recording.from_file(root / f"utt{i}.flac", recording_id=f"rec{i}") for i in range(3))
    supervisions = lhotse.SupervisionSet.from_segments(
        [lhotse.SupervisionSegment(f"sup{i}", f"rec{i}", start=0.25 * i, duration=0.5, text=TEXTS[i])
         for i in range(3)])
    recordings.to_file(out / "recordings.jsonl.gz")
    supervisions.to_file(out / "supervisions.jsonl.gz")
    cuts = lhotse.CutSet.from_manifests(recordings=recordings, supervisions=supervisions).trim_to_supervisions()
    cuts.to_file(out / "cuts.jsonl.gz")
    return out, list(cuts)


def test_lhotse_cuts_and_supervisions_give_the_same_segments(speech, lhotse_manifests):
    root, waves = speech
    out, cuts = lhotse_manifests
    by_cuts = mp.loaders.lhotse(out / "cuts.jsonl.gz")
    by_pairs = mp.loaders.lhotse(recordings=out / "recordings.jsonl.gz", supervisions=out / "supervisions.jsonl.gz")
    assert len(by_cuts) == len(by_pairs) == 3
    for i, cut in enumerate(cuts):
        for source in (by_cuts, by_pairs):
            meta = source.meta(i)
            assert meta["segment"] == pytest.approx((cut.start, cut.duration)) and meta["sample_rate"] == RATE
            assert source.ref(i).fields["text"] == cut.supervisions[0].text
    pipe = mp.Pipeline(source=by_cuts, decode={"audio": mp.decoders.audio(sample_rate=RATE)}, batch_size=3, seed=0)
    batch = next(iter(pipe.loader(shuffle=False)))
    for i, cut in enumerate(cuts):
        n = round(cut.duration * RATE)
        expected = cut.load_audio()[0]  # lhotse's own decode of the cut
        assert int(batch["audio_lengths"][i]) == n == len(expected)
        np.testing.assert_allclose(batch["audio"][i, 0, :n].numpy(), expected, atol=1e-5)


def test_a_lhotse_supervision_outside_its_recording_is_named(lhotse_manifests, tmp_path):
    import gzip

    out, _ = lhotse_manifests
    lines = gzip.open(out / "supervisions.jsonl.gz", "rt").read().splitlines()
    bad = json.loads(lines[1])
    bad["start"] = 1.4  # rec1 lasts 1.5 s: [1.4, 1.9] passes its end
    (tmp_path / "sups.jsonl").write_text("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    with pytest.raises(SourceError, match=r"sups.jsonl:2.*supervision 'sup1'.*outside its recording"):
        mp.loaders.lhotse(recordings=out / "recordings.jsonl.gz", supervisions=tmp_path / "sups.jsonl")
    cut = json.loads(gzip.open(out / "cuts.jsonl.gz", "rt").readline())
    cut["supervisions"][0]["duration"] = 9.0
    (tmp_path / "cuts.jsonl").write_text(json.dumps(cut) + "\n")
    with pytest.raises(SourceError, match=r"cuts.jsonl:1.*outside its recording"):
        mp.loaders.lhotse(tmp_path / "cuts.jsonl")


def test_tokenize_gives_padded_ids_with_lengths_next_to_the_text(speech, tmp_path):
    root, _ = speech
    rows = [{"audio_filepath": str(root / f"utt{i}.flac"), "duration": 0.5, "text": TEXTS[i]} for i in range(3)]
    vocab = {c: i + 1 for i, c in enumerate(sorted(set("".join(TEXTS))))}
    source = mp.loaders.tokenize(mp.loaders.nemo(write_nemo(tmp_path, rows)), lambda s: [vocab[c] for c in s])
    pipe = mp.Pipeline(source=source, decode={"audio": mp.decoders.audio(sample_rate=RATE)}, batch_size=3, seed=0)
    for workers in (0, 1):
        batch = next(iter(pipe.loader(shuffle=False, num_workers=workers, worker_type="thread")))
        assert batch["text"] == TEXTS
        assert batch["text_ids_lengths"].tolist() == [len(t) for t in TEXTS]
        assert batch["text_ids"].shape == (3, max(len(t) for t in TEXTS))
        for i, text in enumerate(TEXTS):
            assert batch["text_ids"][i, :len(text)].tolist() == [vocab[c] for c in text]
            assert not batch["text_ids"][i, len(text):].any()
    with pytest.raises(SourceError, match="the tokenizer failed"):
        mp.loaders.tokenize(mp.loaders.nemo(tmp_path / "manifest.json"), lambda s: ["x"]).ref(0)


def test_a_lhotse_recording_that_is_not_a_file_is_named(lhotse_manifests, tmp_path):
    import gzip

    out, _ = lhotse_manifests
    cut = json.loads(gzip.open(out / "cuts.jsonl.gz", "rt").readline())
    cut["recording"]["sources"][0] = {"type": "url", "channels": [0], "source": "http://example.invalid/a.flac"}
    (tmp_path / "cuts.jsonl").write_text(json.dumps(cut) + "\n")
    with pytest.raises(SourceError, match=r"cuts.jsonl:1.*source type 'url' is not supported"):
        mp.loaders.lhotse(tmp_path / "cuts.jsonl")
