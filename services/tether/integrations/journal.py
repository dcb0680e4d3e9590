"""A foreign agent's run as durable units (I/O).

A framework's run is plain code that calls a model, then tools, then the model again;
Tether runs it in one step. Each call it makes through its durability seam is a unit:
its result is stored create-only under `<task>.<step>.once.<place>` (the step that began
the run, also after an approval resumed it in a later step), so an attempt after a
crash gets finished units back and runs only the ones in flight.

Units in sequence (model calls, waits, events) take places in encounter order, `u<n>`.
A tool call takes no place: it is keyed by its call id under the model call that asked
for it, `u<n>-<digest of the id>`, so the calls of one response run at once and a replay
meets them in any order. A unit that runs beside the sequence (a guardrail checks the
input while the model is called) takes no place either: it is keyed by its name and how
many times the run asked for it, `b<n>-<digest of the name>`. A unit stored under
another name means the run took another path than the journal's (the code changed under
a running task): that fails the task rather than feeding one call's result to another.

A call to another system that a crash may cut after it was sent (an MCP tool's) is
marked before it is sent (`_sent.<its key>`: the attempt sending it); an attempt that
finds an earlier one's mark and no result cannot know whether the call took effect, and
sends it again only when the tool says that is safe, as Tether's own agents' MCP calls
do (`agents.mcp_tools`); otherwise its result is what the caller says of an unknown
outcome.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from tether.errors import TerminalError
from tether.integrations.attempts import Recount
from tether.schemas.codec import encode

if TYPE_CHECKING:
    from tether.tools.context import StepContext

UNIT_PREFIX = "u"
"""Units are `u000001`, ...; waits for a person keep their answer in their unit too."""
CALL_MARK = "_call."
"""`_call.u000001`, ...: the mark of the model call a unit makes while it is in flight
(`Meter.reserve`); `_` starts no name a tool may give `ctx.once`."""
BESIDE_PREFIX = "b"
"""`b000001-<digest>`: the first time the run asked for a unit beside the sequence."""
SENT_MARK = "_sent."
"""`_sent.<unit key>`: the attempt that sends a call `Journal.send` makes."""


class Unit(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One finished unit: what ran (`name`, a check on replay) and its JSON result."""

    name: str
    result: Any = None
    wait: bool = False
    """A person's answer (see `Journal.wait`), not a call's result."""
    call: str | None = None
    """The tool call's id, for a unit keyed by it (see `Journal.unit`)."""


def place(number: int) -> str:
    """The key of unit `number` in sequence (in its step's `once` memos)."""
    return f"{UNIT_PREFIX}{number:06d}"


def call_place(turn: int, call: str) -> str:
    """The key of the tool call `call` that the unit in sequence `turn` asked for (a model
    gives ids unique in its response, not across responses; a digest, as an id may hold
    any text)."""
    return f"{place(turn)}-{hashlib.sha256(call.encode()).hexdigest()[:16]}"


def beside_place(name: str, count: int) -> str:
    """The key of the `count`th unit named `name` beside the sequence (a name may hold
    any text: a digest)."""
    return f"{BESIDE_PREFIX}{count:06d}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


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
        self._turn = 0
        """The place of the last model call: the tool calls its response asks for are keyed
        under it."""
        self._beside: dict[str, int] = {}
        """How many units of each name the run asked for beside the sequence."""
        self._failed: tuple[int, str] | None = None
        """The last unit in sequence, if its call raised: a retry of it (same name) takes
        its place."""
        self.replayed = 0
        """Units read back from the journal in this attempt (not run again)."""
        self.ran = 0
        """Units run in this attempt."""
        self.recount = Recount(ctx)
        """What earlier attempts of the step said and spent that no report carried."""

    def call_mark(self) -> str:
        """The mark of the model call the last model unit makes (see `Meter.reserve`)."""
        return CALL_MARK + place(self._turn)

    async def failed(self) -> None:
        """This attempt ends by an error: keep what the worker counts with it."""
        await self.recount.failed(str(self._ctx.attempt))

    async def _stored(self, key: str, name: str, where: str) -> Unit | None:
        raw = await self._ctx.memo(key, step=self.step)
        if raw is None:
            return None
        unit = msgspec.json.decode(raw, type=Unit)
        if unit.name != name:
            raise JournalDiverged(
                f"the agent's run asked for {name!r} as its {where}, but the task's journal "
                f"holds {unit.name!r} there: the code changed under a running task. Finish "
                "or cancel tasks before changing an agent's tools or flow, or start this one "
                "again"
            )
        return unit

    async def unit(
        self,
        name: str,
        body: Callable[[], Awaitable[Any] | Any],
        *,
        call: str | None = None,
        turn: bool = False,
    ) -> Any:
        """`body()`'s result (JSON values), run at most once across attempts.

        Args:
            call: the id of the tool call the unit runs: keyed by it under the last `turn`
                rather than by its place, so calls asked together run at once and replay
                in any order. None: the unit takes the next place in sequence.
            turn: a model call, whose response may ask for tool calls.
        """
        if call is not None:
            key = call_place(self._turn, call)
            found = await self._stored(key, name, f"tool call {call!r} (unit {key})")
            return await self._finish(found, key, Unit(name=name, call=call), body)
        number = self._number(name)
        if turn:
            self._turn = number
        found = await self._stored(place(number), name, f"unit {number}")
        try:
            return await self._finish(found, place(number), Unit(name=name), body)
        except BaseException:
            self._failed = (number, name)
            raise

    async def beside(self, name: str, body: Callable[[], Awaitable[Any] | Any]) -> Any:
        """`body()`'s result, run at most once across attempts, for a unit that may run
        while units in sequence do (a guardrail beside the model call): keyed by `name`
        and how many times the run asked for it, never by a place."""
        count = self._beside[name] = self._beside.get(name, 0) + 1
        key = beside_place(name, count)
        found = await self._stored(key, name, f"unit {key}")
        return await self._finish(found, key, Unit(name=name), body)

    async def send(
        self,
        name: str,
        body: Callable[[], Awaitable[Any] | Any],
        *,
        call: str,
        repeatable: bool,
        unknown: Callable[[], Any],
    ) -> Any:
        """As `unit(name, body, call=call)`, for a call to another system: an attempt
        that finds the call sent by an earlier one and not finished sends it again only
        when it is `repeatable`; otherwise its result is `unknown()` (what the model is
        told of a call whose outcome is unknown), journaled as the call's."""
        key = call_place(self._turn, call)
        found = await self._stored(key, name, f"tool call {call!r} (unit {key})")

        async def once() -> Any:
            if not repeatable and not await self._sending(key):
                return unknown()
            result = body()
            return await result if inspect.isawaitable(result) else result

        return await self._finish(found, key, Unit(name=name, call=call), once)

    async def _sending(self, key: str) -> bool:
        """Mark this attempt as the one that sends the call `key`: False when an earlier
        attempt marked it (it may have reached the other side)."""
        mine = encode(self._ctx.attempt)
        won = await self._ctx.keep_memo(SENT_MARK + key, mine, step=self.step)
        return bool(msgspec.json.decode(won) == self._ctx.attempt)

    async def _finish(
        self, found: Unit | None, key: str, unit: Unit, body: Callable[[], Awaitable[Any] | Any]
    ) -> Any:
        """The stored result, or `body()`'s stored create-only under `key` (a unit that two
        attempts ran at once keeps the first result stored)."""
        if found is not None:
            self.replayed += 1
            return found.result
        result = body()
        if inspect.isawaitable(result):
            result = await result
        raw = encode(msgspec.structs.replace(unit, result=result))
        won = await self._ctx.keep_memo(key, raw, step=self.step)
        self.ran += 1
        return msgspec.json.decode(won, type=Unit).result

    def _number(self, name: str) -> int:
        """The next place in sequence. A call that raised stored nothing: the framework's
        retry of it (the same name, next) takes its place, so a replay finds the result
        where it asks first; another unit leaves the place empty, as a replay that fails
        there again does."""
        failed, self._failed = self._failed, None
        if failed is not None and failed == (self._next, name):
            return self._next
        self._next += 1
        return self._next

    async def wait(self, name: str, prompt: str, schema: dict[str, Any]) -> Any:
        """A person's answer to `prompt`: journaled, or raises WaitForInput to ask."""
        number = self._number(name)
        found = await self._stored(place(number), name, f"unit {number}")
        if found is not None:
            self.replayed += 1
            return found.result
        raise WaitForInput(number, name, prompt, schema)

    async def answer(self, number: int, name: str, answer: Any) -> None:
        """Journal a person's `answer` as wait unit `number` (create-only: a second
        answer to the same wait changes nothing)."""
        raw = encode(Unit(name=name, result=answer, wait=True))
        await self._ctx.keep_memo(place(number), raw, step=self.step)
