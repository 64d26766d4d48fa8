"""Which way imports run (DESIGN.md): read every module's imports with ``ast`` and check the layers.

- the stages (``asr/``, ``tts/``) and ``transports/`` never import ``agent/`` (not even lazily or
  for type checking);
- ``bench/`` and ``tests/`` never import each other; what both need lives in ``testkit/``, which
  imports neither;
- no circle among the modules of the product packages. Edges are the imports at module level
  and the lazy ones inside functions (a lazy import still runs the other module, and a circle
  through it is still a circle a reader has to untangle); imports under ``if TYPE_CHECKING:``
  never run, so they are left out. ``import a.b.c`` counts as an edge to ``a.b.c`` only, not
  to the parent packages Python also initialises.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("agent", "asr", "tts", "transports")
STAGES = ("asr", "tts", "transports")
SCANNED = (*PRODUCT, "bench", "tests", "testkit", "examples")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def parsed(path: Path) -> ast.Module:
    """The module's syntax tree, parsed once for every test (the trees are only read)."""
    return ast.parse(path.read_text(), str(path))


@cache
def all_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "results" not in path.relative_to(ROOT).parts:
                found[module_name(path)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, typing_only: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement with whether it sits under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, typing_only
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), typing_only)
        else:
            yield from _imports(node, typing_only)


def imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, int, bool]]:
    """``(target module, line, typing only)`` for each import in ``path`` (targets as dotted names)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node, typing_only in _imports(parsed(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, typing_only
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            yield (sub if sub in modules else base), node.lineno, typing_only


@cache
def graph() -> tuple[dict[str, Path], list[tuple[str, str, int, bool]]]:
    modules = all_modules()
    edges = [(name, target, line, typing_only) for name, path in modules.items()
             for target, line, typing_only in imported(name, path, modules)]
    return modules, edges


def top(name: str) -> str:
    return name.split(".")[0]


def test_the_scan_sees_the_tree() -> None:
    modules, edges = graph()
    assert {"agent.cli", "asr.offline.transcriber", "tts.engines", "transports.phone.transport"} <= set(modules)
    pairs = {(a, b, typing_only) for a, b, _, typing_only in edges}
    assert ("agent.config", "asr.options", False) in pairs  # a module-level import
    assert ("agent.cli_transcribe", "asr.offline.transcriber", False) in pairs  # a lazy one, in a function
    assert ("agent.models", "asr.offline.window_engine", True) in pairs  # under TYPE_CHECKING


def test_stages_and_transports_never_import_the_runtime() -> None:
    _, edges = graph()
    bad = sorted({f"{a}:{line} imports {b}" for a, b, line, _ in edges if top(a) in STAGES and top(b) == "agent"})
    assert not bad, "\n".join(bad)


def test_bench_and_tests_never_import_each_other() -> None:
    _, edges = graph()
    forbidden = {("bench", "tests"), ("tests", "bench"), ("testkit", "tests"), ("testkit", "bench")}
    bad = sorted({f"{a}:{line} imports {b}" for a, b, line, _ in edges if (top(a), top(b)) in forbidden})
    assert not bad, "\n".join(bad)


def strongly_connected(nodes: list[str], succ: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components (iterative), each with more than one module or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(succ.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(succ.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in succ.get(node, ()):
                    out.append(sorted(component))
    return out


def test_no_import_circles_in_the_product_packages() -> None:
    modules, edges = graph()
    product = sorted(m for m in modules if top(m) in PRODUCT)
    succ: dict[str, set[str]] = {}
    for a, b, _, typing_only in edges:
        if not typing_only and a in modules and b in modules and top(a) in PRODUCT and top(b) in PRODUCT:
            succ.setdefault(a, set()).add(b)
    circles = strongly_connected(product, succ)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_finder_finds_circles() -> None:
    succ = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert sorted(strongly_connected(["a", "b", "c", "d", "e"], succ)) == [["a", "b", "c"], ["e"]]


def test_offline_tools_and_model_loaders_never_reach_pipecat() -> None:
    """The offline stack runs on a bare GPU machine: from ``asr.offline`` and the model loaders, no
    import (lazy ones included) leads to pipecat; only the thin service adapters use it."""
    modules, edges = graph()
    succ: dict[str, set[str]] = {}
    for a, b, _, typing_only in edges:
        if not typing_only:
            succ.setdefault(a, set()).add(b)
    starts = [m for m in modules if m.startswith("asr.offline")]
    starts += ["asr.parakeet.shared_engine", "asr.whisper_model", "asr.parakeet.tiny"]
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(succ.get(m, ()))
    bad = sorted(f"{a} imports {b}" for a in seen for b in succ.get(a, ()) if top(b) == "pipecat")
    assert not bad, "\n".join(bad)


@cache
def _top_level_names(path: Path) -> set[str] | None:
    """Names a module binds at its top level (None: it has a module ``__getattr__``, anything goes)."""
    names: set[str] = set()
    tree = parsed(path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__":
            return None
    blocks = list(tree.body)
    while blocks:
        node = blocks.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            blocks.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.ExceptHandler):
            blocks.extend(node.body)
    return names


def test_every_import_of_our_modules_names_something_that_exists() -> None:
    """A lazy ``from x import y`` inside a function fails only when it runs: after a move, check them all."""
    modules = all_modules()
    ours = SCANNED
    bad = []
    for name, path in modules.items():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Import):
                bad += [f"{name}:{node.lineno} import {a.name}" for a in node.names
                        if top(a.name) in ours and a.name not in modules]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module and top(node.module) in ours:
                if node.module not in modules:
                    bad.append(f"{name}:{node.lineno} from {node.module}")
                    continue
                defined = _top_level_names(modules[node.module])
                bad += [f"{name}:{node.lineno} from {node.module} import {a.name}" for a in node.names
                        if defined is not None and a.name not in defined and f"{node.module}.{a.name}" not in modules]
    assert not bad, "\n".join(bad)
