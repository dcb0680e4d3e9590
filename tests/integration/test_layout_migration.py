"""`tether provision` moves an installation Tether at b3b5931 wrote (layout 2: schedules
and rollups on the work stream) to this layout, losing no queued step and no timer: a
store is filled by that Tether's own code (`layout2_store.py`, the tree taken from git),
the server restarted on it, provisioned by this Tether's CLI, and every task then ends
as it would have."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import nats
import pytest
from nats.js.api import RetentionPolicy, StreamConfig
from nats.js.errors import APIError, NotFoundError

from tests.apps.tools import app
from tests.servers import configured_server
from tether import Client, Dispatcher, NatsConfig, TaskFailedError, Worker
from tether.nats.codes import ROLLUP_NOT_PERMITTED
from tether.nats.headers import MSG_ID, SCHEDULE, SCHEDULE_TARGET, WAKE
from tether.nats.layout import LAYOUT_VERSION, STAMP, Layout
from tether.nats.provision import provision
from tether.schemas import TaskStatus
from tether.schemas.names import DEFAULT_NAMES as NAMES

ROOT = Path(__file__).resolve().parents[2]
OLD = "b3b5931"
"""The last commit of layout 2."""
FILL = Path(__file__).with_name("layout2_store.py")


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tether's code and test apps at `OLD`, from this repository's history."""
    paths = ["services", "tests/__init__.py", "tests/apps"]
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", OLD, *paths], capture_output=True, check=False
    )
    if archive.returncode != 0:
        pytest.skip(f"needs commit {OLD} in the git history: {archive.stderr.decode()}")
    tree = tmp_path_factory.mktemp(OLD)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def _fill_as_layout_2(tree: Path, url: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{tree / 'services'}{os.pathsep}{tree}"}
    env.pop("TETHER_TEST_EXECUTIONS", None)
    done = subprocess.run(
        [sys.executable, str(FILL), url], env=env, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    ids: dict[str, str] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return ids


def _provision(url: str) -> None:
    command = [sys.executable, "-m", "tether.cli", "provision", "--nats", url]
    done = subprocess.run(command, capture_output=True, timeout=60, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr.decode()[-3000:]


async def test_provision_moves_a_layout_2_store_losing_no_queued_step_or_timer(
    tmp_path: Path, old_tree: Path
) -> None:
    with configured_server(tmp_path, "") as server:
        ids = _fill_as_layout_2(old_tree, f"nats://{server.address}")
    with configured_server(tmp_path, "") as server:  # the same store, restarted
        config = NatsConfig(url=f"nats://{server.address}")
        _provision(config.url)
        await _assert_layout_3(config.url, ids["late"])
        async with Client(config) as client, Dispatcher(config), Worker(app, config):
            # The queued step runs, its input read from a blob the old code stored.
            queued = await client.handle(ids["queued"]).wait(timeout=30)
            assert queued["payload"] == "x" * (300 * 1024)
            # The sleep's timer fires: its next step runs.
            woke = await client.handle(ids["sleeper"]).wait(timeout=30)
            assert woke["given"]["napped"] > 0
            # The deadline and the input wait's expiry fire: each fails its task.
            for task, reason in (("late", "DeadlineExceeded"), ("asker", "InputExpired")):
                with pytest.raises(TaskFailedError) as failed:
                    await client.handle(ids[task]).wait(timeout=30)
                assert failed.value.error is not None and failed.value.error.type == reason
            late = await client.get(ids["late"])
            assert late.status is TaskStatus.FAILED


async def _assert_layout_3(url: str, late: str) -> None:
    """Stamped as this layout; the hour-long sleep waits as a schedule in the timers
    stream; the work stream takes no schedules and refuses a rollup; nothing set aside
    is left."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        work = (await js.stream_info(NAMES.work_stream)).config
        assert (work.metadata or {})[STAMP] == str(LAYOUT_VERSION)
        assert not work.allow_msg_schedules and not work.allow_rollup_hdrs
        wake = await js.get_last_msg(NAMES.timers_stream, NAMES.timer_subject(f"{late}.1"))
        assert wake.headers is not None and SCHEDULE in wake.headers
        assert wake.headers[WAKE] == NAMES.work_subject("clock")
        with pytest.raises(APIError) as refused:
            await js.publish(NAMES.work_subject("x"), b"", headers={"Nats-Rollup": "all"})
        assert refused.value.err_code == ROLLUP_NOT_PERMITTED
        names = await js.streams_info()
        assert NAMES.moving_stream not in {info.config.name for info in names}
    finally:
        await nc.close()


async def test_two_provisions_at_once_move_a_layout_2_work_stream_once(
    config: NatsConfig,
) -> None:
    """The services of `tether dev` each provision as they start: on a layout 2 store they
    move the work stream together, and every message arrives once."""
    names, layout = config.names, Layout.for_config(config)
    nc, other = await nats.connect(config.url), await nats.connect(config.url)
    try:
        js = nc.jetstream()
        await js.add_stream(
            StreamConfig(  # layout 2's work stream
                name=names.work_stream,
                subjects=[names.work_subjects, names.timer_subjects],
                retention=RetentionPolicy.WORK_QUEUE,
                allow_msg_schedules=True,
            )
        )
        for step in range(3):
            await js.publish(names.work_subject("fast"), b"{}", headers={MSG_ID: f"t.{step}"})
        later = {SCHEDULE: "@at 2999-01-01T00:00:00Z", SCHEDULE_TARGET: names.work_subject("x")}
        await js.publish(names.timer_subject("t.3"), b"{}", headers=later)

        await asyncio.gather(provision(js, layout), provision(other.jetstream(), layout))

        work = await js.stream_info(names.work_stream, subjects_filter=">")
        assert work.state.subjects == {names.work_subject("fast"): 3}
        timers = await js.stream_info(names.timers_stream, subjects_filter=">")
        assert timers.state.subjects == {names.timer_subject("t.3"): 1}
        with pytest.raises(NotFoundError):
            await js.stream_info(names.moving_stream)
    finally:
        await nc.close()
        await other.close()
