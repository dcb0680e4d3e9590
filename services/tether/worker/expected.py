"""Which failures are expected outcomes (pure): a task they fail is failed with its
reason, as any other, but no dead letter is kept (nothing went wrong that a person
should look at) and the worker logs one INFO line, without a traceback.

The set is named on the errors themselves: a `TerminalError` subclass with
`expected = True` (today `GuardrailTripped`). Anything else, terminal or retried, is a
fault: dead-lettered when it gives up, logged with its traceback.
"""

from __future__ import annotations

from tether.errors import TerminalError


def is_expected(exc: BaseException | None) -> bool:
    """Whether the exception that failed an attempt is an outcome the app expects."""
    return isinstance(exc, TerminalError) and type(exc).expected
