"""A compiled LangGraph graph as a Tether tool (`app.add(graph)`), run durably in steps.

```python
graph = builder.compile(name="researcher")  # no checkpointer: Tether brings its own
app.add(graph)  # served as the tool "researcher": client.submit_agent("researcher", "...")
```

The task's id is the thread's id, and the thread is checkpointed after every super-step
by a `JetStreamSaver` on the worker's NATS connection (bucket `<prefix>-langgraph`, or
that of the `JetStreamSaver` the graph was compiled with). A
run is a step: after a crash any worker picks the thread up at its last checkpoint
(finished super-steps do not run again; a finished node's writes in an unfinished one
are kept). An `interrupt()` ends the step with two more: one that asks (the task is
`waiting`, holding no worker; the interrupt's value is the prompt) and one that resumes
the thread with `Command(resume=answer)`. The models' tokens reach the task's stream as
they are written, each node's start and end its progress, and each chat model call is
reserved against the task's budget, capped at what is left and counted on it
(`graph_meter`, `graph_caps`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphRecursionError, InvalidUpdateError
from langgraph.pregel import Pregel
from langgraph.types import Command, StateSnapshot, StreamMode
from pydantic_core import to_jsonable_python

from tether.agents.models import retry_after
from tether.errors import DefinitionError, RetryableError, TerminalError
from tether.integrations.adapters import RETRY, RunInput
from tether.integrations.langgraph import graph_caps, graph_input, graph_live
from tether.integrations.langgraph import graph_flow as flow
from tether.integrations.langgraph.graph_input import GraphInput, Resume, Waited
from tether.integrations.langgraph.graph_meter import Spending
from tether.integrations.langgraph.graph_saver import Savers, check_checkpointer
from tether.integrations.meter import Meter
from tether.schemas.plans import StepSpec
from tether.tools.results import NeedsInput, NextSteps
from tether.tools.tool import Tool

if TYPE_CHECKING:
    from tether.tools.context import StepContext

STARTED_MEMO = "graph-start"
"""Where a step's first attempt keeps the thread's checkpoint id as it found it."""
STREAM_MODES: list[StreamMode] = ["messages", "tasks"]
PASSING = frozenset({408, 409, 429})
"""HTTP statuses below 500 that pass: timeouts, conflicts, rate limits."""


@dataclass
class _Attempt:
    """One attempt of a graph's step: its step, its graph, its thread, its spending."""

    ctx: StepContext
    graph: Pregel[Any, Any, Any, Any]
    thread: str
    spending: Spending
    counted: list[str] = field(default_factory=list)

    @property
    def config(self) -> RunnableConfig:
        return {"configurable": {"thread_id": self.thread}}

    async def state(self, checkpoint: str | None = None) -> StateSnapshot:
        config = self.config
        if checkpoint is not None:
            config = {"configurable": {"thread_id": self.thread, "checkpoint_id": checkpoint}}
        return await self.graph.aget_state(config)

    async def invoke(self, given: Any) -> None:
        """Run the graph from `given` until it ends or waits, relaying what it says."""
        config: RunnableConfig = {**self.config, "callbacks": [self.spending]}
        parts: AsyncIterator[Any] = self.graph.astream(
            given, config, stream_mode=STREAM_MODES, subgraphs=True, durability="sync"
        )
        try:
            async for part in parts:
                await graph_live.relay(self.ctx, part)
        finally:
            await self.spending.settled()


@dataclass(frozen=True)
class GraphRun:
    """The tool function of a graph named `name`."""

    name: str
    savers: Savers
    has_messages: bool

    async def __call__(self, ctx: StepContext, data: Any) -> Any:
        step = graph_input.read(data)
        if step.ask is not None:
            return NeedsInput(prompt=step.ask.prompt, schema=step.ask.schema)
        graph = await self.savers.graph_for(ctx)
        budget = RunInput(token_budget=step.token_budget, cost_budget=step.cost_budget)
        meter = await Meter.open(ctx, budget)
        spending = Spending(meter, asyncio.get_running_loop())
        run = _Attempt(ctx, graph, await graph_input.thread_of(ctx, step), spending)
        try:
            return await self._run(run, step)
        except Exception as error:
            await graph_live.failed(ctx, [*run.counted, *spending.counted])
            mapped = step_error(self.name, error)
            if mapped is None:
                raise
            raise mapped from error

    async def _run(self, run: _Attempt, step: GraphInput) -> Any:
        found = where(await run.state())
        started = await run.ctx.once(STARTED_MEMO, lambda: found.checkpoint, type=str | None)
        if run.ctx.attempt > 1 and found.checkpoint != started:
            await self._replay(run, started)
        answering = None if step.resume is None else step.resume.interrupt
        move = flow.first_move(found, started, answering)
        if isinstance(move, flow.Start):
            await run.invoke(graph_input.graph_input(step, self.name, self.has_messages))
        elif isinstance(move, flow.Answer):
            answer = await run.ctx.output(run.ctx.step - 1)
            await run.invoke(Command(resume={move.id: answer}))
        elif isinstance(move, flow.GoOn):
            await run.invoke(None)
        if isinstance(move, flow.Start | flow.Answer | flow.GoOn):
            snapshot = await run.state()
            move = flow.going_on(where(snapshot))
        else:
            snapshot = None
        return await self._end(run, step, move, snapshot)

    async def _end(
        self, run: _Attempt, step: GraphInput, move: flow.Move, snapshot: StateSnapshot | None
    ) -> Any:
        if isinstance(move, flow.Ask):
            return self._ask(run.thread, step, move.wait)
        if isinstance(move, flow.GoOn):  # a run that returned with nodes pending
            raise TerminalError(
                f"graph {self.name!r} stopped with nodes pending and no interrupt() to "
                "answer: ask a person with interrupt() in a node, not with breakpoints"
            )
        values = (snapshot or await run.state()).values
        return graph_input.answer(values, self.has_messages)

    async def _replay(self, run: _Attempt, started: str | None) -> None:
        """Earlier attempts of this step moved the thread on and died or failed: what
        they said and spent (see `graph_live`)."""
        then = [] if started is None else (await run.state(started)).values
        now = (await run.state()).values
        if not (isinstance(now, dict) and isinstance(now.get("messages"), list)):
            return
        earlier = then.get("messages", []) if isinstance(then, dict) else []
        await graph_live.replay(run.ctx, graph_live.added(earlier, now["messages"]), run.counted)

    def _ask(self, thread_id: str, step: GraphInput, wait: flow.Wait) -> NextSteps:
        asking = Waited(prompt=wait.prompt, schema=wait.schema)
        resume = Resume(thread=thread_id, interrupt=wait.id)
        # The resume step keeps the run's budgets, not its input (already in the thread).
        again = GraphInput(
            token_budget=step.token_budget, cost_budget=step.cost_budget, resume=resume
        )
        steps = [
            StepSpec(tool=self.name, input={"ask": msgspec.to_builtins(asking)}),
            StepSpec(tool=self.name, input=msgspec.to_builtins(again)),
        ]
        return NextSteps(steps=steps, output={"waiting": wait.prompt})


def where(snapshot: StateSnapshot | None) -> flow.Thread:
    """A state snapshot as the flow reads it."""
    if snapshot is None:
        return flow.Thread(checkpoint=None)
    configurable = snapshot.config.get("configurable", {})
    waits = tuple(
        flow.Wait(id=found.id, prompt=prompt_of(found.value), schema=schema_of(found))
        for found in snapshot.interrupts
    )
    return flow.Thread(
        checkpoint=configurable.get("checkpoint_id"), next=tuple(snapshot.next), waits=waits
    )


def prompt_of(value: Any) -> str:
    """An interrupt's value as the question a person reads (JSON unless text)."""
    if isinstance(value, str):
        return value
    return json.dumps(to_jsonable_python(value, fallback=str))


def schema_of(found: Any) -> dict[str, Any]:
    schema = getattr(found, "response_schema", None)
    return schema if isinstance(schema, dict) else {}


def step_error(graph: str, error: Exception) -> Exception | None:
    """What a graph's error means for its step (None: as it is, under the step's retry
    policy): a graph that cannot run as written fails the task at once; a model that
    refuses the request fails it too, and a rate limit or a provider's outage passes."""
    import openai

    if isinstance(error, GraphRecursionError | InvalidUpdateError):
        return TerminalError(f"graph {graph!r}: {error}")
    if not isinstance(error, openai.APIStatusError):
        return None
    code, said = error.status_code, error.message
    quota = "insufficient_quota" in (error.code, error.type)
    if code >= 500 or (code in PASSING and not quota):
        wait = retry_after(error.response.headers)
        return RetryableError(f"graph {graph!r}: its model answered {code}: {said}", wait)
    return TerminalError(f"graph {graph!r}: its model refused the request ({code}): {said}")


def as_tool(graph: Any, *, name: str | None = None) -> Tool:
    """The tool that runs a compiled LangGraph graph durably, served as `name` (default:
    the graph's name, `compile(name=...)`).

    Args:
        graph: a compiled graph (`StateGraph(...).compile()`), left unchanged: compiled
            without a checkpointer (or with a `JetStreamSaver`), and without static
            breakpoints (`interrupt()` in a node is how it asks a person).
        name: the tool's name, if not the graph's.
    """
    if not isinstance(graph, Pregel):
        raise DefinitionError(
            f"App.add takes a compiled LangGraph graph (builder.compile()), not "
            f"{type(graph).__name__}"
        )
    tool_name = name or graph.name
    check_checkpointer(graph, tool_name)
    graph_caps.install()
    if graph.interrupt_before_nodes or graph.interrupt_after_nodes:
        raise DefinitionError(
            f"graph {tool_name!r} was compiled with interrupt_before/interrupt_after: call "
            "interrupt() in a node instead, which Tether answers as a task's input"
        )
    has_messages = "messages" in graph.channels
    return Tool(
        name=tool_name,
        function=GraphRun(tool_name, Savers(graph), has_messages),
        description=f"The LangGraph graph {tool_name!r}.",
        retry=RETRY,
        schema=graph_input.input_schema(),
        agent=True,
    )
