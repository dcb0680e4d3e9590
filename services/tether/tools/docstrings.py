"""A Google-style docstring split into what a tool says it does and what each of its
arguments is (pure): the model reads both, as `@function_tool` and Pydantic AI offer."""

from __future__ import annotations

import re

_ARGS_HEADERS = ("Args:", "Arguments:", "Parameters:")
_ENTRY = re.compile(r"^\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:\s*(?P<text>.*)$")


def split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The docstring (already `inspect.cleandoc`ed) without its `Args:` section, and
    that section's descriptions by parameter name (continuation lines joined)."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() in _ARGS_HEADERS), None)
    if start is None:
        return doc.strip(), {}
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    described = _entries(lines[start + 1 : end])
    rest = "\n".join([*lines[:start], *lines[end:]])
    return re.sub(r"\n{3,}", "\n\n", rest).strip(), described


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _entries(lines: list[str]) -> dict[str, str]:
    """`name (type): text` entries; a line indented past its entry's continues it."""
    described: dict[str, list[str]] = {}
    current: str | None = None
    entry_indent = min((_indent(line) for line in lines if line.strip()), default=0)
    for line in lines:
        if not line.strip():
            continue
        match = _ENTRY.match(line.strip())
        if _indent(line) == entry_indent and match:
            current = match["name"]
            described[current] = [match["text"].strip()]
        elif current is not None:
            described[current].append(line.strip())
    return {name: " ".join(part for part in parts if part) for name, parts in described.items()}
