"""Sessions under deploy/nats/roles.conf: the client role sends to a session, edits its
messages and follows it, the dispatcher and worker roles run it, and nothing on those
paths is refused; a client that tries to write a session's state or a run's boundary
itself is refused by the server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import nats.errors
import pytest

from tests.apps.agents import app as agents
from tests.integration.test_roles import (
    REFUSED_WITHIN,
    ROLES,
    RolesServer,
    Violation,
    _provision_as_operator,
    raw,
    roles_server,
)
from tests.sessions import SLOW, while_the_tools_run
from tether import Client, Dispatcher, Worker
from tether.schemas.names import DEFAULT_NAMES
from tether.testing.llm import ScriptedModel


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolesServer]:
    with roles_server(tmp_path_factory.mktemp("roles")) as started:
        yield started


@pytest.fixture(scope="module")
async def running(server: RolesServer, model: ScriptedModel) -> AsyncIterator[RolesServer]:
    """Provisioned by the operator; a dispatcher and an agents' worker, each as its role."""
    await _provision_as_operator(server)
    async with Dispatcher(server.config("dispatcher")), Worker(agents, server.config("worker")):
        yield server


async def test_the_client_role_chats_in_a_session_that_the_dispatcher_and_worker_roles_run(
    running: RolesServer, model: ScriptedModel
) -> None:
    since = running.mark()
    first = f"roles {uuid.uuid4().hex[:8]}"
    turns = [SLOW, {"content": "One."}, {"content": "Two."}]
    model.load({"conversations": [{"match": first, "turns": turns}]})
    async with Client(running.config("client"), provision=False) as client:
        chat = client.session(f"chat-{uuid.uuid4().hex[:8]}", agent="researcher")
        await chat.send(first)
        await while_the_tools_run(client.handle(f"{chat.id}-r1"))
        queued = await chat.send("Draft.", queue=True)
        await chat.edit(queued, "Next.")
        assert await chat.answer(queued, timeout=30) == "Two."
        ends = []
        async for update in chat.follow():
            if update.kind == "run_ended":
                ends.append(update.record.result if update.record else None)
            if len(ends) == 2:
                break
        await chat.close()
    assert ends == ["One.", "Two."]
    assert running.violations(since) == []


@pytest.mark.parametrize(
    "subject",
    [
        DEFAULT_NAMES.kv_subject(DEFAULT_NAMES.sessions_bucket, "victim"),  # its state
        DEFAULT_NAMES.session_out_subject("victim", 1),  # a run's boundary
    ],
)
async def test_a_client_may_not_write_a_sessions_state_or_its_runs(
    running: RolesServer, subject: str
) -> None:
    async with raw(running, "client") as client:
        with pytest.raises(nats.errors.TimeoutError):  # no PubAck: the server dropped it
            await client.nc.jetstream().publish(subject, b"{}", timeout=REFUSED_WITHIN)
        await client.refused(f'publish to "{subject}"')
    assert Violation("client", "Publish", subject) in running.violations()


async def test_no_role_but_the_client_was_refused_anything(running: RolesServer) -> None:
    assert running.violations(users=ROLES - {"client"}) == []
