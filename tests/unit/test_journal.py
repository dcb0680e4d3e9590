"""The journal of a foreign agent's run (no server: over an in-memory memo store). A unit
whose call failed leaves no place behind: the framework's retry of the same call takes
that place, so a replay meets the stored result where the run asked for it. Tool calls
are keyed by their call id under the model call that asked for them: they run at once,
and a replay meets them in any order."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tether.integrations.journal import Journal, JournalDiverged
from tether.tools.context import StepContext


class Memos:
    """A step's memos, as `StepContext.memo` and `keep_memo` read and keep them."""

    def __init__(self) -> None:
        self.stored: dict[tuple[int | None, str], bytes] = {}

    async def memo(self, name: str, *, step: int | None = None) -> bytes | None:
        return self.stored.get((step, name))

    async def keep_memo(self, name: str, raw: bytes, *, step: int | None = None) -> bytes:
        return self.stored.setdefault((step, name), raw)


def _ctx(memos: Memos) -> StepContext:
    fields = {"task_id": "task", "step": 0, "branch": None}
    return cast(StepContext, SimpleNamespace(**fields, memo=memos.memo, keep_memo=memos.keep_memo))


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


class Calls:
    """Tool bodies that record each run and return their name's answer."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def body(self, name: str, hold: asyncio.Event | None = None) -> Any:
        async def run() -> str:
            self.ran.append(name)
            if hold is not None:
                await hold.wait()
            return f"{name} done"

        return run


async def _response(journal: Journal, calls: Calls, tag: str) -> Any:
    return await journal.unit("model", calls.body(f"model {tag}"), turn=True)


async def test_calls_asked_together_run_at_once_and_replay_in_any_order() -> None:
    memos, calls = Memos(), Calls()
    live = Journal(_ctx(memos))
    await _response(live, calls, "1")
    everyone = asyncio.Event()

    async def call(call_id: str) -> Any:
        if len(calls.ran) == 3:  # the model and the first two have started: all at once
            everyone.set()
        return await live.unit(f"tool.{call_id}", calls.body(call_id, everyone), call=call_id)

    done = await asyncio.wait_for(asyncio.gather(call("a"), call("b"), call("c")), timeout=5)
    assert done == ["a done", "b done", "c done"]
    await _response(live, calls, "2")

    replay, before = Journal(_ctx(memos)), list(calls.ran)
    await _response(replay, calls, "1")
    for call_id in "cab":  # another order than they ran
        assert await replay.unit(f"tool.{call_id}", calls.body(call_id), call=call_id) == (
            f"{call_id} done"
        )
    assert await _response(replay, calls, "2") == "model 2 done"  # its place, after the calls
    assert calls.ran == before  # nothing ran again
    assert (replay.replayed, replay.ran) == (5, 0)


async def test_only_the_unfinished_call_runs_again() -> None:
    memos, calls = Memos(), Calls()
    live = Journal(_ctx(memos))
    await _response(live, calls, "1")
    await live.unit("tool.a", calls.body("a"), call="a")

    async def killed() -> Any:
        calls.ran.append("b")
        raise asyncio.CancelledError  # the worker died while `b` ran

    with pytest.raises(asyncio.CancelledError):
        await live.unit("tool.b", killed, call="b")

    replay = Journal(_ctx(memos))
    await _response(replay, calls, "1")
    assert await replay.unit("tool.b", calls.body("b"), call="b") == "b done"
    assert await replay.unit("tool.a", calls.body("a"), call="a") == "a done"
    assert calls.ran == ["model 1", "a", "b", "b"]


async def test_an_id_a_later_response_gives_again_is_another_call() -> None:
    """Some servers number calls per response (`call_0` every time): the model call that
    asked keys them apart."""
    memos, calls = Memos(), Calls()
    live = Journal(_ctx(memos))
    for tag in ("1", "2"):
        await _response(live, calls, tag)
        assert await live.unit("tool.x", calls.body(f"x{tag}"), call="call_0") == f"x{tag} done"
    assert calls.ran == ["model 1", "x1", "model 2", "x2"]


async def test_another_tool_under_a_journaled_call_id_fails_as_diverged() -> None:
    memos, calls = Memos(), Calls()
    live = Journal(_ctx(memos))
    await _response(live, calls, "1")
    await live.unit("tool.refund", calls.body("refund"), call="call_9")

    replay = Journal(_ctx(memos))
    await _response(replay, calls, "1")
    with pytest.raises(JournalDiverged, match=r"tool\.charge.*call_9.*tool\.refund"):
        await replay.unit("tool.charge", calls.body("charge"), call="call_9")
    assert calls.ran == ["model 1", "refund"]
