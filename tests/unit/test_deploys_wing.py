"""Deploys in one wing (issue 39): the deploy modules live in `tether.deploys`, which
depends on no host or author package; a `TaskService` gets its router when it is made."""

from __future__ import annotations

import asyncio
import importlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.test_structure import imports
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
