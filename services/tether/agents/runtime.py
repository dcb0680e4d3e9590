"""What a worker process keeps for its agents: model clients, recent conversations, the
threads follow-ups continue, tool registrations, tree roots and MCP tool lists.

Checkpoints never change, so what was read stays true; what may change (a tool's
schema, an MCP server's list) is read again after `TOOL_INFO_AGE`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from tether.agents.budget import tree_root
from tether.agents.conversation import AgentStep, Entry, as_step, rebuild
from tether.agents.models import OpenAIModel
from tether.agents.owners import Owner, bound_owner, check_same_caller
from tether.errors import TerminalError
from tether.schemas.records import Checkpoint, TaskRecord, TaskStatus
from tether.schemas.workers import ToolInfo
from tether.tools.context import StepContext

if TYPE_CHECKING:
    import openai

    from tether.agents.mcp_tools import McpTool

HISTORY_CACHE = 256
"""Conversations a worker process keeps, so its next turn reads only new checkpoints."""
TOOL_INFO_AGE = 10.0
MAX_THREAD = 10_000
"""Follow-ups one conversation may chain (a guard against a cycle of reused task ids)."""


class Runtime:
    """What a worker process keeps for an agent: one client per model, and recent
    conversations (checkpoints never change, so what was read stays true)."""

    def __init__(self) -> None:
        self._clients: dict[tuple[OpenAIModel, str | None], openai.AsyncOpenAI] = {}
        self._in_use: dict[openai.AsyncOpenAI, int] = {}
        self._retired: set[openai.AsyncOpenAI] = set()
        self._histories: OrderedDict[tuple[str, datetime], list[Entry]] = OrderedDict()
        """By task id and creation time: a task removed by `gc` and a new one under its
        id never share a history."""
        self._tools: dict[str, tuple[ToolInfo, float]] = {}
        self._threads: OrderedDict[tuple[str, datetime], _Thread] = OrderedDict()
        """Finished conversations follow-ups continue, by task id and creation time."""
        self.no_json_schema: set[OpenAIModel] = set()
        """Models whose endpoint refused `response_format` `json_schema`."""
        self.takes_tools: dict[str, bool | None] = {}
        """By endpoint: whether its chat template takes tools (`unseen_tools`)."""
        self._mcp_tools: dict[str, tuple[list[McpTool], float]] = {}
        self._roots: OrderedDict[tuple[str, datetime], str] = OrderedDict()

    @contextlib.asynccontextmanager
    async def using(self, model: OpenAIModel) -> AsyncIterator[openai.AsyncOpenAI]:
        """The model's client for one call (closed after it if `aclose` came meanwhile)."""
        key = (model, os.environ.get("OPENAI_BASE_URL"))  # the default endpoint may move
        if key not in self._clients:
            self._clients[key] = model.client()
        client = self._clients[key]
        self._in_use[client] = self._in_use.get(client, 0) + 1
        try:
            yield client
        finally:
            self._in_use[client] -= 1
            if not self._in_use[client]:
                del self._in_use[client]
                if client in self._retired:
                    self._retired.discard(client)
                    await client.close()

    async def aclose(self) -> None:
        """Close every client; one in a call closes when the call ends (another worker of
        this process may still be using the agent)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            if client in self._in_use:
                self._retired.add(client)
            else:
                await client.close()

    async def history(self, ctx: StepContext) -> list[Entry]:
        """One entry per step before `ctx.step` (a step without a checkpoint is left out,
        and then nothing is kept)."""
        key = (ctx.task_id, ctx.created_at)
        known = self._histories.pop(key, [])[: ctx.step]
        read = await ctx.history(len(known))
        entries = [*known, *(_entry(c) for c in read if c is not None)]
        if len(entries) == ctx.step:
            self._histories[key] = entries
            while len(self._histories) > HISTORY_CACHE:
                self._histories.popitem(last=False)
        return entries

    async def thread(self, ctx: StepContext, task_id: str | None) -> list[dict[str, Any]]:
        """The messages of the finished conversation `task_id` and of those it continues,
        without their system messages ([] for None). Every task of the thread must be
        bound to the caller this task's tree is bound to (`owners`). A finished task does
        not change, so each is read once per process; only the newest record is read
        again (a task removed by `gc` and one made under its id never share a thread)."""
        if task_id is None:
            return []
        mine, named = await self.owner(ctx), task_id
        unread: list[tuple[tuple[str, datetime], AgentStep, list[Entry], Owner | None]] = []
        below = _Thread(messages=[], owners=frozenset())
        while task_id is not None:
            record = await ctx.other_task(task_id)
            if record is None:
                raise TerminalError(
                    f"the conversation a follow-up continues, task {task_id!r}, does not "
                    "exist (or was removed by 'tether gc'): start a new conversation"
                )
            theirs = bound_owner(record.task_id, record.metadata)
            check_same_caller(named, theirs, mine)  # before anything of it is read
            key = (task_id, record.created_at)
            if key in self._threads:
                self._threads.move_to_end(key)
                below = self._threads[key]
                break
            opening, entries = finished_conversation(record, await ctx.checkpoints_of(record))
            unread.append((key, opening, entries, theirs))
            task_id = opening.after
            if len(unread) > MAX_THREAD:
                raise TerminalError(f"a follow-up continues more than {MAX_THREAD} tasks")
        for owner in below.owners:  # a thread cached for another follow-up: its owners too
            check_same_caller(named, owner, mine)
        for key, opening, entries, owner in reversed(unread):
            rebuilt = rebuild("", opening, entries, below.messages, finished=True).messages
            below = _Thread(
                messages=[m for m in rebuilt if m.get("role") != "system"],
                owners=below.owners | {owner},
            )
            self._threads[key] = below
        while len(self._threads) > HISTORY_CACHE:
            self._threads.popitem(last=False)
        return below.messages

    async def owner(self, ctx: StepContext) -> Owner | None:
        """The caller this task's tree is bound to (its root's binding: a child task
        carries none of its own)."""
        root = await self.root(ctx)
        if root == ctx.task_id:
            return bound_owner(ctx.task_id, ctx.metadata)
        record = await ctx.other_task(root)
        return None if record is None else bound_owner(record.task_id, record.metadata)

    async def root(self, ctx: StepContext) -> str:
        """The root of the task's tree (a task's parent never changes: read once)."""
        if ctx.parent is None:
            return ctx.task_id
        key = (ctx.task_id, ctx.created_at)
        if key not in self._roots:
            self._roots[key] = await tree_root(ctx)
            while len(self._roots) > HISTORY_CACHE:
                self._roots.popitem(last=False)
        return self._roots[key]

    async def mcp_tools(self, servers: tuple[str, ...]) -> list[McpTool]:
        """The tools `servers` list, each listed again after `TOOL_INFO_AGE`."""
        if not servers:
            return []
        # Imported here, not at the top: the `mcp` client takes a second or more to import,
        # which an agent without MCP servers should not spend (in its event loop, too).
        from tether.agents.mcp_tools import list_tools

        tools: list[McpTool] = []
        for server in servers:
            cached = self._mcp_tools.get(server)
            if cached is None or time.monotonic() - cached[1] >= TOOL_INFO_AGE:
                cached = (await list_tools(server), time.monotonic())
                self._mcp_tools[server] = cached
            tools.extend(cached[0])
        return tools

    async def tool_info(self, ctx: StepContext, name: str) -> ToolInfo | None:
        """A tool's registration, read again after `TOOL_INFO_AGE` (a schema may change)."""
        cached = self._tools.get(name)
        if cached is not None and time.monotonic() - cached[1] < TOOL_INFO_AGE:
            return cached[0]
        info = await ctx.tool_info(name)
        if info is not None:
            self._tools[name] = (info, time.monotonic())
        return info


class _Thread(NamedTuple):
    """A finished conversation's messages, and the callers its tasks are bound to."""

    messages: list[dict[str, Any]]
    owners: frozenset[Owner | None]


def finished_conversation(
    record: TaskRecord, checkpoints: list[Checkpoint | None]
) -> tuple[AgentStep, list[Entry]]:
    """A completed agent task as a conversation: its opening and every step, the last
    (not checkpointed) with the task's result as its output."""
    if record.status is not TaskStatus.COMPLETED:
        raise TerminalError(
            f"task {record.task_id!r} is {record.status.value}: only a completed "
            "conversation can be continued (wait for its answer, then ask again)"
        )
    if any(c is None for c in checkpoints):
        raise TerminalError(f"task {record.task_id!r} is missing checkpoints of its steps")
    entries = [_entry(c) for c in checkpoints if c is not None]
    entries.append(Entry(record.steps[-1], record.result, None))
    opening = as_step(entries[0].spec.input)
    if entries[0].spec.parallel is not None or opening.continues or opening.input is None:
        raise TerminalError(f"task {record.task_id!r} is not an agent's conversation")
    return opening, entries


def _entry(checkpoint: Checkpoint) -> Entry:
    assert checkpoint.spec is not None
    return Entry(checkpoint.spec, checkpoint.output, checkpoint.usage)
