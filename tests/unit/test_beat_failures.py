"""How loud a failed beat is (issue 50, item 9): a NATS call that timed out under load
("could not hold tether.work.X: nats: timeout") is a DEBUG line, the next beat tries
again; NATS gone, or anything else, stays a WARNING."""

from __future__ import annotations

import logging

import nats.errors
import pytest

from tether.errors import NatsUnavailableError
from tether.worker.heartbeats import level


def _translated(cause: BaseException) -> NatsUnavailableError:
    try:
        raise NatsUnavailableError("NATS did not answer") from cause
    except NatsUnavailableError as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (nats.errors.TimeoutError(), logging.DEBUG),
        (_translated(nats.errors.TimeoutError()), logging.DEBUG),
        (_translated(nats.errors.ConnectionClosedError()), logging.WARNING),
        (nats.errors.NoRespondersError(), logging.WARNING),
        (RuntimeError("a bug"), logging.WARNING),
    ],
)
def test_a_timed_out_beat_is_a_debug_line_anything_else_a_warning(
    error: BaseException, expected: int
) -> None:
    assert level(error) == expected
