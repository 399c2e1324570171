"""docs/api.md from the docstrings: every public op, decoder, source, sampler and loader, with its arguments.

    python -m mediapipe.cli.api_doc            # print the reference
    python -m mediapipe.cli.api_doc --write    # write docs/api.md

The reference is generated, never edited by hand: tests/test_api_doc.py fails when the checked-in
docs/api.md is not what the docstrings give now, so a changed docstring comes with its page.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"
WIDE = 100  # a signature longer than this is written one argument per line
LOADER_METHODS = ("set_epoch", "state_dict", "load_state_dict", "close")  # what a training loop calls


@dataclass(frozen=True)
class Entry:
    """One documented name: how users write it, and the object its docstring and arguments come from."""

    name: str
    obj: Any


@dataclass(frozen=True)
class Section:
    title: str
    intro: str
    entries: tuple[Entry, ...]


def sections() -> list[Section]:
    """The reference's sections, in the order a newcomer meets them."""
    return [pipeline_section(), loader_section(), *source_sections(), *decoder_sections(), *op_sections(),
            errors_section()]


def pipeline_section() -> Section:
    from mediapipe.pipeline import Pipeline

    methods = ("pipe.loader", "pipe.dataset", "pipe.to_config", "mp.Pipeline.from_config", "pipe.save_config")
    return Section("Pipeline", "The spec: a source, decoders, ops, a batch size, a seed and a device.",
                   (Entry("mp.Pipeline", Pipeline), *(Entry(m, getattr(Pipeline, m.rsplit(".", 1)[-1])) for m in methods)))


def loader_section() -> Section:
    from mediapipe.loaders.auto_workers import AutoLoader
    from mediapipe.loaders.dali.loader import DaliLoader
    from mediapipe.loaders.loader import Loader
    from mediapipe.loaders.loader_base import LoaderBase
    from mediapipe.loaders.ray_loader import RayLoader
    from mediapipe.stages.epoch_cache import EpochCache

    shared = tuple(Entry(f"loader.{m}", getattr(LoaderBase, m)) for m in LOADER_METHODS)
    return Section("Loaders", "`pipe.loader()` makes a `Loader` (the torch backend), `pipe.loader(backend=\"dali\")` "
                   "a `DaliLoader`, `backend=\"ray\"` a `RayLoader`, passing the pipeline and its other arguments "
                   "(`num_workers=\"auto\"`: an `AutoLoader` around the torch backend); each has the methods of "
                   "`LoaderBase` below, `len(loader)` and `loader.stats`.",
                   (Entry("mediapipe.loaders.loader.Loader", Loader),
                    Entry("mediapipe.loaders.auto_workers.AutoLoader", AutoLoader),
                    Entry("mp.EpochCache", EpochCache),
                    Entry("mediapipe.loaders.dali.loader.DaliLoader", DaliLoader),
                    Entry("mediapipe.loaders.ray_loader.RayLoader", RayLoader), *shared))


def source_sections() -> list[Section]:
    import mediapipe.loaders as loaders

    functions = [n for n in loaders.__all__ if inspect.isfunction(getattr(loaders, n))]
    samplers = [n for n in loaders.__all__ if n.endswith("Sampler")]
    return [Section("Sources", "`mp.loaders.<name>(...)`: where samples come from, without decoding them.",
                    tuple(Entry(f"mp.loaders.{n}", getattr(loaders, n)) for n in functions)),
            Section("Samplers", "The order of a pass's batches: `pipe.loader(sampler=...)`.",
                    tuple(Entry(f"mp.loaders.{n}", getattr(loaders, n)) for n in samplers))]


def decoder_sections() -> list[Section]:
    import mediapipe.decoders as decoders

    factories = [n for n in decoders.__all__ if inspect.isfunction(getattr(decoders, n))]
    options = [n for n in decoders.__all__ if n.endswith("Options") and n != "DecoderOptions"]
    return [Section("Decoders", "`mp.decoders.<kind>(...)`: a spec each worker turns into a live backend; "
                    "`register` and `backends` are for third-party backends.",
                    tuple(Entry(f"mp.decoders.{n}", getattr(decoders, n)) for n in factories)),
            Section("Decoder options", "Each kind's options, typed and checked once when the spec is made.",
                    tuple(Entry(f"mp.decoders.{n}", getattr(decoders, n)) for n in options))]


def op_sections() -> list[Section]:
    """One section per module of `mediapipe.augment`, its ops in ``__all__``'s order."""
    import mediapipe.augment as augment

    by_module: dict[str, list[Entry]] = {}
    for name in augment.__all__:
        obj = getattr(augment, name)
        if inspect.isclass(obj) and issubclass(obj, augment.Op) and obj is not augment.Op:
            by_module.setdefault(obj.__module__, []).append(Entry(f"mp.augment.{name}", obj))
    out = []
    for module, entries in by_module.items():
        summary = first_line(importlib.import_module(module))
        out.append(Section(f"Ops: {module.rsplit('.', 1)[-1]}", f"`{module}`: {summary}", tuple(entries)))
    shared = (Entry("mp.augment.Op", augment.Op), Entry("mp.augment.Stage", augment.Stage),
              Entry("mp.augment.op_from_config", augment.op_from_config),
              Entry("mp.augment.registered_ops", augment.registered_ops),
              Entry("mp.Schedule", augment.Schedule), Entry("op.at_epoch", augment.Op.at_epoch))
    constants = ", ".join(f"`{n} = {getattr(augment, n)!r}`" for n in ("IMAGENET_MEAN", "IMAGENET_STD"))
    out.append(Section("Ops: the base and the registry", f"What every op shares. Constants: {constants}.", shared))
    return out


def errors_section() -> Section:
    import mediapipe.errors as errors

    names = [n for n, obj in vars(errors).items() if inspect.isclass(obj) and issubclass(obj, Exception)
             and obj.__module__ == errors.__name__]
    return Section("Errors", "What the library raises on purpose (`mediapipe.errors`, also `mp.<name>`).",
                   tuple(Entry(f"mp.{n}", getattr(errors, n)) for n in names))


# -- rendering --------------------------------------------------------------------------------------
def first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()


def signature(entry: Entry) -> str | None:
    """``Name(arg: type = default, ...)`` as the user calls it; None for a property or a constant."""
    obj = entry.obj
    if isinstance(obj, property):
        return None
    target = obj.__init__ if inspect.isclass(obj) and not dataclasses.is_dataclass(obj) else obj
    if inspect.isclass(obj) and (issubclass(obj, BaseException) or hasattr(obj, "__members__")):
        return None  # errors and enums: the docstring says it all
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    params = [p for name, p in sig.parameters.items() if name not in ("self", "cls")]
    parts = list(_parameters(params))
    head = entry.name
    returns = "" if inspect.isclass(obj) or sig.return_annotation is inspect.Signature.empty else (
        f" -> {_annotation(sig.return_annotation)}")
    one_line = f"{head}({', '.join(parts)}){returns}"
    if len(one_line) <= WIDE:
        return one_line
    return f"{head}(\n" + "".join(f"    {part},\n" for part in parts) + f"){returns}"


def _parameters(params: list[inspect.Parameter]) -> Iterator[str]:
    """Each parameter as written in a signature, with the ``*`` and ``/`` markers where they fall."""
    star_done = False
    for i, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and not star_done:
            yield "*"
            star_done = True
        if p.kind is p.VAR_POSITIONAL:
            star_done = True
        prefix = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        text = prefix + p.name
        if p.annotation is not inspect.Parameter.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not inspect.Parameter.empty:
            text += f" = {p.default!r}" if p.annotation is not inspect.Parameter.empty else f"={p.default!r}"
        yield text
        if p.kind is p.POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind is not p.POSITIONAL_ONLY):
            yield "/"


def _annotation(annotation: Any) -> str:
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def render_entry(entry: Entry) -> str:
    lines = [f"### `{entry.name}`", ""]
    sig = signature(entry)
    if sig is not None:
        lines += ["```python", sig, "```", ""]
    doc = inspect.getdoc(entry.obj)
    lines += ["```text", doc, "```", ""] if doc else ["(no docstring)", ""]
    return "\n".join(lines)


def render(make_sections: Callable[[], list[Section]] = sections) -> str:
    """The whole page."""
    parts = ["# API reference", "",
             "Generated from the docstrings by `python -m mediapipe.cli.api_doc --write`; do not edit by hand",
             "(`tests/test_api_doc.py` checks that this page is what the code says now). The README shows how",
             "the pieces fit; `docs/architecture.md` how they work.", ""]
    built = make_sections()
    parts += ["## Contents", ""]
    parts += [f"- [{s.title}](#{anchor(s.title)}): " + ", ".join(f"`{e.name.rsplit('.', 1)[-1]}`" for e in s.entries)
              for s in built]
    parts.append("")
    for s in built:
        parts += [f"## {s.title}", "", s.intro, ""]
        parts += [render_entry(e) for e in s.entries]
    return "\n".join(parts).rstrip("\n") + "\n"


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return "".join(c for c in title.lower() if c.isalnum() or c in " -_").replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mediapipe.cli.api_doc", description=first_line(sys.modules[__name__]))
    parser.add_argument("--write", action="store_true", help=f"write {API_MD} instead of printing it")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        API_MD.write_text(text)
        print(f"wrote {API_MD}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
