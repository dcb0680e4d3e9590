"""One shape per (build, tool): services released together under one build name, each
serving its own tools (sidecars), all start and make one build; a worker of the build
whose shape of a tool differs is refused, also when two race to add the same tool."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from tether import App, Client, NatsConfig, StepContext, Worker
from tether.errors import DefinitionError
from tether.nats.store import Store
from tether.nats.workers import Workers
from tether.schemas.builds import BuildInfo
from tether.testing import eventually


class Sum(msgspec.Struct, forbid_unknown_fields=True):
    sum: int


class Total(msgspec.Struct, forbid_unknown_fields=True):
    total: int


def _orders() -> App:
    """One service: counts."""
    app = App("orders")

    @app.tool(name="count")
    async def count(ctx: StepContext, n: int) -> Sum:
        return Sum(sum=n)

    return app


def _mailer(total: bool = False) -> App:
    """Another service, released with the same build name: mails what was counted (with
    `total`, other code: it takes another shape)."""
    app = App("mailer")
    if total:

        @app.tool(name="mail")
        async def mail_total(ctx: StepContext, t: Total) -> str:
            return f"mailed {t.total}"

    else:

        @app.tool(name="mail")
        async def mail(ctx: StepContext, s: Sum) -> str:
            return f"mailed {s.sum}"

    return app


def _workers(store: Store) -> Workers:
    return store.workers


async def _refused(worker: Worker) -> str:
    with pytest.raises(DefinitionError) as refused:
        try:
            await worker.start()
        finally:
            await worker.stop()  # a start refused leaves its connection open
    (line,) = str(refused.value).splitlines()
    return line


async def test_sidecars_of_one_build_all_start_and_make_one_build_and_a_liar_is_refused(
    config: NatsConfig, client: Client, store: Store, dispatcher: object
) -> None:
    orders = Worker(_orders(), config, build="v2")
    async with orders, Worker(_mailer(), config, build="v2"):
        rows = [row for row in (await client.builds()).builds if row.build == "v2"]
        assert len(rows) == 1 and rows[0].tools == ["count", "mail"], rows
        assert rows[0].workers == 2

        async def heard() -> None:  # the first worker's fleet hears the tool added since
            assert orders._rollout is not None
            info = orders._rollout.fleet.fleet.infos.get("v2")
            assert info is not None and sorted(info.tools) == ["count", "mail"], info

        await eventually(heard, timeout=10)
        handle = await client.submit([{"tool": "count", "input": 3}, "mail"])
        assert await handle.wait(timeout=20) == "mailed 3"

        before = await _workers(store).build("v2")
        assert before is not None
        line = await _refused(Worker(_mailer(total=True), config, build="v2"))
        assert "build 'v2' was announced with other shapes" in line, line
        assert "tool 'mail': input field 'total' is new" in line, line
        assert "count" not in line, line  # a tool it does not serve is none of its business
        assert await _workers(store).build("v2") == before
        rows = [row for row in (await client.builds()).builds if row.build == "v2"]
        assert len(rows) == 1 and rows[0].tools == ["count", "mail"]


async def test_of_two_workers_racing_to_add_a_tool_with_two_shapes_one_is_refused(
    config: NatsConfig, client: Client, store: Store
) -> None:
    async with Worker(_orders(), config, build="r1"):
        pass
    honest, liar = Worker(_mailer(), config, build="r1"), Worker(_mailer(True), config, build="r1")
    outcomes = await asyncio.gather(honest.start(), liar.start(), return_exceptions=True)
    try:
        refused = [o for o in outcomes if isinstance(o, DefinitionError)]
        assert len(refused) == 1 and outcomes.count(None) == 1, outcomes
        started = honest if outcomes[0] is None else liar
        info: BuildInfo | None = await _workers(store).build("r1")
        assert info is not None and sorted(info.tools) == ["count", "mail"]
        stored = await _workers(store).build_tool("r1", "mail")
        assert stored is not None and stored.shape == info.tools["mail"]
        shape = info.tools["mail"].input_schema
        assert ("total" if started is liar else "sum") in str(shape), shape
    finally:
        await honest.stop()
        await liar.stop()
