"""The splits of a Hub-style snapshot: which split each Parquet file of a folder is of, and the
refusal of a folder of several (reading them together would merge train and test)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from mediapipe.errors import SourceError

SPLIT_WORDS = ("train", "training", "validation", "valid", "val", "dev", "test", "testing", "eval", "evaluation")
_SHARD_NAME = re.compile(r"(?P<split>.+?)-\d+-of-\d+(?:-[^.]*)?\.parquet")  # an older push_to_hub's -<hash> too
_NUMBERED_NAME = re.compile(r"\d+\.parquet")
_SPLIT_TOKEN = re.compile(rf"(?:^|[-._ ])(?:{'|'.join(SPLIT_WORDS)})(?=$|[-._ 0-9])", re.IGNORECASE)
_WORD_AND_NUMBER = re.compile(rf"(?P<split>{'|'.join(SPLIT_WORDS)})[-._ ]?\d+", re.IGNORECASE)


def split_place(relative: Path) -> tuple[str, tuple[str, ...]] | None:
    """(the split, the folders above the part of the path that names it) of a Parquet file of a
    Hub-style snapshot, from its path below the snapshot: ``<split>-00000-of-00002[-<hash>].parquet``,
    ``<config>/<split>/0000.parquet``, or a file or folder whose name holds a usual split word
    (``train``, ``validation``, ``test``...) as a word: ``test.parquet``, ``train_3.parquet`` (split
    ``train``), ``validation_matched.parquet`` (split ``validation_matched``: a name that says more
    than the word is its own split, never merged into the word's), ``imdb-train.parquet``."""
    name, folders = relative.name, relative.parts[:-1]
    if shard := _SHARD_NAME.fullmatch(name):
        return shard["split"], folders
    if folders and _NUMBERED_NAME.fullmatch(name):
        return folders[-1], folders[:-1]
    for depth, part in ((len(folders), name.removesuffix(".parquet")), *reversed(list(enumerate(folders)))):
        if _SPLIT_TOKEN.search(part):
            numbered = _WORD_AND_NUMBER.fullmatch(part)
            return (numbered["split"] if numbered else part), folders[:depth]
    return None


def split_of(relative: Path) -> str | None:
    """The split a Parquet file of a Hub-style snapshot belongs to (`split_place`), or None."""
    place = split_place(relative)
    return None if place is None else place[0]


def parquet_splits(root: Path, files: Iterable[Path]) -> dict[str, list[Path]]:
    """The files of each split named below ``root`` (files that name no split are left out). A
    split named in several folders (one per config of a snapshot: ``en/train/0000.parquet`` and
    ``fr/train/0000.parquet``) is refused rather than merged."""
    splits: dict[str, list[Path]] = {}
    places: dict[str, set[tuple[str, ...]]] = {}
    for f in files:
        place = split_place(f.relative_to(root))
        if place is not None:
            splits.setdefault(place[0], []).append(f)
            places.setdefault(place[0], set()).add(place[1])
    for split, folders in places.items():
        if len(folders) > 1:
            shown = sorted(str(Path(*p)) if p else "." for p in folders)
            raise SourceError(str(root), f"split {split!r} is in several folders {shown} (configs of a snapshot?), "
                                         "which reading them together would merge: pass the folder of one (or its "
                                         "files, to mp.loaders.parquet)")
    return splits


def _split_files_hint(split: str, files: list[Path]) -> str:
    """A path that gives one split's files to `parquet` or ``mediapipe convert``: their folder
    when it holds only them, else a glob of their names."""
    folder = files[0].parent
    if all(f.parent == folder for f in files):
        if sorted(folder.rglob("*.parquet")) == sorted(files):
            return str(folder)
        if len(files) == 1:
            return str(files[0])
        return str(folder / f"{split}-*.parquet")
    return " ".join(str(f) for f in files[:3]) + (" ..." if len(files) > 3 else "")


def several_splits(root: Path, splits: Mapping[str, list[Path]]) -> str:
    """Why a folder of several splits is not read whole, and how to read one of them."""
    names = sorted(splits)
    example = "train" if "train" in names else names[0]
    hints = "; ".join(f"{name}: {_split_files_hint(name, sorted(splits[name]))}" for name in names)
    return (f"its Parquet files are of splits {names}, which reading them together would merge: pass split= "
            f"(mp.loaders.huggingface({str(root)!r}, split={example!r}); mediapipe convert --split {example}), "
            f"or give one split's files (to mp.loaders.parquet or mediapipe convert): {hints}")


def check_one_split(folder: str | os.PathLike) -> None:
    """Refuse a folder whose Parquet files are of several splits (see `split_of`)."""
    root = Path(folder)
    splits = parquet_splits(root, root.rglob("*.parquet"))
    if len(splits) > 1:
        raise SourceError(str(root), several_splits(root, splits))

