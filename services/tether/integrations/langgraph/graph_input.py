"""A graph's step input, the thread it runs on, and its answer.

A graph takes what Tether's agents take (`client.submit_agent`, `tether submit --agent`,
the API and the MCP gateway send it), so every door works unchanged: a question (the
user message of a graph whose state has `messages`), chat messages, or, for any graph,
its input state as a JSON object. The task's id is its thread's id; a follow-up
(`"after": <task>`, as `client.continue_agent` sends) runs on the thread of the task it
continues, so the graph sees that conversation's state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
from langchain_core.messages import BaseMessage
from pydantic_core import to_jsonable_python

from tether.agents.agent import agent_input_schema
from tether.agents.budget import tree_root
from tether.agents.owners import Owner, bound_owner, check_same_caller
from tether.errors import TerminalError
from tether.schemas.records import TaskRecord, TaskStatus

if TYPE_CHECKING:
    from tether.tools.context import StepContext

THREAD_MEMO = "graph-thread"
"""A follow-up's step 0 keeps here the thread it runs on (its first task's id)."""


class Waited(msgspec.Struct, frozen=True, kw_only=True):
    """The step that asks a person: what the interrupt said."""

    prompt: str
    schema: dict[str, Any] = msgspec.field(default_factory=dict)


class Resume(msgspec.Struct, frozen=True, kw_only=True):
    """The step after an answer: the thread, and the interrupt the answer is for (the
    answer is the output of the step before)."""

    thread: str
    interrupt: str


class GraphInput(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A graph's step input: a run's (as Tether's agents take it), or the roles of the
    two steps an `interrupt()` adds."""

    input: str | list[dict[str, Any]] | dict[str, Any] | None = None
    after: str | None = None
    instructions: str | None = None
    settings: dict[str, Any] | None = None
    token_budget: int | None = None
    cost_budget: float | None = None
    ask: Waited | None = None
    resume: Resume | None = None


def input_schema() -> dict[str, Any]:
    """The schema of a run's input: an agent's, whose `input` may also be chat messages
    or the graph's input state."""
    schema = agent_input_schema(None, None)
    described = "The question, chat messages, or the graph's input state (an object)."
    text = {"type": "string", "description": described}
    choices = [text, {"type": "array", "items": {"type": "object"}}, {"type": "object"}]
    return {**schema, "properties": {**schema["properties"], "input": {"anyOf": choices}}}


def read(data: Any) -> GraphInput:
    if isinstance(data, str):
        return GraphInput(input=data)
    try:
        return msgspec.convert(data or {}, GraphInput)
    except msgspec.ValidationError as exc:
        raise TerminalError(f"not a graph run's input: {exc}") from exc


def graph_input(step: GraphInput, graph: str, has_messages: bool) -> dict[str, Any]:
    """What the graph is invoked with: its input state."""
    if step.settings:
        raise TerminalError(
            f"graph {graph!r} takes no model settings from its input: set them on the "
            "graph's models (a LangGraph graph may call several)"
        )
    if isinstance(step.input, dict):
        if step.instructions is not None:
            raise TerminalError(f"graph {graph!r} takes instructions only with a question")
        return step.input
    if not has_messages:
        raise TerminalError(
            f"graph {graph!r} has no 'messages' in its state: give its input state as a "
            'JSON object ({"input": {...}})'
        )
    given = step.input or ""
    messages = [{"role": "user", "content": given}] if isinstance(given, str) else given
    if step.instructions is not None:
        messages = [{"role": "system", "content": step.instructions}, *messages]
    return {"messages": messages}


def answer(values: Any, has_messages: bool) -> Any:
    """The step's output from the graph's final state: its last message's text (a graph
    with `messages`), else the state as JSON."""
    messages = values.get("messages") if has_messages and isinstance(values, dict) else None
    if messages and isinstance(messages[-1], BaseMessage):
        return str(messages[-1].text)
    return to_jsonable_python(values, fallback=str)


async def thread_of(ctx: StepContext, step: GraphInput) -> str:
    """The thread the step runs on: the task's, the one a follow-up continues, or the
    one an answer resumes."""
    if step.resume is not None:
        if step.resume.thread != ctx.task_id:
            await _check_resumed(ctx, step.resume.thread)
        return step.resume.thread
    if step.after is None:
        return ctx.task_id
    after = step.after
    thread: str = await ctx.once(THREAD_MEMO, lambda: _followed(ctx, after), type=str)
    return thread


async def _check_resumed(ctx: StepContext, thread: str) -> None:
    """An answer names its thread in the step's input, which a caller may write: resume
    another task's thread only for that thread's own caller (as a follow-up continues
    one), or where this task's follow-up is what runs on it."""
    if await _memo(ctx, ctx.task_id) != thread:
        missing = (
            f"the thread an answer resumes, {thread!r}, is not this task's and no task "
            "began it: answer the task that is waiting"
        )
        await _callers_own(ctx, thread, missing)


async def _memo(ctx: StepContext, task_id: str) -> str | None:
    """The thread a follow-up task (its first step) continues, if it is one."""
    raw = await ctx.memo(THREAD_MEMO, step=0, task_id=task_id)  # its follow-up chain's
    return None if raw is None else msgspec.json.decode(raw, type=str)


async def _callers_own(ctx: StepContext, task_id: str, missing: str) -> TaskRecord:
    """Task `task_id`'s record, if it is this task tree's caller's (TerminalError saying
    `missing` when there is no such task, ForeignConversation when another's)."""
    record = await ctx.other_task(task_id)
    if record is None:
        raise TerminalError(missing)
    check_same_caller(task_id, bound_owner(task_id, record.metadata), await _owner(ctx))
    return record


async def _followed(ctx: StepContext, after: str) -> str:
    missing = (
        f"the task a follow-up continues, {after!r}, does not exist (or was removed by "
        "'tether gc'): start a new thread"
    )
    record = await _callers_own(ctx, after, missing)
    if record.status is not TaskStatus.COMPLETED:
        raise TerminalError(
            f"task {after!r} is {record.status.value}: a follow-up continues a completed task"
        )
    if not record.steps or record.steps[-1].tool != ctx.tool:
        raise TerminalError(f"task {after!r} was not a run of the graph {ctx.tool!r}")
    return await _memo(ctx, after) or after


async def _owner(ctx: StepContext) -> Owner | None:
    """The caller this task's tree is bound to (its root's binding), as Tether's agents
    check a follow-up's: a thread is continued only by its own caller."""
    if ctx.parent is None:
        return bound_owner(ctx.task_id, ctx.metadata)
    root = await ctx.other_task(await tree_root(ctx))
    return None if root is None else bound_owner(root.task_id, root.metadata)
