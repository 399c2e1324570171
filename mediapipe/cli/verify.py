"""`mediapipe verify DATASET`: checksums, tar structure, index and a decode of every sample."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="a folder written by `mediapipe convert`")
    p.add_argument("--no-decode", dest="decode", action="store_false", help="check bytes only, decode nothing")
    p.add_argument("--json", action="store_true", help="print the problems and what was checked as JSON")


def run(args: argparse.Namespace) -> int:
    from mediapipe.dataset.inspect import verify

    samples_seen: list[int] = []
    problems = verify(args.dataset, decode=args.decode, on_shard=lambda shard, samples: samples_seen.append(samples))
    checked = what_was_checked(args.dataset, sum(samples_seen), args.decode)
    if args.json:
        print(json.dumps({"ok": not problems, "problems": problems, "checked": checked}, indent=1))
    else:
        for p in problems:
            where = p["shard"] or args.dataset
            if p["member"]:
                where += f":{p['member']}"
            if p["offset"] is not None:
                where += f" at offset {p['offset']}"
            print(f"FAIL {where}: {p['reason']}", file=sys.stderr)
        verdict = "OK" if not problems else f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        print(f"{args.dataset}: {verdict}")
        if checked is not None:
            print(describe(checked, manifest_samples(args.dataset)))
    return 1 if problems else 0


def what_was_checked(dataset: str, samples: int, decoded: bool) -> dict[str, Any] | None:
    """The manifest's shards, their bytes and member digests, beside the samples read from them;
    None when the manifest itself could not be read (its problem says why)."""
    from mediapipe.dataset.manifest import read_manifest
    from mediapipe.errors import SourceError

    try:
        shards = read_manifest(Path(dataset))["shards"]
    except SourceError:
        return None
    return {"shards": len(shards), "samples": samples, "bytes": sum(entry["bytes"] for entry in shards),
            "shards_with_digests": sum(1 for entry in shards if entry.get("digests")), "decoded": decoded}


def manifest_samples(dataset: str) -> int | None:
    """The samples the manifest lists (None where it cannot be read)."""
    from mediapipe.dataset.manifest import read_manifest
    from mediapipe.errors import SourceError

    try:
        return int(read_manifest(Path(dataset))["num_samples"])
    except (SourceError, KeyError, TypeError, ValueError):
        return None


def describe(checked: dict[str, Any], listed: int | None = None) -> str:
    """One sentence, for people, of what `verify` looked at; where fewer samples could be read than
    the manifest's ``listed``, it says so and claims the decode only of those read."""
    shards = checked["shards"]
    digests = (f"the member digests of {checked['shards_with_digests']} of {shards} shards" if shards
               else "no member digests")
    short = listed is not None and checked["samples"] < listed
    decode = ("decoded nothing (--no-decode)" if not checked["decoded"]
              else "decoded every member it could read" if short else "decoded every member")
    samples = f"{checked['samples']} of the manifest's {listed} samples" if short else f"{checked['samples']} samples"
    return (f"checked {shards} shard{'s' if shards != 1 else ''} ({checked['bytes']:,} bytes: each one's size and "
            f"sha256), {samples} (every tar header against the index, the sample records), "
            f"{digests}; {decode}")
