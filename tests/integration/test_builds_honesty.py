"""A tool has one shape in a build: it is written once, by the build's first worker that
serves it, in a bucket whose stream refuses a second write to a key whoever sends it; a
worker whose shape of a tool differs is refused at start, and `tether gc` can still
forget the build."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterable
from pathlib import Path

import msgspec
import pytest
from nats.js.errors import APIError

from tests.apps import deploys
from tests.conftest import Raw, start_worker, stop_worker
from tether import App, Client, NatsConfig, StepContext, Worker
from tether.nats.store import Store
from tether.nats.workers import Workers
from tether.schemas.builds import BuildInfo
from tether.testing import eventually

DEPLOYS = "tests.apps.deploys:app"
"""v2's `tally` returns `{"total": n}` and its `report` takes it, where v1's took `{"sum": n}`."""
MAX_PER_SUBJECT = 10077
"""JetStream's `err_code` for a message refused by a stream's discard-new per subject."""


class Sum(msgspec.Struct):
    sum: int


def _reports(extra: bool = False) -> App:
    app = App("honest", versioning="pinned")

    async def report(ctx: StepContext, s: Sum) -> str:
        return f"v1 {s.sum}"

    async def audit(ctx: StepContext, s: Sum) -> str:
        return "audited"

    app.tool(name="report")(report)
    if extra:
        app.tool(name="audit")(audit)
    return app


def _workers(store: Store) -> Workers:
    return store.workers


async def _announced(store: Store, build: str, tools: Iterable[str] = ()) -> BuildInfo:
    """The build once each of `tools` is in it (one key each, written one after another
    as its worker starts)."""
    info = await _workers(store).build(build)
    assert info is not None, f"build {build} not announced yet"
    missing = set(tools) - set(info.tools)
    assert not missing, f"build {build} does not list {sorted(missing)} yet"
    return info


async def test_other_code_started_under_a_builds_name_is_refused_and_the_build_keeps_its_shape(
    config: NatsConfig,
    client: Client,
    store: Store,
    dispatcher: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """v2's code started with `--build v1` beside an honest v1: it exits at start with one
    line naming the build, the tools and how they differ; v1's description is as its
    first worker wrote it, `tether builds` lists one v1, and v1's tasks still run."""
    monkeypatch.setenv("TETHER_TEST_DEPLOY_VERSION", "v1")
    honest = start_worker(config, DEPLOYS, "--build", "v1", log=tmp_path / "v1.log")
    try:
        every = deploys.app.tools
        before = await eventually(lambda: _announced(store, "v1", every), timeout=20)
        monkeypatch.setenv("TETHER_TEST_DEPLOY_VERSION", "v2")
        liar = start_worker(config, DEPLOYS, "--build", "v1", log=tmp_path / "liar.log")
        try:
            code = await asyncio.to_thread(liar.wait, 30)
        except subprocess.TimeoutExpired:
            liar.kill()
            raise AssertionError("the lying worker was not refused") from None
        said = (tmp_path / "liar.log").read_text()
        assert code != 0, said
        errors = [line for line in said.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "Traceback" not in said, said
        (line,) = errors
        assert "build 'v1' was announced with other shapes" in line, line
        assert "tool 'report': input field 'total' is new" in line, line
        assert "tool 'tally': output field 'total' is new" in line, line
        assert "--build with another name" in line, line

        assert await _workers(store).build("v1") == before
        rows = [row for row in (await client.builds()).builds if row.build == "v1"]
        assert len(rows) == 1 and rows[0].tools == sorted(before.tools)
        handle = await client.submit([{"tool": "tally", "input": 3}, "report"])
        assert await handle.wait(timeout=20) == "3 by v1"
    finally:
        await asyncio.to_thread(stop_worker, honest)


async def test_a_replica_a_restart_or_fewer_tools_start_and_leave_the_build_as_it_was(
    config: NatsConfig, client: Client, store: Store
) -> None:
    async with (
        Worker(_reports(extra=True), config, build="b1"),
        Worker(_reports(extra=True), config, build="b1"),
    ):
        first = await _announced(store, "b1")
    async with Worker(_reports(extra=True), config, build="b1"):  # a restart
        pass
    async with Worker(_reports(), config, build="b1"):  # fewer of its tools
        pass
    assert sorted(first.tools) == ["audit", "report"]
    assert await _announced(store, "b1") == first


async def test_the_server_refuses_a_second_write_to_a_builds_key_and_gc_can_still_forget_it(
    config: NatsConfig, client: Client, store: Store, raw: Raw
) -> None:
    async with Worker(_reports(), config, build="b2"), Worker(_reports(), config, build="b2.1"):
        first = await _announced(store, "b2")
        neighbour = await _announced(store, "b2.1")
    names = config.names
    key = names.build_key("b2", "report")
    subject = names.kv_subject(names.builds_bucket, key)
    stored = await _workers(store).build_tool("b2", "report")
    assert stored is not None and stored.shape == first.tools["report"]
    forged = msgspec.json.encode(
        msgspec.structs.replace(stored, shape=msgspec.structs.replace(stored.shape, grace_s=1))
    )
    for headers in (None, {"KV-Operation": "DEL"}, {"KV-Operation": "PURGE", "Nats-Rollup": "sub"}):
        with pytest.raises(APIError) as refused:
            await raw.js.publish(subject, forged, headers=headers)
        assert refused.value.err_code in (MAX_PER_SUBJECT, 10111), refused.value  # or rollup
    with pytest.raises(APIError):
        await (await raw.js.key_value(names.builds_bucket)).put(key, forged)
    elsewhere = names.kv_subject(names.builds_bucket, names.build_key("b9", "report"))
    await raw.js.publish(elsewhere, forged)  # a free key, with b2's tool in it: not b2's
    assert await _announced(store, "b2") == first
    assert await _workers(store).build("b9") is None
    assert [info.build for info in await _workers(store).builds()] == ["b2", "b2.1"]

    await _workers(store).forget_build("b2")  # its keys, b2.*, and no other build's
    assert await _workers(store).build("b2") is None
    assert await _announced(store, "b2.1") == neighbour
    async with Worker(_reports(extra=True), config, build="b2"):  # a new build under the name
        assert sorted((await _announced(store, "b2")).tools) == ["audit", "report"]
