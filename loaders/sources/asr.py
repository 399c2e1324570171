"""Speech manifests: NeMo JSON lines and Lhotse cuts, with durations known without I/O.

Each sample is a segment of an audio file: ``meta(i)`` gives its ``duration`` (so
`DurationBucketSampler` / `source_durations` plan batches without opening a file) and its
``segment`` (start, duration) in seconds, which the audio decoder decodes instead of the
whole file. The transcript arrives in the batch as a list of ``str`` (``batch["text"]``).
Paths are absolute or relative to the manifest's folder.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from mediapipe.decoders.audio import CHANNEL_SOURCES, SOURCE_RATE
from mediapipe.errors import SourceError
from mediapipe.loaders.sources.folder import Source, json_lines
from mediapipe.sample import Blob, SampleMeta, SampleRef

TOLERANCE = 0.01  # seconds a segment may pass its recording's end (rounding of written durations)


def _seconds(row: dict[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = row.get(key, default)
    if value is None:
        raise SourceError(where, f"no {key!r} (seconds): needed to plan batches by duration without opening files")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SourceError(where, f"{key}={value!r}: expected finite seconds >= 0")
    return float(value)


def _offset(row: dict[str, Any], where: str) -> float:
    """A supervision's start within its cut: finite seconds, negative when it began before the cut."""
    value = row.get("start", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SourceError(where, f"start={value!r}: expected finite seconds")
    return float(value)


def _resolve(value: Any, base: Path, where: str, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise SourceError(where, f"{key}={value!r}: expected a path")
    p = Path(value)
    return str(p if p.is_absolute() else base / p)


class _Segments(Source):
    """Rows of (audio path, segment start, duration, text, fields) with a config round trip."""

    def __len__(self) -> int:
        return len(self._rows)

    def ref(self, index: int) -> SampleRef:
        path, start, duration, key, fields, meta = self._rows[index]
        ext = path.rsplit(".", 1)[-1].lower() if "." in os.path.basename(path) else "bin"
        return SampleRef(index, key, {ext: Blob(path, path=path)}, None, self.meta(index), dict(fields))

    def meta(self, index: int) -> SampleMeta:
        _, start, duration, _, _, meta = self._rows[index]
        return {**meta, "duration": duration, "segment": (start, duration)}


class NemoSource(_Segments):
    """A NeMo ASR manifest: one JSON object per line with ``audio_filepath``, ``duration``
    (seconds, required), optional ``offset`` (seconds into the file) and ``text``; other
    string and number keys pass through to the batch."""

    kind = "nemo"

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        base = self.path.parent
        self._rows: list[tuple[str, float, float, str, dict[str, Any], dict[str, Any]]] = []
        for lineno, row in json_lines(self.path):
            where = f"{self.path}:{lineno}"
            audio = _resolve(row.get("audio_filepath"), base, where, "audio_filepath")
            duration = _seconds(row, "duration", where)
            offset = _seconds(row, "offset", where, 0.0)
            fields = {k: v for k, v in row.items() if k not in ("audio_filepath", "duration", "offset")
                      and (isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool)))}
            self._rows.append((audio, offset, duration, f"{os.path.basename(audio)}@{offset:g}", fields, {}))
        if not self._rows:
            raise SourceError(str(path), "manifest lists no samples")

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path)}


ChannelLayout = tuple[tuple[str, tuple[int, ...]], ...]  # (file, the recording's channel of each of its channels)


def _recording_layout(recording: dict[str, Any], base: Path, where: str) -> ChannelLayout:
    """A Lhotse recording's files, each with the recording channels its own channels carry
    (``sources[*].channels``): one multichannel file, or one file per microphone."""
    name = recording.get("id")
    sources = recording.get("sources")
    if not isinstance(sources, list) or not sources or not all(isinstance(src, dict) for src in sources):
        raise SourceError(where, f"recording {name!r}: expected a list of audio sources, got {sources!r}")
    if recording.get("transforms"):
        raise SourceError(where, f"recording {name!r} has transforms (speed, resampling...), which are not "
                          "supported: save the transformed audio (lhotse's cuts.save_audios) and use that manifest")
    layout = []
    for src in sources:
        if src.get("type") != "file":
            raise SourceError(where, f"recording {name!r}: source type {src.get('type')!r} is not supported "
                              "(only 'file'): save the audio to files first (lhotse's cuts.save_audios)")
        channels = _channel_list(src.get("channels", [0]), where, f"recording {name!r}: a source's channels")
        layout.append((_resolve(src.get("source"), base, where, "source"), channels))
    return tuple(layout)


def _channel_list(value: Any, where: str, what: str) -> tuple[int, ...]:
    """A Lhotse channel (an int) or channel list, as a tuple of distinct channel numbers."""
    values = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if (not isinstance(values, list) or not values or len(set(values)) != len(values)
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in values)):
        raise SourceError(where, f"{what} is {value!r}: expected a channel number or a list of distinct ones")
    return tuple(values)


def _pick(layout: ChannelLayout, wanted: tuple[int, ...], rec_id: Any, what: str, where: str
          ) -> tuple[str, dict[str, Any]]:
    """The sample's file and the meta that names its channels (`CHANNEL_SOURCES`), as Lhotse's
    ``Recording.load_audio(channels=wanted)`` reads them: the sources in order, each source's
    channels that are wanted in its own order. No meta where that is every channel of one file."""
    have = sorted(c for _, channels in layout for c in channels)
    for c in wanted:
        if c not in have:
            raise SourceError(where, f"{what} takes channel {c}, which recording {rec_id!r} does not have "
                              f"(its channels: {have})")
    parts = []
    for path, channels in layout:
        indices = tuple(i for i, c in enumerate(channels) if c in wanted)
        if indices:
            parts.append((path, indices, len(channels)))
    if len(parts) == 1 and parts[0][1] == tuple(range(parts[0][2])):
        return parts[0][0], {}
    return parts[0][0], {CHANNEL_SOURCES: tuple((path, indices) for path, indices, _ in parts)}


def _cut_channels(cut: dict[str, Any], layout: ChannelLayout, where: str) -> tuple[int, ...]:
    """The channels a MonoCut or MultiCut takes. A MonoCut without one (written by hand) takes
    its recording's only channel; of a recording with several, it must say which."""
    kind, value = cut.get("type", "MonoCut"), cut.get("channel")
    if value is None:
        have = sorted(c for _, channels in layout for c in channels)
        if len(have) != 1:
            raise SourceError(where, f"cut {cut.get('id')!r} has no 'channel' and its recording has {len(have)} "
                              f"channels {have}: add \"channel\" (a number for a MonoCut, a list for a MultiCut)")
        return tuple(have)
    if kind == "MonoCut" and not (isinstance(value, int) and not isinstance(value, bool)):
        raise SourceError(where, f"cut {cut.get('id')!r} is a MonoCut with channel {value!r}: expected one "
                          "channel number (a MultiCut takes a list)")
    return _channel_list(value, where, f"cut {cut.get('id')!r}: channel")


def _rate_meta(recording: dict[str, Any]) -> dict[str, Any]:
    """A recording's declared rate as a sample's meta: its audio is decoded at it (`SOURCE_RATE`),
    as Lhotse's ``load_audio`` gives it (an Opus file at its recording's rate, not FFmpeg's 48 kHz)."""
    rate = recording.get("sampling_rate")
    if isinstance(rate, int) and not isinstance(rate, bool) and rate > 0:
        return {"sample_rate": rate, SOURCE_RATE: rate}
    return {}


def _check_inside(start: float, duration: float, total: float, what: str, where: str) -> None:
    if start < -TOLERANCE or start + duration > total + TOLERANCE:
        raise SourceError(where, f"{what} [{start:g}, {start + duration:g}] s lies outside its recording "
                          f"[0, {total:g}] s")


class LhotseSource(_Segments):
    """Lhotse manifests: a cut manifest (``cuts.jsonl.gz`` of ``MonoCut``s and ``MultiCut``s,
    one sample per cut, its supervisions' texts joined by spaces), or a recording manifest with
    a supervision manifest (one sample per supervision). Each segment must lie inside its
    recording, and each supervision inside its cut. A sample has the channels Lhotse's
    ``load_audio`` gives it: its cut's ``channel`` (a supervision's), taken from the recording's
    files by their ``sources[*].channels``, one file per microphone included."""

    kind = "lhotse"
    declares_rates = True  # every recording states its rate, which may not be its file's (Opus: 48 kHz)

    def __init__(self, cuts: str | os.PathLike | None = None, recordings: str | os.PathLike | None = None,
                 supervisions: str | os.PathLike | None = None) -> None:
        if (cuts is None) == (recordings is None) or (recordings is None) != (supervisions is None):
            raise ValueError("lhotse: pass cuts=, or recordings= and supervisions=")
        self.cuts = Path(cuts) if cuts is not None else None
        self.recordings = Path(recordings) if recordings is not None else None
        self.supervisions = Path(supervisions) if supervisions is not None else None
        self._rows: list[tuple[str, float, float, str, dict[str, Any], dict[str, Any]]] = []
        if self.cuts is not None:
            self._read_cuts(self.cuts)
        else:
            self._read_pairs(self.recordings, self.supervisions)  # type: ignore[arg-type]
        if not self._rows:
            raise SourceError(str(cuts or supervisions), "manifest lists no samples")
        self.picks_channels = any(CHANNEL_SOURCES in row[5] for row in self._rows)  # not all of a file's

    def _read_cuts(self, path: Path) -> None:
        for lineno, cut in json_lines(path):
            where = f"{path}:{lineno}"
            if cut.get("type", "MonoCut") not in ("MonoCut", "MultiCut"):
                raise SourceError(where, f"cut {cut.get('id')!r} is a {cut.get('type')}, which is not supported "
                                  "(only MonoCut and MultiCut): save its audio first (lhotse's cuts.save_audios)")
            recording = cut.get("recording")
            if not isinstance(recording, dict):
                raise SourceError(where, f"cut {cut.get('id')!r} has no recording")
            layout = _recording_layout(recording, path.parent, where)
            audio, picked = _pick(layout, _cut_channels(cut, layout, where), recording.get("id"),
                                  f"cut {cut.get('id')!r}", where)
            start, duration = _seconds(cut, "start", where, 0.0), _seconds(cut, "duration", where)
            total = _seconds(recording, "duration", where)
            _check_inside(start, duration, total, f"cut {cut.get('id')!r}", where)
            texts = []
            for sup in cut.get("supervisions") or []:
                if not isinstance(sup, dict):
                    raise SourceError(where, "a supervision is not an object")
                # a supervision may pass its cut's edges (Lhotse keeps them on truncation), never its recording's
                s, d = _offset(sup, where), _seconds(sup, "duration", where)
                _check_inside(start + s, d, total, f"supervision {sup.get('id')!r}", where)
                if isinstance(sup.get("text"), str):
                    texts.append(sup["text"])
            fields = {"text": " ".join(texts), "id": str(cut.get("id", ""))}
            meta = _rate_meta(recording)
            self._rows.append((audio, start, duration, str(cut.get("id", f"{path.name}:{lineno}")), fields,
                               {**meta, **picked}))

    def _read_pairs(self, recordings: Path, supervisions: Path) -> None:
        known: dict[str, tuple[ChannelLayout, float, dict[str, Any]]] = {}
        for lineno, rec in json_lines(recordings):
            where = f"{recordings}:{lineno}"
            known[str(rec.get("id"))] = (_recording_layout(rec, recordings.parent, where),
                                         _seconds(rec, "duration", where),
                                         _rate_meta(rec))
        for lineno, sup in json_lines(supervisions):
            where = f"{supervisions}:{lineno}"
            rec_id = str(sup.get("recording_id"))
            if rec_id not in known:
                raise SourceError(where, f"supervision {sup.get('id')!r} names recording {rec_id!r}, which "
                                  f"{recordings.name} does not list")
            layout, total, meta = known[rec_id]
            start, duration = _seconds(sup, "start", where, 0.0), _seconds(sup, "duration", where)
            _check_inside(start, duration, total, f"supervision {sup.get('id')!r}", where)
            what = f"supervision {sup.get('id')!r}"  # Lhotse's default channel is 0
            audio, picked = _pick(layout, _channel_list(sup.get("channel", 0), where, f"{what}: channel"), rec_id,
                                  what, where)
            text = sup.get("text")
            fields = {"text": text if isinstance(text, str) else "", "id": str(sup.get("id", ""))}
            self._rows.append((audio, start, duration, str(sup.get("id", f"{supervisions.name}:{lineno}")),
                               fields, {**meta, **picked}))

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind}
        for name in ("cuts", "recordings", "supervisions"):
            if getattr(self, name) is not None:
                config[name] = str(getattr(self, name))
        return config


def nemo(path: str | os.PathLike) -> NemoSource:
    """A NeMo ASR manifest (JSON lines: audio_filepath, duration, offset, text)."""
    return NemoSource(path)


def lhotse(cuts: str | os.PathLike | None = None, *, recordings: str | os.PathLike | None = None,
           supervisions: str | os.PathLike | None = None) -> LhotseSource:
    """A Lhotse cut manifest, or a recording manifest with its supervision manifest."""
    return LhotseSource(cuts, recordings, supervisions)


def segment_flac(data: bytes, name: str, start: float, duration: float,
                 channel_sources: Any = None, source_rate: int | None = None) -> bytes:
    """The segment [start, start + duration) s of an audio file as FLAC (what `mediapipe convert`
    stores for a manifest's utterance) at the rate its manifest declares (``source_rate``, a
    sample's ``meta[SOURCE_RATE]``), else its own: every channel, or those that
    ``channel_sources`` (a sample's ``meta[CHANNEL_SOURCES]``) names."""
    import io

    import av

    from mediapipe.decoders.base import NO_HINT
    from mediapipe.decoders.registry import create
    from mediapipe.rng import SampleRNG

    if duration <= 0:  # the decoder takes a window of some length: say which segment, not which option
        raise SourceError(name, f"the manifest's segment [{start:.3f}, {start + duration:.3f}) s is empty: there is "
                                "no audio to convert (drop the row, or give it its duration)")
    decoder = create("audio", "auto", mono=False, offset=start, duration=duration)
    meta: dict[str, Any] = {CHANNEL_SOURCES: channel_sources} if channel_sources else {}
    if source_rate:
        meta[SOURCE_RATE] = int(source_rate)
    x = decoder.decode(Blob(name, data=data), NO_HINT, SampleRNG(0, 0, 0, 0), meta)
    x = x.numpy() if hasattr(x, "numpy") else x
    rate = int(source_rate) if source_rate else int(decoder.probe(Blob(name, data=data))["sample_rate"])
    pcm = (x.clip(-1.0, 1.0 - 2**-31) * 2**31).astype("<i4")  # 16- and 24-bit sources fit exactly
    out = io.BytesIO()
    with av.open(out, "w", format="flac") as container:
        stream = container.add_stream("flac", rate=rate, layout=_flac_layout(pcm.shape[0], name))
        frame = av.AudioFrame.from_ndarray(pcm.T.reshape(1, -1).copy(), format="s32", layout=stream.layout.name)
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


_FLAC_LAYOUTS = {1: "mono", 2: "stereo", 3: "3.0", 4: "quad", 5: "5.0", 6: "5.1", 7: "6.1", 8: "7.1"}


def _flac_layout(channels: int, name: str) -> str:
    """FFmpeg's layout name for a FLAC of ``channels`` channels (FLAC stores 1 to 8)."""
    if channels not in _FLAC_LAYOUTS:
        raise SourceError(name, f"{channels} channels: FLAC stores 1 to 8; take fewer (a Lhotse cut's channel list)")
    return _FLAC_LAYOUTS[channels]
