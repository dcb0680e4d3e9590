"""Whether a tool's new schemas still fit what the build before it sent and returned (pure).

A rolling deploy runs steps of tasks started on the old build with the new code: an
input field the new code requires, or a type it changed, refuses inputs made for the
old one; an output field it removed or retyped breaks the steps that read it.
"""

from __future__ import annotations

from typing import Any

from tether.schemas.tool_schema import inline_root


def input_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """How inputs made for `before` may not fit `after`."""
    old, new = _object(before), _object(after)
    if old is None or new is None:
        return _retyped("input", before, after)
    changes = [
        f"input field {name!r} is required now" for name in sorted(_required(new) - _required(old))
    ]
    changes += _fields_retyped("input", old, new)
    return changes


def output_changes(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[str]:
    """How outputs of `after` may not be what readers of `before` expect."""
    if not before or not after:
        return []
    old, new = _object(before), _object(after)
    if old is None or new is None:
        return _retyped("output", before, after)
    changes = [
        f"output field {name!r} is gone"
        for name in sorted(set(old.get("properties", {})) - set(new.get("properties", {})))
    ]
    changes += _fields_retyped("output", old, new)
    return changes


def _object(schema: dict[str, Any]) -> dict[str, Any] | None:
    inlined = inline_root(schema)
    return inlined if inlined.get("type") == "object" else None


def _required(schema: dict[str, Any]) -> set[str]:
    return set(schema.get("required") or [])


def _fields_retyped(where: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    before, after = old.get("properties") or {}, new.get("properties") or {}
    changes = []
    for name in sorted(set(before) & set(after)):
        was, now = _kind(before[name]), _kind(after[name])
        if was is not None and now is not None and was != now:
            changes.append(f"{where} field {name!r} was {was}, is {now} now")
    return changes


def _retyped(where: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    was, now = _kind(inline_root(before)), _kind(inline_root(after))
    if was is not None and now is not None and was != now:
        return [f"{where} was {was}, is {now} now"]
    return []


def _kind(schema: Any) -> str | None:
    """A field's JSON type, or the type it refers to (None: not said)."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type") or schema.get("$ref")
    return str(kind) if kind is not None else None
