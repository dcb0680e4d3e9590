"""A connection the server closes for good ends the service instead of leaving it idle."""

from __future__ import annotations

import asyncio

from tests.apps.tools import app
from tether import Dispatcher, NatsConfig, Worker
from tether.cli.processes import _until_stopped_or_lost
from tether.nats.limits import message_size


async def provoke_disconnect(service: Worker | Dispatcher) -> None:
    """Fault injection: bypass Tether's size check with a raw publish whose payload fits
    but whose payload plus headers does not; the server answers -ERR and disconnects."""
    nc = service._nc
    assert nc is not None
    headers = {"X-Pad": "p" * 200}
    payload = b"x" * (nc.max_payload - message_size(b"", headers) + 1)
    assert len(payload) <= nc.max_payload  # nats-py's own check lets it through
    await nc.publish("tether-test.oversized", payload, headers=headers)


async def test_a_worker_the_server_disconnects_reports_it_and_stops_fetching(
    config: NatsConfig,
) -> None:
    async with Worker(app, config) as worker:
        await provoke_disconnect(worker)

        reason = await asyncio.wait_for(worker.wait_lost(), timeout=10)

        assert "closed for good" in reason and "maximum payload" in reason.lower(), reason
        assert worker.is_lost


async def test_the_process_runner_returns_the_reason_so_the_process_exits_non_zero(
    config: NatsConfig,
) -> None:
    async with Dispatcher(config) as dispatcher:
        stopping = asyncio.Event()
        runner = asyncio.ensure_future(_until_stopped_or_lost(stopping, [dispatcher]))
        await provoke_disconnect(dispatcher)

        reason = await asyncio.wait_for(runner, timeout=10)

        assert reason is not None and "closed for good" in reason


async def test_a_stop_signal_is_not_a_lost_connection(config: NatsConfig) -> None:
    async with Dispatcher(config) as dispatcher:
        stopping = asyncio.Event()
        runner = asyncio.ensure_future(_until_stopped_or_lost(stopping, [dispatcher]))
        stopping.set()
        assert await asyncio.wait_for(runner, timeout=5) is None
    assert not dispatcher.is_lost  # closing on purpose is not a loss
