"""`tether.errors`' docstring draws every TetherError subclass of the package, each under
its base."""

from __future__ import annotations

import importlib
import pkgutil
import re

import tether
from tether import errors
from tether.errors import TetherError

_NODE = re.compile(r"^(?P<indent>[ │├└─]*?)[├└]── (?P<name>\w+)")


def _import_everything() -> list[str]:
    """Import every tether module (so every subclass is defined); the names of those that
    cannot be imported here (an optional extra missing) are returned."""
    failed = []
    for module in pkgutil.walk_packages(tether.__path__, "tether."):
        if module.name.endswith(".__main__"):
            continue  # runs a program when imported
        try:
            importlib.import_module(module.name)
        except Exception:
            failed.append(module.name)
    return failed


def _drawn() -> dict[str, str]:
    """Each class the docstring's tree lists, with the class drawn above it."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = [(-1, "TetherError")]
    for line in (errors.__doc__ or "").splitlines():
        found = _NODE.match(line.strip("\n").removeprefix("    "))
        if found is None:
            continue
        depth = len(found["indent"]) // 4
        while stack[-1][0] >= depth:
            stack.pop()
        parents[found["name"]] = stack[-1][1]
        stack.append((depth, found["name"]))
    return parents


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def test_the_docstring_lists_every_tether_error_under_its_base() -> None:
    failed = _import_everything()
    drawn = _drawn()
    classes = {cls for cls in _subclasses(TetherError) if cls.__module__.startswith("tether.")}
    missing = sorted(
        f"{cls.__module__}.{cls.__name__}"
        for cls in classes - {TetherError}
        if cls.__name__ not in drawn
    )
    assert missing == [], f"add these to the tree in tether/errors.py's docstring: {missing}"
    misplaced = [
        f"{cls.__name__} is drawn under {drawn[cls.__name__]}"
        for cls in classes
        if drawn[cls.__name__] not in {base.__name__ for base in cls.__mro__[1:]}
    ]
    assert misplaced == []
    if not failed:
        stale = sorted(set(drawn) - {cls.__name__ for cls in classes})
        assert stale == [], f"the tree lists classes that do not exist: {stale}"


def test_the_tree_is_read_whole() -> None:
    drawn = _drawn()
    assert drawn["NotProvisionedError"] == "NatsUnavailableError"
    assert drawn["StructuredOutputsRefused"] == "ModelRequestError"
    assert drawn["RateLimited"] == "RetryableError"
    assert drawn["StepError"] == "TetherError"
    assert len(drawn) >= 40
