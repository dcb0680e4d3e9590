"""The house's shape, read from the source with `ast` (nothing is imported, no server).

- No package-level import cycle under `tether`. A package is a subpackage of `tether`
  (`tether.worker`, `tether.agents`, ...) or a top-level module (`tether.errors`). An
  edge is an import that runs when its module is imported: statements at module level,
  also inside a module-level `if`/`try`/`with` or a class body, but not inside a function
  and not under `if TYPE_CHECKING:`. The root `tether/__init__.py` is no package of its
  own (every import of `tether.x` runs it first); `from tether import x` is an edge to
  `tether.x`. Lazy loads by name (`importlib.import_module`) are not read.
- nats-py (`nats`, `nats.*`) is imported only under `tether/nats/`: any import, also in a
  function or under `TYPE_CHECKING`.
- `tether.worker` imports nothing from `tether.agents`, and `tether.nats` nothing from
  `tether.integrations`: any import, as above.
- No module under `tether/integrations` reads another object's `_store`.
- No module under `tether` is over 400 lines.
- No shim. A module whose body (past its docstring) is only imports, `__all__` and
  `if TYPE_CHECKING:` blocks defines nothing: it only re-exports. Only a package's
  `__init__.py` may be so (it is the package's public API: `tether.tools`,
  `tether.schemas`, ...), and it re-exports only from modules of its own package; a
  name that moved is imported from its new home, never through its old one. The root
  `tether/__init__.py`, the front door, defines its lazy loading and is no such module.
- No source, docs page or README says it keeps something "for one round".
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "services"
PACKAGE = ROOT / "tether"
MAX_LINES = 400


@dataclass(frozen=True)
class Import:
    """One import statement's target, where it is, and whether it runs at import time."""

    source: str  # the importing module, e.g. tether.worker.step
    target: str  # the imported module, e.g. tether.agents.schemas (or nats.errors)
    path: str  # the importing file, relative to services/
    line: int
    eager: bool  # at module level and not under TYPE_CHECKING


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(body: list[ast.stmt], eager: bool) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement under `body`, with whether it runs when the module is imported."""
    for node in body:
        yield node, eager
        if isinstance(node, ast.If):
            yield from _statements(node.body, eager and not _is_type_checking(node.test))
            yield from _statements(node.orelse, eager)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _statements(node.body, False)
        elif isinstance(node, ast.ClassDef):
            yield from _statements(node.body, eager)
        elif isinstance(node, (ast.Try, ast.TryStar)):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _statements(block, eager)
            for handler in node.handlers:
                yield from _statements(handler.body, eager)
        elif isinstance(node, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
            yield from _statements(node.body, eager)
            yield from _statements(getattr(node, "orelse", []), eager)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                yield from _statements(case.body, eager)


def _targets(node: ast.stmt, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: resolved against the importing module's package
        package = module.split(".")
        package = package if is_package else package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    if base != "tether":
        return [base]
    # `from tether import worker` imports the subpackage tether.worker; `Client`, the root
    return [f"tether.{a.name}" if _is_module(a.name) else "tether" for a in node.names]


def _is_module(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


@cache
def imports() -> tuple[Import, ...]:
    """Every import statement in every module under services/tether."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        for node, eager in _statements(tree.body, True):
            for target in _targets(node, module, is_package):
                where = str(path.relative_to(ROOT))
                found.append(Import(module, target, where, node.lineno, eager))
    return tuple(found)


def package_of(module: str) -> str | None:
    """`tether.worker.step` -> `tether.worker`; None for the root and for other packages."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "tether" and len(parts) > 1 else None


def _graph() -> dict[str, dict[str, list[Import]]]:
    """Package -> imported package -> the imports that make the edge (eager ones only)."""
    graph: dict[str, dict[str, list[Import]]] = {}
    for found in imports():
        source, target = package_of(found.source), package_of(found.target)
        if found.eager and source and target and source != target:
            graph.setdefault(source, {}).setdefault(target, []).append(found)
    return graph


def _cycle_from(graph: dict[str, dict[str, list[Import]]], start: str) -> list[str] | None:
    """A shortest cycle through `start` (breadth first), as its packages in order."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, {})):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    return None


def cycles(graph: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """One shortest cycle through each package that is on one, each cycle named once."""
    seen: set[frozenset[str]] = set()
    found = []
    for start in sorted(graph):
        cycle = _cycle_from(graph, start)
        if cycle and frozenset(cycle) not in seen:
            seen.add(frozenset(cycle))
            found.append(cycle)
    return found


def _describe(graph: dict[str, dict[str, list[Import]]], cycle: list[str]) -> str:
    lines = [" -> ".join(cycle)]
    for source, target in pairwise(cycle):
        lines.append(f"  {source} -> {target}:")
        lines += [f"    {i.path}:{i.line} imports {i.target}" for i in graph[source][target]]
    return "\n".join(lines)


def _listing(found: list[Import]) -> str:
    return "\n".join(f"  {i.path}:{i.line} imports {i.target}" for i in found)


def test_the_walker_sees_the_imports_it_must_judge() -> None:
    """A guard against a walker that finds nothing and so passes everything."""
    graph = _graph()
    assert "tether.worker" in graph and "tether.nats" in graph["tether.worker"]
    assert any(i.target.startswith("nats.") for i in imports())
    assert package_of("tether.worker.step") == "tether.worker"
    assert package_of("tether.errors") == "tether.errors"
    assert package_of("tether") is None and package_of("nats.errors") is None


def test_the_cycle_finder_finds_a_cycle_and_names_its_edges() -> None:
    one = Import("tether.a.x", "tether.b.y", "tether/a/x.py", 3, True)
    back = Import("tether.b.y", "tether.a.z", "tether/b/y.py", 5, True)
    graph = {"tether.a": {"tether.b": [one]}, "tether.b": {"tether.a": [back]}}
    assert cycles(graph) == [["tether.a", "tether.b", "tether.a"]]
    assert "tether/b/y.py:5 imports tether.a.z" in _describe(graph, cycles(graph)[0])
    assert cycles({"tether.a": {"tether.b": [one]}}) == []


def test_no_package_level_import_cycle() -> None:
    graph = _graph()
    found = cycles(graph)
    assert not found, "package-level import cycles (module-level imports only):\n" + "\n".join(
        _describe(graph, cycle) for cycle in found
    )


def test_nats_py_is_imported_only_under_tether_nats() -> None:
    outside = [
        i
        for i in imports()
        if (i.target == "nats" or i.target.startswith("nats."))
        and package_of(i.source) != "tether.nats"
    ]
    assert not outside, (
        "nats-py imported outside tether/nats/ (move the call behind the seam):\n"
        + _listing(outside)
    )


def test_the_worker_imports_nothing_from_agents() -> None:
    found = [
        i
        for i in imports()
        if package_of(i.source) == "tether.worker" and package_of(i.target) == "tether.agents"
    ]
    assert not found, "tether.worker imports from tether.agents:\n" + _listing(found)


def test_the_nats_seam_imports_nothing_from_the_integrations() -> None:
    """Lazy imports count too: the seam serves every framework's kit and knows none
    (LangGraph's threads are removed by `tether gc` through the integration itself)."""
    found = [
        i
        for i in imports()
        if package_of(i.source) == "tether.nats" and package_of(i.target) == "tether.integrations"
    ]
    assert not found, "tether.nats imports from tether.integrations:\n" + _listing(found)


def test_the_integrations_reach_into_no_steps_store() -> None:
    """A framework's kit uses what `StepContext` offers (`memo`, `keep_memo`,
    `connection`), so the step's private store can change under it."""
    found = []
    for path in sorted((PACKAGE / "integrations").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "_store":
                owner = node.value
                if not (isinstance(owner, ast.Name) and owner.id == "self"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "reaches into a StepContext's _store:\n" + "\n".join(found)


def test_no_module_is_over_400_lines() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    over = {path: size for path, size in sizes.items() if size > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split them):\n" + "\n".join(
        f"  {path}: {size} lines" for path, size in sorted(over.items(), key=lambda kv: -kv[1])
    )


def _only_imports(tree: ast.Module) -> bool:
    """Whether the module defines nothing: its body is imports, `__all__` and
    `if TYPE_CHECKING:` blocks (after its docstring)."""
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    for node in body:
        names = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if not (
            isinstance(node, (ast.Import, ast.ImportFrom))
            or (isinstance(node, ast.If) and _is_type_checking(node.test))
            or (names and all(isinstance(n, ast.Name) and n.id == "__all__" for n in names))
        ):
            return False
    return True


def _shim(path: Path, tree: ast.Module) -> str | None:
    """Why the module at `path` is a shim, or None when it is not one."""
    if not _only_imports(tree):
        return None
    if path.name != "__init__.py":
        return "defines nothing: import its names from their home instead"
    package = _module_name(path)
    outside = sorted(
        {
            target
            for node, _ in _statements(tree.body, True)
            for target in _targets(node, package, True)
            if target.startswith("tether") and not target.startswith(f"{package}.")
        }
    )
    return f"re-exports {', '.join(outside)}, outside its package" if outside else None


def test_the_shim_finder_knows_a_shim_from_a_package_api() -> None:
    moved = ast.parse(
        '"""Moved."""\nfrom tether.deploys.rollout import Rollout\n__all__ = ["Rollout"]'
    )
    assert _shim(PACKAGE / "worker" / "rollout.py", moved) is not None
    borrowed = ast.parse("from tether.tools import App\nfrom tether.worker.worker import Worker")
    assert "tether.tools" in (_shim(PACKAGE / "worker" / "__init__.py", borrowed) or "")
    own = ast.parse("from tether.worker.worker import Worker\n__all__ = ['Worker']")
    assert _shim(PACKAGE / "worker" / "__init__.py", own) is None
    assert _shim(PACKAGE / "worker" / "x.py", ast.parse("import os\nX = 1")) is None


def test_no_module_is_a_shim() -> None:
    found = [
        f"  {path.relative_to(ROOT)} {why}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (why := _shim(path, ast.parse(path.read_text()))) is not None
    ]
    assert not found, "shims (move their callers to the real modules, then delete):\n" + (
        "\n".join(found)
    )


def test_nothing_is_kept_for_one_round() -> None:
    """Round 4 kept old names "for one round"; that round is over."""
    repo = ROOT.parent
    texts = [*PACKAGE.rglob("*.py"), repo / "README.md", *(repo / "docs").rglob("*.md")]
    found = [
        f"  {path.relative_to(repo)}:{number}"
        for path in sorted(texts)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "for one round" in line.lower()
    ]
    assert not found, "kept 'for one round' (remove it and move its callers):\n" + "\n".join(found)


def test_every_tether_module_imported_exists() -> None:
    """mypy ignores missing imports (for the optional frameworks), so a module that was
    moved or removed and still imported somewhere would fail only when run."""
    missing = [
        f"{found.path}:{found.line} imports {found.target}"
        for found in imports()
        if found.target.startswith("tether.")
        and not (PACKAGE.parent / found.target.replace(".", "/")).is_dir()
        and not (PACKAGE.parent / (found.target.replace(".", "/") + ".py")).is_file()
    ]
    assert not missing, "\n".join(missing)
