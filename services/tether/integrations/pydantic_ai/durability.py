"""`TetherDurability`: Pydantic AI's durability capability with Tether's journal as its
engine (I/O).

Built on the public builder (`pydantic_ai.durable_exec`): Pydantic AI turns each model
request, tool call, MCP call and event-handler call into an operation, and this backend
runs each as one `Journal.unit`: a tool call keyed by its call id, so the calls of one
response run at once (their events told in call order once all are done, so the units in
sequence come in the same order on a replay), everything else in encounter order. An MCP
toolset's call is sent again after a crash cut it off only when the tool's annotations
say that is safe (`Journal.send`); otherwise the model is told (`ToolFailed`) that its
outcome is unknown. A
model unit also keeps which step and attempt ran it, so a later attempt of the same step
that reads it back streams its text again and counts its usage unless that attempt's
failure was counted with it (the kit's `attempts.Recount`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    BoundDurableOperation,
    CacheIdentity,
    DurabilityEngineSpec,
    DurableOperation,
    DurableOperationBackend,
    DurableOperationId,
    DynamicToolsetCallToolParams,
    JournalCallableOperationBackend,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    ToolsetCallToolParams,
    record_durable_unit,
)
from pydantic_ai.models import Model
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.tool_manager import _parallel_execution_mode_ctx_var as _execution_mode

from tether.agents.mcp_rules import repeatable, unknown_outcome
from tether.integrations.pydantic_ai.events import relay, texts
from tether.integrations.pydantic_ai.metering import MeteredModel, usage_of
from tether.integrations.pydantic_ai.running import Running, current, running_now

if TYPE_CHECKING:
    from pydantic_ai.agent import EventStreamHandler
    from pydantic_ai.capabilities.abstract import WrapRunHandler
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import RunContext

P = TypeVar("P")
W = TypeVar("W")
R = TypeVar("R")


class ByCallId(CacheIdentity[ToolsetCallToolParams | DynamicToolsetCallToolParams]):
    """A tool call is identified by its call id (the model's, one per call of a response);
    its tool's name and whether it may be sent again ride along for an MCP call."""

    def project(
        self, params: ToolsetCallToolParams | DynamicToolsetCallToolParams
    ) -> tuple[object, ...]:
        tool = getattr(params, "tool", None)
        hints = None if tool is None else (tool.tool_def.metadata or {}).get("annotations")
        safe = isinstance(hints, dict) and repeatable(hints)
        return (params.ctx.tool_call_id, params.name, safe)


def unknown(tool: str) -> dict[str, str]:
    """The recorded result (`CallToolResult`) of a call whose outcome is unknown: a
    `ToolFailed`, so the model is told and the call is not tried again."""
    return {"kind": "tool_failed", "message": unknown_outcome(tool)}


class TetherBackend(JournalCallableOperationBackend[None]):
    """Each operation is one unit of the running step's journal."""

    def bind(self, operation: DurableOperation[P, W, R]) -> BoundDurableOperation[P, W, R]:
        if isinstance(operation.operation_id, ToolsetCallToolId):
            operation = dataclasses.replace(operation, cache_identity=cast(Any, ByCallId()))
        return super().bind(operation)

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        running = current()
        if isinstance(operation_id, ModelRequestId):
            return await _model_unit(running, name, body)
        call = cache_key[0] if isinstance(operation_id, ToolsetCallToolId) else None
        mcp = isinstance(operation_id, ToolsetCallToolId) and operation_id.toolset_kind == "mcp"
        ran: list[bool] = []

        async def run() -> object:
            ran.append(True)
            return await body()

        id_ = call if isinstance(call, str) else None  # the id `ByCallId` projected
        if id_ is not None and mcp:
            tool, safe = str(cache_key[1]), bool(cache_key[2])
            result = await running.journal.send(
                name, run, call=id_, repeatable=safe, unknown=lambda: unknown(tool)
            )
        else:
            result = await running.journal.unit(name, run, call=id_)
        record_durable_unit(executed=bool(ran))
        return result


async def _model_unit(running: Running, name: str, body: Callable[[], Awaitable[object]]) -> object:
    ctx = running.ctx
    ran: list[bool] = []

    async def call() -> dict[str, Any]:
        ran.append(True)
        return {"response": await body(), "step": ctx.step, "attempt": ctx.attempt}

    stored = await running.journal.unit(name, call, turn=True)
    record_durable_unit(executed=bool(ran))
    response = stored["response"]
    if not ran:  # an earlier attempt's, maybe one that died: said and counted once
        await running.journal.recount.unit(stored, usage_of(response), texts(response))
    return response


@dataclass(init=False)
class TetherDurability(BaseDurabilityCapability[Any]):
    """Runs a Pydantic AI agent's calls as durable units of a Tether step.

    `app.add(agent)` attaches it to each run by itself; attach it at construction
    (`Agent(..., capabilities=[TetherDurability()])`) to give it your own
    `event_stream_handler` (it gets every event, the model's tokens live; Tether also
    streams the tokens to the task and reports tool calls as progress). Outside a Tether
    step the agent runs as without it.
    """

    engine_spec: ClassVar[DurabilityEngineSpec] = DurabilityEngineSpec(
        engine_name="Tether",
        durable_unit_noun="unit",
        durable_container_noun="task",
        codec=JSON_CODEC,
        sequential_tools_in_durable_context=False,
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        tool_config_key="tether",
    )

    def __init__(
        self,
        *,
        event_stream_handler: EventStreamHandler[Any] | None = None,
        models: dict[str, Model] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(models=models, event_stream_handler=relay(event_stream_handler), name=name)
        self._operation_config: RoleBasedOperationConfig[None] = RoleBasedOperationConfig(
            model=None, event=None, capability=None, tool=None
        )

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Tool calls run at once, their events told in call order once all are done (as
        DBOS and Hatchet do), unless the user asked for them one at a time."""
        if not self.in_durable_context:
            return await super().wrap_run(ctx, handler=handler)
        one_at_a_time = _execution_mode.get() == "sequential"
        with ToolManager.parallel_execution_mode(
            "sequential" if one_at_a_time else "parallel_ordered_events"
        ):
            return await super().wrap_run(ctx, handler=handler)

    @property
    def in_durable_context(self) -> bool:
        return running_now() is not None

    def get_durable_operation_backend(self) -> DurableOperationBackend[None]:
        return TetherBackend(
            agent_name=self.name,
            default_model_id=self.default_model_id,
            config=self._operation_config,
        )

    def get_wrapper_model(self, model: Model) -> Model | None:
        """The model that sends a request, metered against the task's budget (inside a
        unit only: the run's own copy sends nothing)."""
        return MeteredModel(model) if self.in_durable_context else None
