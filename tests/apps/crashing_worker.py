"""`tether worker` that kills itself with SIGKILL at one point of the step protocol.

TETHER_CRASH_AT=POINT:TASK_ID:STEP (STEP as `<step>.b<branch>` for a branch), POINT one of
  checkpointed  right after the step's (or branch's, or group's) checkpoint is written
  recorded      right after the task record moved past the step
  counted       right after the record counted the branch as done
  handed-off    right after a message of the next step was published (before the ack)
  memo-stored   right after a `ctx.once` result of the task was stored
  child-created right after the record of child task TASK_ID was created, before its
                hand-off (STEP is not used)
  failed-recorded  right after the step (or branch) wrote the task's failed record, before
                its `failed` event (and a branch's cancellation notice)
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from tether.cli import main
from tether.nats.checkpoints import Checkpoints
from tether.nats.records import Records
from tether.nats.store import Store
from tether.schemas.events import Failed, StepCompleted

POINT, TASK_ID, STEP = os.environ["TETHER_CRASH_AT"].split(":")
_step, _, _branch = STEP.partition(".b")
STEP_NO = int(_step)
BRANCH = int(_branch) if _branch else None


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def after(cls: type, name: str, hit: Callable[..., bool]) -> None:
    original = getattr(cls, name)

    @functools.wraps(original)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, *args, **kwargs)
        if hit(*args):
            die()
        return result

    setattr(cls, name, wrapper)


def before(cls: type, name: str, hit: Callable[..., bool]) -> None:
    original = getattr(cls, name)

    @functools.wraps(original)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if hit(*args):
            die()
        return await original(self, *args, **kwargs)

    setattr(cls, name, wrapper)


def completed(event: Any, *_: Any) -> bool:
    """The record moves (compare-and-set), then `step_completed` is emitted."""
    return isinstance(event, StepCompleted) and (event.task_id, event.step, event.branch) == (
        TASK_ID,
        STEP_NO,
        BRANCH,
    )


if POINT == "checkpointed":
    after(
        Checkpoints,
        "create",
        lambda task_id, step, _, branch=None: (task_id, step, branch) == (TASK_ID, STEP_NO, BRANCH),
    )
elif POINT in ("recorded", "counted"):
    before(Store, "publish_event", completed)
elif POINT == "handed-off":
    next_step = (TASK_ID, STEP_NO + 1)
    after(Store, "publish_work", lambda work, *_: (work.task_id, work.step) == next_step)
elif POINT == "memo-stored":
    after(Checkpoints, "create_memo", lambda key, *_: key.startswith(TASK_ID + "."))
elif POINT == "child-created":
    after(Records, "create", lambda record, *_: record.task_id == TASK_ID)
elif POINT == "failed-recorded":
    before(
        Store,
        "publish_event",
        lambda event, *_: (
            isinstance(event, Failed)
            and (event.task_id, event.step, event.branch) == (TASK_ID, STEP_NO, BRANCH)
        ),
    )
else:
    sys.exit(f"unknown crash point {POINT!r}")

if __name__ == "__main__":
    main()
