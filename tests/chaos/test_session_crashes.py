"""A session's worker killed (SIGKILL), or its nats-server killed and restarted, while its
run's three tool calls run and five messages came in meanwhile: each message is heard
once, in order, by the run it was sent to (steered) or by the next (queued), as its
sender asked; none is lost or doubled."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.apps.agents import app as agents
from tests.chaos.crashes import restartable
from tests.conftest import stop_worker
from tests.sessions import (
    BATCH,
    QUEUED,
    STEERED,
    agents_worker,
    heard_once_in_order,
    in_its_tools,
    send_five,
)
from tether import Client, NatsConfig, Worker
from tether.testing.llm import ScriptedModel

pytestmark = pytest.mark.slow


async def test_five_messages_across_a_sigkill_are_heard_once_each_in_order(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    doomed = await agents_worker(config, client, tmp_path / "doomed.log")
    try:
        chat, first = await in_its_tools(client, model, BATCH, STEERED, QUEUED)
        sent = await send_five(chat)
        doomed.send_signal(signal.SIGKILL)
    finally:
        doomed.kill()
        doomed.wait(10)

    async with Worker(agents, config):  # the survivor takes the killed worker's steps on
        await heard_once_in_order(chat, first, sent, model)


async def test_five_messages_across_a_nats_server_restart_are_heard_once_each_in_order(
    tmp_path: Path, prefix: str, model: ScriptedModel
) -> None:
    worker = None
    async with restartable(tmp_path, prefix) as (server, config, client):
        try:
            worker = await agents_worker(config, client, tmp_path / "worker.log")
            chat, first = await in_its_tools(client, model, BATCH, STEERED, QUEUED)
            sent = await send_five(chat)
            for steered in sent[::2]:  # told the run before the server goes
                assert await chat.taken(steered, timeout=15) == f"{chat.id}-r1"
            server.kill()  # while the three tool calls run, m1 and m3 waiting
            await asyncio.sleep(1.0)  # away for a while, not only a blink
            server.start()

            await heard_once_in_order(chat, first, sent, model)
        finally:
            if worker is not None and worker.poll() is None:
                stop_worker(worker)
