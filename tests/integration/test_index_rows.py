"""The status index keeps up with the records: no role that may write a row can erase
the index with a rollup (on a real nats-server started from deploy/nats/roles.conf), and
a row move whose publish is lost on the way (the connection cut as it goes) still ends
with the task's right row, so `tether ls` and the counts agree with the records."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import pytest
from msgspec.structs import replace
from nats.js.errors import APIError

from tests.integration.test_roles import (
    ROLES_CONF,
    RolesServer,
    _provision_as_operator,
    raw,
    roles_server,
)
from tether import Client, NatsConfig, TaskRecord, TaskStatus
from tether.dispatcher.dispatcher import Dispatcher
from tether.errors import NatsUnavailableError
from tether.nats.connection import close, connect
from tether.nats.layout import Layout, stream_configs
from tether.nats.store import Store
from tether.schemas.names import DEFAULT_NAMES as NAMES
from tether.tasks import listing
from tether.testing import eventually, wait_until

ROLLUPS = [{"Nats-Rollup": "all"}, {"Nats-Rollup": "sub"}]


def row_writers() -> list[str]:
    """The roles of roles.conf that may publish index rows (`tether.index.>`)."""
    users = re.split(r"\n\s*\{\s*\n\s*user: ", ROLES_CONF.read_text())[1:]
    return [user.split()[0] for user in users if f'"{NAMES.index_subjects}"' in user]


def test_the_index_stream_refuses_rollups() -> None:
    (index,) = [c for c in stream_configs(Layout()) if c.name == NAMES.index_stream]
    assert index.allow_rollup_hdrs is False


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolesServer]:
    with roles_server(tmp_path_factory.mktemp("index")) as started:
        yield started


def test_the_row_writers_are_the_worker_and_the_dispatcher() -> None:
    assert sorted(row_writers()) == ["dispatcher", "worker"]


@pytest.mark.parametrize("role", row_writers())
@pytest.mark.parametrize("rollup", ROLLUPS, ids=["all", "sub"])
async def test_a_rollup_on_a_row_from_a_role_that_writes_rows_is_refused_and_erases_nothing(
    server: RolesServer, role: str, rollup: dict[str, str]
) -> None:
    await _provision_as_operator(server)
    kept = NAMES.index_subject("running", 1, f"kept-{role}-{rollup['Nats-Rollup']}")
    async with raw(server, "operator") as operator:
        await operator.nc.jetstream().publish(kept, b"")
        before = (await operator.nc.jetstream().stream_info(NAMES.index_stream)).state.messages
    async with raw(server, role) as writer:
        mine = NAMES.index_subject("completed", 2, f"mine-{role}")
        with pytest.raises(APIError, match="rollup"):
            await writer.nc.jetstream().publish(mine, b"", headers=rollup)
    async with raw(server, "operator") as operator:
        js = operator.nc.jetstream()
        assert (await js.get_last_msg(NAMES.index_stream, kept)).subject == kept
        assert (await js.stream_info(NAMES.index_stream)).state.messages == before


# -- a row move whose publish is lost -----------------------------------------------------
@dataclass
class Cut:
    """A TCP relay in front of nats-server that drops the client's connection once, at
    the first write of the client that holds `mark`: that write never reaches the server
    (as when a node dies, or the line breaks, while a publish is on its way)."""

    upstream: tuple[str, int]
    mark: bytes = b""
    cuts: int = 0
    port: int = 0
    _links: set[asyncio.StreamWriter] = field(default_factory=set)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, watch: bool
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if watch and self.mark and self.mark in data:
                    self.mark, self.cuts = b"", self.cuts + 1
                    break  # the write is lost with the connection
                writer.write(data)
                await writer.drain()
        for link in list(self._links):
            link.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._links |= {writer, up_writer}
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, watch=True), self._pipe(up_reader, writer, False)
            )
        finally:
            self._links -= {writer, up_writer}

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        relay = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = relay.sockets[0].getsockname()[1]
        try:
            yield f"nats://127.0.0.1:{self.port}"
        finally:
            relay.close()
            for link in list(self._links):
                link.close()


async def _agrees_with_the_records(client: Client, task_id: str, status: TaskStatus) -> None:
    """`tether ls --status` and the counts say what the record says."""
    assert (await client.get(task_id)).status is status
    listed, _ = await client.list_page(status)
    assert [r.task_id for r in listed] == [task_id]
    counts = await client.status_counts()
    assert counts[status.value] == 1 and sum(counts.values()) == 1, counts


async def test_a_row_move_whose_publish_is_lost_still_ends_with_the_right_row(
    config: NatsConfig,
) -> None:
    host, port = config.url.removeprefix("nats://").rsplit(":", 1)
    cut = Cut((host, int(port)))
    async with cut.running() as url, Client(NatsConfig(url=url, names=config.names)) as client:
        handle = await client.submit([{"tool": "nobody-serves-this"}], task_id="moved")
        await eventually(lambda: _agrees_with_the_records(client, "moved", TaskStatus.PENDING))
        cut.mark = f"{config.names.prefix}.index.{TaskStatus.CANCELLED.value}.".encode()
        with contextlib.suppress(NatsUnavailableError):  # what followed in the write was lost too
            await client.cancel(handle.task_id)
        assert cut.cuts == 1  # the cancelled row's first publish was lost on the way
        await eventually(lambda: _agrees_with_the_records(client, "moved", TaskStatus.CANCELLED))


@contextlib.asynccontextmanager
async def store_through(url: str, client: Client) -> AsyncIterator[Store]:
    nc = await connect(NatsConfig(url=url, names=client.layout.names))
    try:
        store = await Store.open(nc, client.layout, provision=False)
        yield store
        await store.records.settled()  # its row moves, as a process does before it closes
    finally:
        await close(nc)


async def test_a_late_try_of_a_lost_row_does_not_bring_back_a_row_a_later_move_replaced(
    client: Client, config: NatsConfig
) -> None:
    """A worker's `running` row is lost on the way; before its writer tries again, the
    task is cancelled, whose move puts a marker on the `running` row. The try that
    follows must not store that row again (nor leave the `pending` row behind)."""
    host, port = config.url.removeprefix("nats://").rsplit(":", 1)
    cut = Cut((host, int(port)))
    await client.submit([{"tool": "nobody-serves-this"}], task_id="raced")
    await eventually(lambda: _agrees_with_the_records(client, "raced", TaskStatus.PENDING))
    async with cut.running() as url, store_through(url, client) as store:
        cut.mark = f"{config.names.prefix}.index.{TaskStatus.RUNNING.value}.".encode()
        running = asyncio.create_task(
            store.records.update("raced", lambda r: replace(r, status=TaskStatus.RUNNING))
        )
        await wait_until(lambda: cut.cuts == 1, message="the running row's publish was cut")
        assert (await client.cancel("raced")).status is TaskStatus.CANCELLED
        with contextlib.suppress(NatsUnavailableError):  # (b3b5931: the write after it)
            await running
    await eventually(lambda: _agrees_with_the_records(client, "raced", TaskStatus.CANCELLED))


async def test_reindex_marks_the_rows_no_record_has(client: Client, store: Store) -> None:
    """`tether gc --reindex` repairs the index whole: the missing row written, a stale
    one (here: a `running` row left behind by a writer killed mid-move) marked away."""
    handle = await client.submit([{"tool": "nobody-serves-this"}], task_id="stale")
    record = await handle.get()
    stale = store.names.index_subject("running", listing.created_us(record.created_at), "stale")
    await store.js.publish(stale, b"")
    assert (await client.status_counts())["running"] == 1
    assert await client.reindex() == 1
    await eventually(lambda: _agrees_with_the_records(client, "stale", TaskStatus.PENDING))


async def test_a_row_another_process_put_back_is_deleted_when_the_task_leaves_it(
    client: Client, store: Store
) -> None:
    """This process stored the `running` row, then another moved the task to `waiting`
    and back, storing a `running` row of its own: leaving `running`, this process's
    delete by the sequence it remembers finds nothing and must still remove that row."""

    def moved(status: TaskStatus) -> Callable[[TaskRecord], TaskRecord]:
        return lambda record: replace(record, status=status)

    await client.submit([{"tool": "nobody-serves-this"}], task_id="back")
    async with store_through(client.nats.url, client) as other:
        await store.records.update("back", moved(TaskStatus.RUNNING))
        await other.records.update("back", moved(TaskStatus.WAITING))
        await other.records.update("back", moved(TaskStatus.RUNNING))
    await store.records.update("back", moved(TaskStatus.COMPLETED))
    await eventually(lambda: _agrees_with_the_records(client, "back", TaskStatus.COMPLETED))


def _moved(status: TaskStatus) -> Callable[[TaskRecord], TaskRecord]:
    return lambda record: replace(record, status=status)


async def test_a_move_stored_after_a_later_move_looked_for_its_row_is_taken_back(
    client: Client, store: Store
) -> None:
    """A worker's move to `running` runs after its record write, so it can be stored
    after the next worker completed the task and looked for a `running` row to delete:
    the late row must not stay beside the `completed` one."""
    await client.submit([{"tool": "nobody-serves-this"}], task_id="late")
    async with store_through(client.nats.url, client) as slow:
        slow.records.indexing = False  # its move, held back to run last
        pending = await slow.records.require("late")
        running, _ = await slow.records.update("late", _moved(TaskStatus.RUNNING))
        slow.records.indexing = True
        await store.records.update("late", _moved(TaskStatus.COMPLETED))
        await store.records.settled()
        await slow.records.index(running.record, running.revision, pending.record)
    await eventually(lambda: _agrees_with_the_records(client, "late", TaskStatus.COMPLETED))


async def test_the_dispatcher_repairs_a_row_whose_move_was_lost_with_its_process(
    client: Client, store: Store, config: NatsConfig
) -> None:
    """A worker killed between a record write and its row move leaves the old row: the
    dispatcher finds and repairs it (here every 0.2 s; every minute by default)."""
    await client.submit([{"tool": "nobody-serves-this"}], task_id="orphan")
    store.records.indexing = False  # the move that never ran
    await store.records.update("orphan", _moved(TaskStatus.COMPLETED))
    store.records.indexing = True
    assert (await client.status_counts())["pending"] == 1
    repairer = Dispatcher(config, index_repair_every=0.2)
    await repairer.start()
    try:
        await eventually(lambda: _agrees_with_the_records(client, "orphan", TaskStatus.COMPLETED))
    finally:
        await repairer.stop()
