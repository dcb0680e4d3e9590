"""Names that are almost those of a registered tool (pure): a misspelled tool in an
agent's `tools=[...]` only shows as turns that wait, so it is named where it is seen."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence


def close_to(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` most likely misspells, if one is close enough."""
    found = difflib.get_close_matches(name, [k for k in known if k != name], n=1)
    return found[0] if found else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`did you mean 'x'?` for the known name closest to `name`; empty if none is."""
    close = close_to(name, known)
    return "" if close is None else f"did you mean {close!r}?"


def misspelled_calls(added: str, calls: Mapping[str, Sequence[str]]) -> list[tuple[str, str, str]]:
    """`(agent, listed, registered)` for each tool an agent lists that is not in `calls`
    (every tool of an app, by name, with the tools it calls) but is close to one that
    is, as adding the tool `added` shows it: its own calls, and others' near its name."""
    found = []
    for agent, listed in calls.items():
        for name in listed:
            if name in calls:
                continue
            close = close_to(name, calls)
            if close is not None and added in (agent, close):
                found.append((agent, name, close))
    return found
