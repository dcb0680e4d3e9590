"""The soak's kinds of task: what each submits, what it is then done to, how it ends."""

from __future__ import annotations

import random
from enum import Enum
from typing import Any

from tests.chaos_runs import tasks
from tests.chaos_runs.executions import StepKey
from tether import Client, Parallel, TaskRecord, TaskStatus

REACH = 120.0
"""Seconds a task may take to get where the soak acts on it (running, waiting)."""


class Kind(str, Enum):
    SHORT = "short"
    """Three steps; the middle one takes 0.2 s (so that kills find steps in flight)."""
    SLEEP = "sleep"
    """A durable sleep of 1-5 s between two steps."""
    FANOUT = "fanout"
    """A parallel group of 3-8 branches of up to a second, then a step that gets their
    outputs."""
    RETRY = "retry"
    """A step that fails its first attempt and succeeds on the second."""
    CANCEL = "cancel"
    """A long step, cancelled while it runs."""
    INPUT = "input"
    """A step that waits for an approval, which the soak gives."""


WEIGHTS = {
    Kind.SHORT: 30,
    Kind.SLEEP: 15,
    Kind.FANOUT: 15,
    Kind.RETRY: 15,
    Kind.CANCEL: 10,
    Kind.INPUT: 15,
}


def pick(rng: random.Random) -> Kind:
    return rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]


def plan(kind: Kind, n: int, rng: random.Random) -> list[Any]:
    match kind:
        case Kind.SHORT:
            first = {"tool": "fetch", "input": {"n": n, "sleep": 0.2}}
            return [first, {"tool": "think"}, {"tool": "write"}]
        case Kind.SLEEP:
            return [{"tool": "nap", "input": {"seconds": rng.uniform(1, 5)}}, {"tool": "write"}]
        case Kind.FANOUT:
            branches = [
                {"tool": "branch", "input": {"sleep": round(rng.uniform(0.1, 1.0), 2)}}
                for _ in range(rng.randint(3, 8))
            ]
            return [Parallel(*branches), {"tool": "write"}]
        case Kind.RETRY:
            return [{"tool": "flaky", "input": {"n": n}}, {"tool": "write"}]
        case Kind.CANCEL:
            return [{"tool": "hold", "input": {"seconds": 600}}, {"tool": "write"}]
        case Kind.INPUT:
            return [{"tool": "ask", "input": {"n": n}}, {"tool": "write"}]


def expected(kind: Kind) -> TaskStatus:
    return TaskStatus.CANCELLED if kind is Kind.CANCEL else TaskStatus.COMPLETED


def planned_runs(kind: Kind, task_id: str) -> dict[StepKey, int]:
    """Steps meant to run more than once: the retried step runs twice."""
    return {(task_id, 0, None): 2} if kind is Kind.RETRY else {}


def _running(record: TaskRecord) -> bool:
    return record.status is TaskStatus.RUNNING


def _waiting(record: TaskRecord) -> bool:
    return record.status is TaskStatus.WAITING


async def drive(client: Client, kind: Kind, task_id: str, steps: list[Any]) -> None:
    """Submit the task, then do to it what its kind says (cancel it mid-run, answer it)."""
    await tasks.submit(client, steps, task_id)
    if kind is Kind.CANCEL:
        await tasks.wait_status(client, task_id, _running, REACH)
        await tasks.cancel(client, task_id)
    elif kind is Kind.INPUT:
        await tasks.wait_status(client, task_id, _waiting, REACH)
        await tasks.answer(client, task_id, {"approved": True})
