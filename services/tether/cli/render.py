"""How the operator commands look, in the one namespace they use (`render.print_table`,
`render.event_view`, …); each part lives in the module named for its job."""

from tether.cli.event_views import EventView, StreamedText, event_view
from tether.cli.output import (
    format_usage,
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

__all__ = [
    "EventView",
    "StreamedText",
    "dead_letter_table",
    "dead_letters_table",
    "event_view",
    "format_usage",
    "print_json",
    "print_lines",
    "print_pretty_json",
    "print_table",
    "queued_table",
    "record_table",
    "tasks_table",
    "warn",
]
