"""What `app.add` and `as_tool` take of a Pydantic AI agent: a subclass of `Agent` is a
Pydantic AI agent, and `usage_limits` reach each run (real Pydantic AI, scripted model)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.usage import UsageLimits

from tests.conftest import MakeWorker
from tether import App, Client, TaskFailedError
from tether.integrations.pydantic_ai import as_tool
from tether.testing.llm import ScriptedModel


class Counted(Agent[None, str]):
    """A user's own subclass, as people write them."""

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        return await super().run(*args, **kwargs)


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_a_subclass_is_added_and_its_usage_limits_stop_a_run(
    client: Client, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    app = App("pai-options")
    # (a model named by a string, built by the worker: none built here, in the test)
    app.add(Counted("openai-chat:scripted", name="counted", tools=[add], defer_model_check=True))
    strict = Agent("openai-chat:scripted", name="strict", tools=[add], defer_model_check=True)
    app.add(as_tool(strict, usage_limits=UsageLimits(request_limit=1)))
    await make_worker(app)
    call = {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}

    question = model.conversation(call, {"content": "It is 5."})
    assert await (await client.submit_agent("counted", question)).wait(timeout=30) == "It is 5."

    limited = model.conversation(call, {"content": "It is 5."})
    with pytest.raises(TaskFailedError, match="request_limit"):
        await (await client.submit_agent("strict", limited)).wait(timeout=30)
    assert len(model.requests(limited)) == 1  # the second request was never sent
