"""A graph's model calls, bounded by the task tree's budget and counted on the task
(I/O), seen through LangChain's callbacks: a chat model's call reserves its worst case
before it is sent (a spent budget stops it there), then settles at the usage the model
reported (`usage_metadata`) or releases its hold when it failed.

A callback cannot change the request: the cap a reservation grants (`cap`) is sent as
the call's `max_tokens`, and a streamed call asks for its usage, by `graph_caps`. A
model that still reports no usage is counted at an estimate from the text, 3
characters a token, so a budget still ends.

Callbacks run in the thread LangChain gives them: an executor thread for async calls
(`run_inline` is off), the node's own thread for sync ones; either waits for the
worker's event loop, where the budget lives. A sync call made on the loop itself (a
blocking `invoke` inside an async node) cannot wait: its hold is skipped and its usage
counted when the loop is free.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage

from tether.integrations.meter import CHARS_PER_TOKEN, Meter
from tether.schemas.records import Usage

if TYPE_CHECKING:
    from langchain_core.outputs import LLMResult

    from tether.agents.budget import TreeBudget

T = TypeVar("T")


@dataclass
class CallMeter(Meter):
    """One call's side of the run's meter: its ledger hold has a key of its own, so
    calls that overlap (parallel nodes) settle their own holds."""

    key: str = ""

    def _key(self) -> str:
        return self.key


@dataclass
class _Call:
    meter: CallMeter
    sent_chars: int
    model: str
    cap: int | None = None
    """The most its answer may hold (None: no budget, or no hold taken)."""


class Spending(BaseCallbackHandler):
    """The model calls of one attempt of a graph's step (a LangChain callback handler,
    passed in the run's config so every node's models get it)."""

    run_inline = False
    raise_error = True  # a spent budget must stop the call, not be logged

    def __init__(self, meter: Meter, loop: asyncio.AbstractEventLoop) -> None:
        self._meter = meter
        self._loop = loop
        self._lock = threading.Lock()
        self._calls: dict[UUID, _Call] = {}
        self._per_task: dict[str, int] = {}
        self._late: list[asyncio.Task[Any]] = []
        self.counted: list[str] = []
        """Ids of the messages whose usage this attempt counted on the task."""

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        invocation_params: dict[str, Any] | None = None,
        **rest: Any,
    ) -> None:
        params, found = invocation_params or {}, metadata or {}
        model = str(params.get("model") or params.get("model_name") or found.get("ls_model_name"))
        asked = params.get("max_tokens") or params.get("max_completion_tokens")
        sent = sum(len(str(m.content)) for batch in messages for m in batch)
        meter = CallMeter(self._meter.ctx, self._tree, key=self._key(found))
        call = _Call(meter, sent, model)
        with self._lock:
            self._calls[run_id] = call
        reserved = meter.reserve(model, sent, asked if isinstance(asked, int) else None)
        call.cap = self._wait(reserved, before=True)

    def cap(self, run_id: UUID) -> int | None:
        """The `max_tokens` the call `run_id` may send (None: no budget applies)."""
        with self._lock:
            call = self._calls.get(run_id)
        return None if call is None else call.cap

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **rest: Any) -> None:
        with self._lock:
            call = self._calls.pop(run_id, None)
        if call is None:
            return
        usage, message_id = usage_of(response, call.model, call.sent_chars)
        if message_id is not None:
            with self._lock:
                self.counted.append(message_id)
        self._wait(call.meter.settle(usage))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **rest: Any) -> None:
        with self._lock:
            call = self._calls.pop(run_id, None)
        if call is not None:
            self._wait(call.meter.release())

    @property
    def _tree(self) -> TreeBudget | None:
        return self._meter.tree

    def _key(self, metadata: dict[str, Any]) -> str:
        """`<task>.<step>.<langgraph task id>.<n>`: the same for a call made again after a
        crash (a node's task id is derived from its checkpoint), so the new hold replaces
        the one the dead attempt left."""
        node_task = str(metadata.get("checkpoint_ns", "")).rpartition(":")[2] or "graph"
        with self._lock:
            n = self._per_task[node_task] = self._per_task.get(node_task, 0) + 1
        return f"{self._meter.ctx.idempotency_key}.{node_task}.{n}"

    def _wait(self, work: Coroutine[Any, Any, T], before: bool = False) -> T | None:
        """`work`'s result, run on the worker's loop. On that loop itself nothing can
        wait: a hold (`before` the call) is skipped, a count runs later (None)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self._loop:
            return asyncio.run_coroutine_threadsafe(work, self._loop).result()
        if before:
            work.close()
        else:
            self._late.append(self._loop.create_task(work))
        return None

    async def settled(self) -> None:
        """Wait for what could not be waited for at once (before the step reports)."""
        late, self._late = self._late, []
        for pending in late:
            await pending


def usage_of(response: LLMResult, model: str, sent_chars: int) -> tuple[Usage, str | None]:
    """One call's usage as the task counts it, and the id of the message it made."""
    generations = [g for batch in response.generations for g in batch]
    message = getattr(generations[0], "message", None) if generations else None
    reported = getattr(message, "usage_metadata", None) if message is not None else None
    named = getattr(message, "response_metadata", {}) or {}
    model = str(named.get("model_name") or model)
    message_id = getattr(message, "id", None)
    if reported:
        cached = (reported.get("input_token_details") or {}).get("cache_read") or 0
        usage = Usage(
            input_tokens=int(reported.get("input_tokens", 0)),
            output_tokens=int(reported.get("output_tokens", 0)),
            cached_tokens=int(cached),
            requests=1,
            model=model,
        )
        return usage, message_id
    written = sum(len(g.text) for g in generations)
    estimated = Usage(
        input_tokens=sent_chars // CHARS_PER_TOKEN + 1,
        output_tokens=written // CHARS_PER_TOKEN + 1,
        requests=1,
        model=model,
    )
    return estimated, message_id
