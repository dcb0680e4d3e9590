"""A unit whose call failed leaves no place behind in the journal: the framework's retry
of the same call takes that place, so a replay meets the stored result where the run
asked for it (no server: the journal over an in-memory memo store)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from tether.integrations.journal import Journal
from tether.schemas.names import Names
from tether.tools.context import StepContext


class Memos:
    def __init__(self) -> None:
        self.stored: dict[str, bytes] = {}

    async def get_memo(self, key: str) -> bytes | None:
        return self.stored.get(key)

    async def create_memo(self, key: str, raw: bytes) -> bytes:
        return self.stored.setdefault(key, raw)


def _ctx(memos: Memos) -> StepContext:
    store = SimpleNamespace(names=Names(prefix="t"), checkpoints=memos)
    return cast(StepContext, SimpleNamespace(task_id="task", step=0, branch=None, _store=store))


async def test_a_retried_call_takes_the_place_of_the_one_that_failed() -> None:
    memos = Memos()
    live = Journal(_ctx(memos))
    calls: list[str] = []

    async def fails() -> Any:
        calls.append("failed")
        raise ConnectionError("the model is away")

    async def answers() -> Any:
        calls.append("answered")
        return {"text": "hello"}

    with pytest.raises(ConnectionError):
        await live.unit("model", fails)
    assert await live.unit("model", answers) == {"text": "hello"}

    replay = Journal(_ctx(memos))
    assert await replay.unit("model", answers) == {"text": "hello"}
    assert calls == ["failed", "answered"]  # the replay sent nothing


async def test_another_call_after_a_failed_one_leaves_its_place_empty() -> None:
    """A fallback: model `a` fails, model `b` answers; a replay where `a` fails again
    reads `b`'s answer back rather than calling `b` again."""
    memos = Memos()
    calls: list[str] = []

    async def fails() -> Any:
        calls.append("a")
        raise ConnectionError("model a is away")

    async def answers() -> Any:
        calls.append("b")
        return "from b"

    for journal in (Journal(_ctx(memos)), Journal(_ctx(memos))):
        with pytest.raises(ConnectionError):
            await journal.unit("model.a", fails)
        assert await journal.unit("model.b", answers) == "from b"

    assert calls == ["a", "b", "a"]  # b was not called again
