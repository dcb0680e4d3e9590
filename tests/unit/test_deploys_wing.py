"""Deploys in one wing (issue 39): the deploy modules live in `tether.deploys`, which
depends on no host or author package; a `TaskService` gets its router when it is made;
the split of `schemas.tasks` keeps every name where it was, for one round."""

from __future__ import annotations

import asyncio
import importlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.test_structure import imports
from tether.schemas import tasks as old_schemas
from tether.schemas.names import DEFAULT_NAMES
from tether.schemas.records import TaskRecord, TaskStatus
from tether.schemas.work import WorkMessage
from tether.tasks.service import TaskService

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DEPLOY_MODULES = [
    "actions",
    "announcing",
    "compat",
    "fleet",
    "forgetting",
    "listing",
    "naming",
    "rollout",
    "routing",
    "shapes",
]
"""Builds, schema changes, routing, the fleet view, rollout, announcing, `tether builds`
and what `tether gc` forgets of them."""


@pytest.mark.parametrize("name", DEPLOY_MODULES)
def test_every_part_of_a_deploy_is_in_the_deploys_package(name: str) -> None:
    assert importlib.import_module(f"tether.deploys.{name}").__name__ == f"tether.deploys.{name}"


def test_the_deploys_package_imports_no_host_author_or_agent_package() -> None:
    """Not even for types: rollout needs a `StepMover` (not `StepRunner`), shapes a
    `ServedTool` (not `tether.tools.Tool`), compat the pure `schemas.tool_schema`."""
    found = [
        f"{i.path}:{i.line} imports {i.target}"
        for i in imports()
        if i.source.startswith("tether.deploys")
        and i.target.split(".")[:2]
        in (["tether", "worker"], ["tether", "agents"], ["tether", "tools"], ["tether", "tasks"])
    ]
    assert found == []


def test_the_moved_modules_stay_importable_from_their_old_paths_for_one_round() -> None:
    from tether.deploys import compat, naming, routing
    from tether.worker import builds as old_builds
    from tether.worker import compat as old_compat
    from tether.worker import routing as old_routing

    assert old_builds.default_build is naming.default_build
    assert old_compat.input_changes is compat.input_changes
    assert old_routing.place is routing.place


@dataclass
class _Store:
    """What `TaskService.publish` uses of the store: its names, and the work it publishes."""

    names: Any = DEFAULT_NAMES
    published: list[tuple[WorkMessage, str | None]] = field(default_factory=list)

    async def publish_work(
        self, work: WorkMessage, msg_id: str, at: Any = None, build: str | None = None
    ) -> None:
        self.published.append((work, build))


class _Router:
    def build_for(self, work: WorkMessage, record: TaskRecord | None) -> str | None:
        return "v2"


def _record() -> TaskRecord:
    return TaskRecord(
        task_id="t1", status=TaskStatus.RUNNING, steps=[], created_at=NOW, updated_at=NOW
    )


def test_a_task_service_gets_its_router_when_it_is_made() -> None:
    store = _Store()
    tasks = TaskService(store, router=_Router())  # type: ignore[arg-type]
    work = WorkMessage(task_id="t1", step=1, tool="search")
    asyncio.run(tasks.publish([work], record=_record()))
    assert store.published == [(work, "v2")]


def test_without_a_router_every_step_goes_to_its_tools_subject() -> None:
    store = _Store()
    tasks = TaskService(store)  # type: ignore[arg-type]
    work = WorkMessage(task_id="t1", step=1, tool="search")
    asyncio.run(tasks.publish([work], record=_record()))
    assert store.published == [(work, None)]


def test_the_task_flows_keep_their_names_for_one_round() -> None:
    tasks = TaskService(_Store())  # type: ignore[arg-type]
    assert tasks.fail == tasks.endings.fail
    assert tasks.cancel == tasks.endings.cancel
    assert tasks.send_input == tasks.answers.send_input
    assert tasks.dead_letter == tasks.dead_letters.keep


def test_every_name_of_schemas_tasks_is_still_there_and_the_same() -> None:
    homes = ["plans", "records", "work", "workers", "runs"]
    modules = [importlib.import_module(f"tether.schemas.{home}") for home in homes]
    for name in old_schemas.__all__:
        where = [m for m in modules if name in vars(m)]
        assert where, f"{name} has no home"
        assert getattr(old_schemas, name) is getattr(where[0], name)
