"""`tether gc` run again soon after one that removed tasks: the real executable."""

from __future__ import annotations

import pytest

from tests.apps.tools import app as tools_app
from tests.e2e.test_cli_ops import tether
from tether import Client, NatsConfig, TaskExistsError, Worker


async def test_a_second_gc_soon_after_one_that_removed_tasks_skips_their_held_back_ids(
    config: NatsConfig, client: Client
) -> None:
    """The first run leaves a marker under each removed task's id that holds the id back
    for the duplicate window; the next runs (a dry one too) read past it, not as a record."""
    async with Worker(tools_app, config):
        for task_id in ("gc-one", "gc-two"):
            await (await client.submit(["fast"], task_id=task_id)).wait(timeout=20)
        kept = await client.submit(["fast"], task_id="gc-kept")
        await kept.wait(timeout=20)

    first = await tether(config, "gc", "--older-than", "0", "--json")
    assert first.code == 0, first
    assert sorted(first.json()["tasks"]) == ["gc-kept", "gc-one", "gc-two"]
    with pytest.raises(TaskExistsError):  # held back: the marker is there
        await client.submit(["fast"], task_id="gc-one")

    dry = await tether(config, "gc", "--older-than", "0", "--dry-run", "--json")
    again = await tether(config, "gc", "--older-than", "0", "--json")
    for run in (dry, again):
        assert run.code == 0, run
        assert "Traceback" not in run.err, run.err
        assert run.json()["tasks"] == [] and run.json()["kept_tasks"] == 0, run.out
