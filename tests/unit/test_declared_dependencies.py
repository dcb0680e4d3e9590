"""Every package `tether` imports when a module loads is one a plain `pip install -e .`
brings: a declared dependency, or one of theirs (a framework's adapter, in
`tether.integrations.<framework>`, loads with that framework, an extra). The dev extras
install more (httpx came with them), so the suite alone would not see a plain install's
`tether demo` fail."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services" / "tether"


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _installed_by_plain_install() -> set[str]:
    """The declared dependencies and, recursively, what they require (extras aside)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [_name(r) for r in project["dependencies"]]
    found: set[str] = set()
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return found


def _loaded_imports(path: Path) -> set[str]:
    """Top-level names imported when the module loads (not inside a function, not under
    TYPE_CHECKING, not in a try that expects them missing)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_module_level_import_comes_with_a_plain_install() -> None:
    distributions = metadata.packages_distributions()
    plain = _installed_by_plain_install()
    missing = []
    for path in sorted(SERVICES.rglob("*.py")):
        if path.parent.parent.name == "integrations":
            continue  # a framework's adapter: imported with that framework, an extra
        for module in _loaded_imports(path):
            if module in sys.stdlib_module_names or module == "tether":
                continue
            owners = {_name(d) for d in distributions.get(module, [module])}
            if not owners & plain:
                missing.append(f"{path.relative_to(ROOT)}: {module} ({', '.join(owners)})")
    assert missing == [], "imported at load, not installed by 'pip install -e .':\n" + "\n".join(
        missing
    )
