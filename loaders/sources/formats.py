"""Any dataset a user already has, opened by what it is: what `mediapipe convert` reads.

`open_any` recognises a folder of media (class sub-folders), a JSON-lines manifest of paths,
TFRecord, MXNet RecordIO, Parquet, Hugging Face (``save_to_disk`` folders and Parquet
snapshots), NeMo and Lhotse manifests, and a COCO annotation file (``.json``, images beside it). `describe_inputs` lists a source's samples as
conversion inputs one at a time (a record's bytes are never all held), and `read_input`
reads one in a conversion worker: a file, or a record through the source it came from.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from mediapipe.errors import SourceError
from mediapipe.loaders.sources.folder import FolderSource, ManifestSource, Source, source_from_config
from mediapipe.sample import Blob

if TYPE_CHECKING:
    from mediapipe.dataset.convert_plan import InputItem

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".record")


def _first_object(path: Path, max_line: int = -1) -> dict[str, Any]:
    """The first JSON object of a JSON-lines file (gzip or not), or {} (also when the first line
    is longer than ``max_line`` characters)."""
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with (gzip.open if gz else open)(path, "rt", encoding="utf-8") as f:
            while line := f.readline(max_line):
                if line.strip():
                    row = json.loads(line)
                    return row if isinstance(row, dict) else {}
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError):
        pass
    return {}


def open_any(src: str | os.PathLike) -> Source:
    """The source that reads ``src``, recognised by its layout, suffix or first line."""
    from mediapipe import loaders

    path = Path(src)
    if path.is_dir():
        if (path / "state.json").exists() or (path / "dataset_dict.json").exists():
            return loaders.huggingface(path)
        if not any(p.suffix in (".parquet", ".rec", *TFRECORD_SUFFIXES) for p in path.iterdir()):
            try:
                return FolderSource(path)
            except SourceError:  # no media: a Hub snapshot (data/train-*.parquet, default/<split>/0000.parquet)?
                if any(path.rglob("*.parquet")):
                    return loaders.huggingface(path)
                raise
        if any(path.rglob("*.parquet")):
            return loaders.huggingface(path)
        if any(path.glob("*.rec")):
            return loaders.recordio(path)
        return loaders.tfrecord(path)
    name = path.name.lower()
    if name.endswith(".parquet"):
        return loaders.parquet(path)
    if name.endswith(".rec"):
        return loaders.recordio(path)
    if name.endswith(TFRECORD_SUFFIXES):
        return loaders.tfrecord(path)
    if name.endswith(".json"):  # one JSON object (a COCO file), or JSON lines of one per sample
        head = _first_object(path, max_line=1 << 16)
        if not head or "images" in head:
            return loaders.coco(path)
    first = _first_object(path)
    if "audio_filepath" in first:
        return loaders.nemo(path)
    if "recording" in first and "start" in first:
        return loaders.lhotse(path)
    return ManifestSource(path)


def _file_size(path: str | None) -> int:
    try:
        return os.path.getsize(path)  # type: ignore[arg-type]
    except OSError:
        return 0  # a missing file is reported when converted


def describe_source(source: Source) -> str:
    """What a manifest says a source was: its kind and config."""
    return f"{source.kind}: {json.dumps(source.to_config(), sort_keys=True)}"


def describe_inputs(source: Source) -> Iterator[InputItem]:
    """Each sample of ``source`` as a conversion input (its key still to be made unique: the
    name is what the key is made from). A sample that cannot be read is listed anyway, with
    no size: its conversion fails and is reported with the reason."""
    from mediapipe.dataset.convert_plan import InputItem

    direct = isinstance(source, (FolderSource, ManifestSource))
    config = None if direct else json.dumps(source.to_config(), sort_keys=True)
    if config is not None:
        _SOURCES[config] = source  # conversion workers forked from here use it, not a copy read again
    for i in range(len(source)):
        if direct:
            ref = source.ref(i)
            (_, blob), *others = ref.blobs.items()  # the sample's file first, then named fields
            extra = tuple((name, str(b.path)) for name, b in others)
            size = sum(_file_size(b.path) for b in ref.blobs.values())
            yield InputItem(i, str(blob.path), ref.key, "", ref.label, blob.extension, size, extra,
                            tuple(sorted(ref.fields.items())))
            continue
        try:
            ref = source.listing_ref(i)
            (field, blob), *_ = ref.blobs.items()
            segment = ref.meta.get("segment")
            size = blob.nbytes()
        except SourceError as err:
            yield InputItem(i, err.path, f"{source.kind}-{i}", "", None, "", 0, source=config, blob="")
            continue
        ext = "flac" if segment is not None else ""  # else the kind comes from the bytes
        # numbers and text are kept (the converted format's fields); tensors (boxes, label arrays) are not
        fields = tuple(sorted((k, v) for k, v in ref.fields.items()
                              if type(v) is str or (isinstance(v, (int, float)) and not isinstance(v, bool))))
        yield InputItem(i, blob.name, ref.key, "", ref.label, ext, size, (), fields, source=config, blob=field,
                        segment=None if segment is None else (float(segment[0]), float(segment[1])))


_SOURCES: dict[str, Source] = {}  # by config: each source is opened once per process
MAX_OPEN_SOURCES = 4


def _source(config: str) -> Source:
    source = _SOURCES.get(config)
    if source is None:
        if len(_SOURCES) >= MAX_OPEN_SOURCES:
            _SOURCES.pop(next(iter(_SOURCES)))
        source = _SOURCES[config] = source_from_config(json.loads(config))
    return source


def target_types(item: InputItem) -> dict[str, Any]:
    """The per-object fields (boxes, labels, masks...) the source of ``item`` declares: what a
    conversion writes into each sample's ``.json`` member ({} for none)."""
    if item.source is None:
        return {}
    return _source(item.source).field_types()


class Input(NamedTuple):
    """One conversion input read: its bytes, the values of its `target_types` fields, and the
    (height, width) they are drawn on when the source knows it."""

    data: bytes
    targets: dict[str, Any]
    canvas: tuple[int, int] | None = None


def read_input(item: InputItem) -> Input:
    """One conversion input: its file, or its record read through its source (an audio segment
    cut to FLAC), with its targets."""
    if item.source is None:  # (a FIFO or a device is refused, not read: `Blob.read`)
        return Input(Blob(item.path, path=item.path).read(), {})
    ref = _source(item.source).ref(item.position)
    if item.blob not in ref.blobs:
        raise SourceError(item.path, f"no media {item.blob!r} in this sample")
    data = ref.blobs[item.blob].read()
    if item.segment is not None:
        from mediapipe.loaders.sources.asr import CHANNEL_SOURCES, SOURCE_RATE, segment_flac

        data = segment_flac(data, item.path, *item.segment, ref.meta.get(CHANNEL_SOURCES), ref.meta.get(SOURCE_RATE))
    targets = {name: ref.fields[name] for name in target_types(item) if name in ref.fields}
    size = (ref.meta.get("height"), ref.meta.get("width"))
    return Input(data, targets, size if all(isinstance(v, int) for v in size) else None)
