"""An action asked of the API (the dashboard's, the gateway's) raises what it raises in
process: each error reply turns back into the exception it was made from."""

from __future__ import annotations

import pytest

from tether.errors import (
    InvalidTaskError,
    NatsUnavailableError,
    TaskConflictError,
    TaskExistsError,
    TaskNotFoundError,
    TaskTimeoutError,
    TetherError,
)
from tether.schemas.api import error_reply, raised


@pytest.mark.parametrize(
    "exc",
    [
        TaskNotFoundError("t1"),
        TaskConflictError("t1", "task 't1' already ended (completed)"),
        TaskExistsError("t1"),
        TaskTimeoutError("t1", "no answer within 5s"),
        InvalidTaskError("the answer is not JSON"),
        NatsUnavailableError("NATS is away"),
    ],
)
def test_an_error_reply_raises_the_exception_it_was_made_from(exc: TetherError) -> None:
    back = raised(error_reply(exc), "t1")
    assert type(back) is type(exc) and str(back) == str(exc)


def test_an_unexpected_error_is_a_tether_error_with_its_message() -> None:
    back = raised(error_reply(KeyError("boom")), "t1")
    assert type(back) is TetherError and "KeyError" in str(back)
