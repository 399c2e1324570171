"""The import graph: no import circles among the modules of the rooms below, no new circle
anywhere in the package, and no test module importing another (shared pieces live in
tests/helpers.py).

The graph is built from the source (ast), not by importing: an edge for every ``import`` at a
module's top level and inside its functions (a lazy import still ties two modules together),
leaving out ``if TYPE_CHECKING:`` blocks, which never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# package -> its folder (pyproject's package-dir mapping)
PACKAGES = {"mediapipe": ROOT / "mediapipe", "mediapipe.decoders": ROOT / "decoders",
            "mediapipe.augment": ROOT / "augment", "mediapipe.loaders": ROOT / "loaders"}

# Rooms whose modules import one another without a circle, lazily or not.
ACYCLIC_ROOMS = ("mediapipe.fields", "mediapipe.augment", "mediapipe.bench", "mediapipe.dataset")

# The circles left elsewhere (each to go, by the room that owns it): a circle found must lie
# within one of these, so none is added.
KNOWN_CYCLES = (
    {"mediapipe.loaders.dali.loader", "mediapipe.loaders.loader", "mediapipe.loaders.loader_base",
     "mediapipe.loaders.ray_loader", "mediapipe.loaders.sampling", "mediapipe.pipeline"},
    {"mediapipe.decoders.video", "mediapipe.decoders.video_nvdec", "mediapipe.decoders.video_pyav"},
    {"mediapipe.loaders.sources.remote_shards", "mediapipe.loaders.sources.shards"},
    {"mediapipe.dataset.convert_plan", "mediapipe.loaders.sources.formats"},
)


def package_modules() -> dict[str, Path]:
    """module name -> file, for every module of the installed package's folders."""
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if package == "mediapipe" and parts and f"mediapipe.{parts[0]}" in PACKAGES:
                continue  # a link or copy of a mapped folder, not a module of its own
            modules[".".join((package, *parts))] = path
    return modules


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, leaving out the bodies of ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in (child, *_runtime_nodes(child)))
            continue
        yield node
        yield from _runtime_nodes(node)


def imported_names(module: str, path: Path) -> Iterator[str]:
    """The dotted names ``module`` imports (for ``from a import b``: a.b, a module or a name in a)."""
    is_package = path.name == "__init__.py"
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*anchor, *([base] if base else [])])
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (the longest prefix of each name that is one)."""
    modules = package_modules()
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(module, path):
            while name and name not in modules:  # from a import b, b a function or a class: a
                name = name.rpartition(".")[0]
            if name:
                targets.add(name)
        targets.discard(module)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def in_rooms(module: str, rooms: tuple[str, ...]) -> bool:
    return any(module == room or module.startswith(f"{room}.") for room in rooms)


def test_the_graph_sees_top_level_and_lazy_imports():
    graph = import_graph()
    assert "mediapipe.augment.base" in graph["mediapipe.augment.geometry"]  # at the top
    assert "mediapipe.decoders.audio_pyav" in graph["mediapipe.augment.audio"]  # inside a function
    assert "mediapipe.augment.base" not in graph["mediapipe.augment.binding"]  # under TYPE_CHECKING only
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_circle_among_the_modules_of_these_rooms():
    graph = import_graph()
    rooms = {m: {t for t in targets if in_rooms(t, ACYCLIC_ROOMS)}
             for m, targets in graph.items() if in_rooms(m, ACYCLIC_ROOMS)}
    assert len(rooms) > 50
    assert cycles(rooms) == []


def test_no_new_import_circle_in_the_package():
    for component in cycles(import_graph()):
        assert any(component <= known for known in KNOWN_CYCLES), f"a new import circle: {sorted(component)}"


def test_no_test_module_imports_another():
    paths = sorted((ROOT / "tests").glob("test_*.py"))
    test_modules = {f"tests.{p.stem}" for p in paths} | {p.stem for p in paths}
    assert len(paths) > 50
    for path in paths:
        for name in imported_names(f"tests.{path.stem}", path):
            assert name not in test_modules, f"{path.name} imports {name}: move what they share to tests/helpers.py"
