"""How the operator commands look, in the one namespace they use (`render.print_table`,
`render.event_view`, …); each part lives in the module named for its job.

Names load on first use: rich and the wire schemas cost a `tether --help` nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.cli.event_views import EventView, StreamedText, event_view
    from tether.cli.output import (
        format_usage,
        is_terminal,
        print_answer,
        print_json,
        print_lines,
        print_pretty_json,
        print_table,
        warn,
    )
    from tether.cli.tables import (
        dead_letter_table,
        dead_letters_table,
        queued_table,
        record_table,
        tasks_table,
    )

_HOMES = {
    "tether.cli.event_views": ["EventView", "StreamedText", "event_view"],
    "tether.cli.output": [
        "format_usage",
        "is_terminal",
        "print_answer",
        "print_json",
        "print_lines",
        "print_pretty_json",
        "print_table",
        "warn",
    ],
    "tether.cli.tables": [
        "dead_letter_table",
        "dead_letters_table",
        "queued_table",
        "record_table",
        "tasks_table",
    ],
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "EventView",
    "StreamedText",
    "dead_letter_table",
    "dead_letters_table",
    "event_view",
    "format_usage",
    "is_terminal",
    "print_answer",
    "print_json",
    "print_lines",
    "print_pretty_json",
    "print_table",
    "queued_table",
    "record_table",
    "tasks_table",
    "warn",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'tether.cli.render' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
