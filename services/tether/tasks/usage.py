"""Model tokens summed (pure): a step's into its task's, branches' into their group's."""

from __future__ import annotations

from tether.schemas.records import Usage


def add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    if more is None:
        return total
    return more if total is None else total + more
