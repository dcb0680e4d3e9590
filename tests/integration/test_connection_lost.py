"""A connection the server closes ends the service or is reopened; never a process that
lives on without NATS."""

from __future__ import annotations

import asyncio

from tests.apps.tools import app
from tests.integration.test_bad_input import VALID, VALID_RESULT
from tether import Client, Dispatcher, NatsConfig, Worker
from tether.cli.processes import _until_stopped_or_lost
from tether.nats.limits import message_size
from tether.service import Service
from tether.testing import eventually


async def provoke_disconnect(service: Worker | Dispatcher) -> None:
    """Fault injection: bypass Tether's size check with a raw publish whose payload fits
    but whose payload plus headers does not; the server answers -ERR and disconnects."""
    nc = service._nc
    assert nc is not None
    headers = {"X-Pad": "p" * 200}
    payload = b"x" * (nc.max_payload - message_size(b"", headers) + 1)
    assert len(payload) <= nc.max_payload  # nats-py's own check lets it through
    await nc.publish("tether-test.oversized", payload, headers=headers)


async def lost_or_serving(service: Worker | Dispatcher, client: Client) -> str:
    """nats-py either reads the -ERR and closes for good (the service then reports it and
    stops), or sees the socket close first and reconnects (the service then serves on)."""
    if service.is_lost:
        reason = await service.wait_lost()
        assert "closed for good" in reason and "maximum payload" in reason.lower(), reason
        return "lost"
    nc = service._nc
    assert nc is not None and nc.stats["reconnects"] >= 1 and nc.is_connected, "still down"
    handle = await client.submit(VALID)
    assert await handle.wait(timeout=10) == VALID_RESULT
    return "reconnected"


async def test_a_worker_the_server_disconnects_stops_or_serves_on(
    config: NatsConfig, client: Client, dispatcher: Dispatcher
) -> None:
    async with Worker(app, config) as worker:
        await provoke_disconnect(worker)

        assert await eventually(lambda: lost_or_serving(worker, client), timeout=15)


async def test_a_dispatcher_the_server_disconnects_stops_or_serves_on(
    config: NatsConfig, client: Client
) -> None:
    async with Dispatcher(config) as dispatcher, Worker(app, config):
        await provoke_disconnect(dispatcher)

        assert await eventually(lambda: lost_or_serving(dispatcher, client), timeout=15)


class Loses(Service):
    """A service whose connection is lost for good once started."""

    async def start(self) -> None:
        asyncio.get_running_loop().call_later(0.05, self.connection_lost, "gone for good")

    async def stop(self) -> None:
        pass


async def test_the_process_runner_returns_why_a_service_was_lost() -> None:
    service = Loses()
    await service.start()
    reason = await asyncio.wait_for(_until_stopped_or_lost(asyncio.Event(), [service]), 5)
    assert reason == "gone for good"


async def test_a_stop_signal_is_not_a_lost_connection(config: NatsConfig) -> None:
    async with Dispatcher(config) as dispatcher:
        stopping = asyncio.Event()
        runner = asyncio.ensure_future(_until_stopped_or_lost(stopping, [dispatcher]))
        stopping.set()
        assert await asyncio.wait_for(runner, timeout=5) is None
    assert not dispatcher.is_lost  # closing on purpose is not a loss


class RunsOn(Service):
    """A service that runs on another (as the API and the gateway run on a Client)."""

    def __init__(self, part: Service) -> None:
        self.part = part

    def parts(self) -> list[Service]:
        return [self.part]

    async def start(self) -> None:
        await self.part.start()

    async def stop(self) -> None:
        pass


async def test_losing_a_part_loses_the_service_that_runs_on_it() -> None:
    service = RunsOn(Loses())
    await service.start()
    reason = await asyncio.wait_for(_until_stopped_or_lost(asyncio.Event(), [service]), 5)
    assert reason == "gone for good" and service.is_lost
