"""A foreign agent's run as durable units in encounter order (I/O).

A framework's run is plain code that calls a model, then tools, then the model again;
Tether runs it in one step. Each call it makes through its durability seam is a unit:
its result is stored create-only under `<task>.<step>.once.u<n>` (the step that began
the run, also after an approval resumed it in a later step), so an attempt after a
crash gets finished units back in the same order and runs only the one in flight. A
unit stored under another name means the run took another path than the journal's
(the code changed under a running task): that fails the task rather than feeding one
call's result to another.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from tether.errors import TerminalError
from tether.schemas.codec import encode

if TYPE_CHECKING:
    from tether.tools.context import StepContext

UNIT_PREFIX = "u"
"""Units are `u000001`, ...; waits for a person keep their answer in their unit too."""


class Unit(msgspec.Struct, frozen=True, kw_only=True):
    """One finished unit: what ran (`name`, a check on replay) and its JSON result."""

    name: str
    result: Any = None
    wait: bool = False
    """A person's answer (see `Journal.wait`), not a call's result."""


class JournalDiverged(TerminalError):
    """The run asked for another unit than the journal holds at that place."""


class WaitForInput(Exception):
    """The run needs a person's answer that is not journaled yet: the step ends, the task
    waits holding no worker, and a later step runs the agent again with the answer."""

    def __init__(self, unit: int, name: str, prompt: str, schema: dict[str, Any]) -> None:
        super().__init__(prompt)
        self.unit, self.name, self.prompt, self.schema = unit, name, prompt, schema


class Journal:
    """The units of one run of a foreign agent (`step`: the step that began it)."""

    def __init__(self, ctx: StepContext, step: int | None = None) -> None:
        self._ctx = ctx
        self.step = ctx.step if step is None else step
        self._next = 0
        self._failed: tuple[int, str] | None = None
        """The last unit, if its call raised: a retry of it (same name) takes its place."""
        self.replayed = 0
        """Units read back from the journal in this attempt (not run again)."""
        self.ran = 0
        """Units run in this attempt."""

    def _key(self, number: int) -> str:
        ctx = self._ctx
        name = f"{UNIT_PREFIX}{number:06d}"
        branch = ctx.branch if self.step == ctx.step else None
        return ctx._store.names.once_key(ctx.task_id, self.step, name, branch)

    async def _stored(self, number: int, name: str) -> Unit | None:
        raw = await self._ctx._store.checkpoints.get_memo(self._key(number))
        if raw is None:
            return None
        unit = msgspec.json.decode(raw, type=Unit)
        if unit.name != name:
            raise JournalDiverged(
                f"the agent's run asked for {name!r} as its unit {number}, but the task's "
                f"journal holds {unit.name!r} there: the code changed under a running "
                "task. Finish or cancel tasks before changing an agent's tools or flow, "
                "or start this one again"
            )
        return unit

    async def unit(self, name: str, body: Callable[[], Awaitable[Any] | Any]) -> Any:
        """`body()`'s result (JSON values), run at most once across attempts."""
        number = self._number(name)
        found = await self._stored(number, name)
        if found is not None:
            self.replayed += 1
            return found.result
        try:
            result = body()
            if inspect.isawaitable(result):
                result = await result
        except BaseException:
            self._failed = (number, name)
            raise
        raw = encode(Unit(name=name, result=result))
        won = await self._ctx._store.checkpoints.create_memo(self._key(number), raw)
        self.ran += 1
        return msgspec.json.decode(won, type=Unit).result

    def _number(self, name: str) -> int:
        """The next unit's place. A call that raised stored nothing: the framework's retry
        of it (the same name, next) takes its place, so a replay finds the result where
        it asks first; another unit leaves the place empty, as a replay that fails there
        again does."""
        failed, self._failed = self._failed, None
        if failed is not None and failed == (self._next, name):
            return self._next
        self._next += 1
        return self._next

    async def wait(self, name: str, prompt: str, schema: dict[str, Any]) -> Any:
        """A person's answer to `prompt`: journaled, or raises WaitForInput to ask."""
        number = self._number(name)
        found = await self._stored(number, name)
        if found is not None:
            self.replayed += 1
            return found.result
        raise WaitForInput(number, name, prompt, schema)

    async def answer(self, number: int, name: str, answer: Any) -> None:
        """Journal a person's `answer` as wait unit `number` (create-only: a second
        answer to the same wait changes nothing)."""
        raw = encode(Unit(name=name, result=answer, wait=True))
        await self._ctx._store.checkpoints.create_memo(self._key(number), raw)
