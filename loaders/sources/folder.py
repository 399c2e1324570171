"""Sources: random-access lists of samples (a folder of class sub-folders, a JSON-lines manifest).

A source is cheap to pickle and to index: ``len(source)``, ``source.ref(i)`` and the
metadata known without decoding, so samplers shuffle, shard and bucket without I/O.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import FunctionType, MappingProxyType
from typing import Any

from mediapipe.errors import PipelineError, SourceError
from mediapipe.fields import FieldType
from mediapipe.sample import Blob, SampleMeta, SampleRef, kind_of_extension

_SOURCES: dict[str, type[Source]] = {}


class Source:
    """Base of the sources: random access by index, a config round trip. Every optional hook a
    pipeline, loader or conversion reads is declared here with its default (what a source that
    does not override it gives)."""

    kind: str = ""
    collate: Mapping[str, str] = MappingProxyType({})  # field -> how it batches ("pad": token ids)
    split_by_rank: bool = False  # True: this rank's part already (shards read by rank), not split again
    rank_samples: tuple[int, ...] | None = None  # with split_by_rank: every rank's part's size
    fingerprint: str | None = None  # a digest of the annotations, that a conversion's resume checks
    picks_channels: bool = False  # some samples take only some channels of their files (Lhotse cuts)
    declares_rates: bool = False  # samples state their audio's rate, which may not be their file's

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_declared(cls)
        if cls.__dict__.get("kind"):  # a subclass that inherits its kind (remote shards) keeps the base's entry
            _SOURCES[cls.kind] = cls

    def __len__(self) -> int:
        raise NotImplementedError

    def ref(self, index: int) -> SampleRef:
        raise NotImplementedError

    def meta(self, index: int) -> SampleMeta:
        """What is known about sample ``index`` without reading it (may be empty)."""
        return self.ref(index).meta

    def listing_ref(self, index: int) -> SampleRef:
        """Sample ``index``'s reference for listing it (a conversion's plan): `ref`, less the
        values that cost work to make and that a listing does not read (decoded masks)."""
        return self.ref(index)

    def prefetch(self, indices: Iterable[int]) -> None:
        """Hint that these samples are read next, so a source whose bytes sit in a few large
        files can start their I/O now and overlap it with decoding. Never required."""

    def field_types(self) -> dict[str, FieldType]:
        """The types of the fields a sample carries besides its media (boxes, labels, masks...),
        so that ops move them with the pixels; {} for none."""
        return {}

    @property
    def classes(self) -> list[str] | None:
        return None

    def to_config(self) -> dict[str, Any]:
        raise NotImplementedError


# the hooks a source declares as values (an attribute or a property), and what each value must be
VALUE_HOOKS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "collate": ("a mapping of field -> 'stack', 'pad' or 'list'", lambda v: isinstance(v, Mapping)),
    "split_by_rank": ("a bool", lambda v: isinstance(v, bool)),
    "rank_samples": ("a tuple of ints or None", lambda v: v is None or (
        isinstance(v, (tuple, list)) and all(isinstance(n, int) and not isinstance(n, bool) for n in v))),
    "fingerprint": ("a string or None", lambda v: v is None or isinstance(v, str)),
    "picks_channels": ("a bool", lambda v: isinstance(v, bool)),
    "declares_rates": ("a bool", lambda v: isinstance(v, bool)),
}
METHOD_HOOKS = ("field_types",)  # the hooks a source declares as methods


def _check_declared(cls: type) -> None:
    """A subclass's hooks declared as the base declares them: a value hook written as a method
    would be read as the bound method (always true), a method hook written as a value would fail
    when called. Refused when the class is made, naming the hook and how to write it."""
    for name in VALUE_HOOKS:
        if isinstance(cls.__dict__.get(name), (FunctionType, staticmethod, classmethod)):
            raise TypeError(f"{cls.__name__}.{name} is a value a source declares, not a method: write "
                            f"`{name} = ...` (a class or instance attribute) or a `@property`")
    for name in METHOD_HOOKS:
        if name in cls.__dict__ and (isinstance(cls.__dict__[name], property) or not callable(cls.__dict__[name])):
            raise TypeError(f"{cls.__name__}.{name} is a method a source declares: write "
                            f"`def {name}(self) -> dict[str, FieldType]`")


def check_hooks(source: Source) -> None:
    """The declared hooks of ``source`` as it is (instance attributes too): each of the type the
    base declares, or a `PipelineError` naming the hook, its value and what it must be."""
    name = type(source).__name__
    for hook in METHOD_HOOKS:
        if not callable(getattr(source, hook)):
            raise PipelineError(f"source {name}.{hook}={getattr(source, hook)!r:.80}: expected a method "
                                f"(def {hook}(self) -> dict[str, FieldType])")
    for hook, (expected, ok) in VALUE_HOOKS.items():
        value = getattr(source, hook)
        if not ok(value):
            raise PipelineError(f"source {name}.{hook}={value!r:.80}: expected {expected}")


class WrappedSource(Source):
    """A source over another (``inner``) that changes what its samples hold or how many there
    are, not what they are: the content hooks (the fields' types and batching, channels, rates,
    classes) are the inner source's. The rank hooks are not: a wrapper that keeps the inner
    source's samples one for one forwards them itself."""

    inner: Source

    @property
    def collate(self) -> Mapping[str, str]:  # type: ignore[override]
        return self.inner.collate

    @property
    def picks_channels(self) -> bool:  # type: ignore[override]
        return self.inner.picks_channels

    @property
    def declares_rates(self) -> bool:  # type: ignore[override]
        return self.inner.declares_rates

    def field_types(self) -> dict[str, FieldType]:
        return self.inner.field_types()

    @property
    def classes(self) -> list[str] | None:
        return self.inner.classes


def source_from_config(config: dict[str, Any]) -> Source:
    config = dict(config)
    kind = config.pop("kind")
    if kind not in _SOURCES:
        raise ValueError(f"unknown source kind {kind!r}; known: {sorted(_SOURCES)}")
    return _SOURCES[kind](**config)


def _media_files(root: Path, extensions: Iterable[str] | None) -> list[Path]:
    """Media files under ``root``, links followed, each directory listed once: a link back up the
    tree (a loop) or a second link to a directory already listed adds nothing."""
    wanted = {e.lower().lstrip(".") for e in extensions} if extensions is not None else None
    found = []
    listed: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in listed:
            dirnames[:] = []
            continue
        listed.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
            if (wanted is None and kind_of_extension(ext) is not None) or (wanted is not None and ext in wanted):
                found.append(Path(dirpath, name))
    return found


class FolderSource(Source):
    """Media files under ``root``; files in class sub-folders get the class's index as label.

    Class names are the sorted names of ``root``'s sub-folders (``source.classes``);
    files directly under ``root`` get no label. The media kind comes from the extension.
    """

    kind = "folder"

    def __init__(self, root: str | os.PathLike, extensions: Iterable[str] | None = None) -> None:
        self.root = Path(root)
        if not self.root.is_dir():  # a typo and a file given for a folder ask for different fixes
            raise SourceError(str(root), "not a directory" if self.root.exists() else "does not exist")
        self.extensions = sorted(extensions) if extensions is not None else None
        files = _media_files(self.root, self.extensions)
        if not files:
            raise SourceError(str(root), "no media files found")
        self._classes = sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )
        index = {name: i for i, name in enumerate(self._classes)}
        self._paths = [str(p) for p in files]
        self._key_start = len(os.path.join(str(self.root), ""))  # every path is root + sep + key
        self._labels = []
        for p in files:
            rel = p.relative_to(self.root)
            self._labels.append(index[rel.parts[0]] if len(rel.parts) > 1 else None)

    def __len__(self) -> int:
        return len(self._paths)

    @property
    def classes(self) -> list[str]:
        return list(self._classes)

    def ref(self, index: int) -> SampleRef:
        path = self._paths[index]
        ext = path.rsplit(".", 1)[-1].lower()
        key = path[self._key_start:]  # a slice, not os.path.relpath: this runs once per sample
        return SampleRef(index=index, key=key, blobs={ext: Blob(path, path=path)}, label=self._labels[index])

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind, "root": str(self.root)}
        if self.extensions is not None:
            config["extensions"] = list(self.extensions)
        return config


class ManifestSource(Source):
    """A JSON-lines file: one object per sample with ``path`` (relative to the manifest's
    folder, or absolute), optional integer ``label``, and other fields: numbers and text
    (transcripts, captions) are passed through to the batch (text as a list of ``str``); a string naming a media file (``"mask": "masks/0001.png"``) is
    another blob of the sample, read by the decoder of the field with that name; and
    ``width``/``height``/``duration``/``frames``/``fps``/``sample_rate``/``num_samples``
    also serve as metadata for samplers."""

    kind = "manifest"
    META_KEYS = ("width", "height", "duration", "frames", "fps", "keyframes", "sample_rate", "num_samples",
                 "channels")

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        base = self.path.parent
        self._rows: list[dict[str, Any]] = []
        for lineno, row in json_lines(self.path):
            if "path" not in row:
                raise SourceError(f"{path}:{lineno}", "each line must be an object with a 'path'")
            for key, value in row.items():
                if key == "path" or (isinstance(value, str) and _is_media_path(value)):
                    p = Path(value)
                    row[key] = str(p if p.is_absolute() else base / p)
            self._rows.append(row)
        if not self._rows:
            raise SourceError(str(path), "manifest lists no samples")

    def __len__(self) -> int:
        return len(self._rows)

    def ref(self, index: int) -> SampleRef:
        row = self._rows[index]
        path = row["path"]
        ext = path.rsplit(".", 1)[-1].lower() if "." in os.path.basename(path) else "bin"
        label = row.get("label")
        meta = {k: row[k] for k in self.META_KEYS if k in row}
        fields = {
            k: v for k, v in row.items()
            if k not in ("path", "label", "key") and ((isinstance(v, (int, float)) and not isinstance(v, bool))
                                                      or (isinstance(v, str) and not _is_media_path(v)))
        }
        blobs = {ext: Blob(path, path=path)}
        blobs.update({k: Blob(v, path=v) for k, v in row.items()
                      if k not in ("path", "key") and isinstance(v, str) and _is_media_path(v)})
        return SampleRef(index=index, key=str(row.get("key", path)), blobs=blobs,
                         label=None if label is None else int(label), meta=meta, fields=fields)

    def meta(self, index: int) -> SampleMeta:
        row = self._rows[index]
        return {k: row[k] for k in self.META_KEYS if k in row}

    def to_config(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path)}


def json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line of a JSON-lines file, gzip-compressed or
    not; a line that is not a JSON object, or text that is not UTF-8, is an error naming it."""
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with (gzip.open if gz else open)(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise SourceError(f"{path}:{lineno}", f"invalid JSON ({err.msg})") from None
                if not isinstance(row, dict):
                    raise SourceError(f"{path}:{lineno}", "each line must be a JSON object")
                yield lineno, row
    except SourceError:
        raise  # an OSError too: it already names the line
    except UnicodeDecodeError as err:
        raise SourceError(str(path), f"not UTF-8 text (byte {err.start} of a line)") from None
    except (OSError, EOFError) as err:
        raise SourceError(str(path), getattr(err, "strerror", None) or str(err)) from None


def _is_media_path(value: str) -> bool:
    return "." in value and kind_of_extension(value.rsplit(".", 1)[-1]) is not None


def folder(root: str | os.PathLike, extensions: Iterable[str] | None = None) -> FolderSource:
    """A folder of media files; class sub-folders become integer labels (sorted names)."""
    return FolderSource(root, extensions)


def manifest(path: str | os.PathLike) -> ManifestSource:
    """A JSON-lines manifest of media files with labels, numeric and text fields."""
    return ManifestSource(path)
