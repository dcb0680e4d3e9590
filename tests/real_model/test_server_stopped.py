"""llama-server killed in the middle of an answer, then started again on the same port:
the agent's turn is retried and the task finishes with an answer."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncGenerator
from typing import cast

from tests.real_model.agents import PARAGRAPH, RealAgents
from tether import Client, TokenChunk, Worker
from tether.local_model import LlamaServer
from tether.schemas import StepRetrying


async def test_a_server_killed_mid_answer_is_called_again_once_it_is_back(
    client: Client, dispatcher: object, worker: Worker, agents: RealAgents, llama: LlamaServer
) -> None:
    handle = await client.submit_agent(
        agents.patient,
        PARAGRAPH,
        model_settings={"max_tokens": 300},
    )
    chunks = cast(AsyncGenerator[TokenChunk], handle.stream())  # closed, not abandoned
    async with contextlib.aclosing(chunks) as stream:
        async for chunk in stream:
            if chunk.delta:  # the answer is on its way
                break

    llama.stop(signal.SIGKILL)
    await asyncio.to_thread(llama.start)  # the in-process worker keeps beating meanwhile

    answer = await handle.wait(timeout=90)
    assert isinstance(answer, str) and answer.strip()
    events = [e async for e in handle.events(timeout=5)]
    assert any(isinstance(e, StepRetrying) and e.step == 0 for e in events), events
    streamed = [c async for c in handle.stream()]
    assert max(c.attempt for c in streamed) >= 2  # the text streamed again, by a later attempt
