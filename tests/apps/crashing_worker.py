"""`tether worker` that kills itself with SIGKILL at one point of the step protocol.

TETHER_CRASH_AT=POINT:TASK_ID:STEP, POINT one of
  checkpointed  right after the step's checkpoint is written
  recorded      right after the task record moved past the step
  handed-off    right after the next step's message was published (before the ack)
  memo-stored   right after a `ctx.once` result of the task was stored
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from tether.cli import main
from tether.nats.store import Store
from tether.schemas.events import StepCompleted

POINT, TASK_ID, STEP = os.environ["TETHER_CRASH_AT"].split(":")
STEP_NO = int(STEP)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def after(name: str, hit: Callable[..., bool]) -> None:
    original = getattr(Store, name)

    @functools.wraps(original)
    async def wrapper(self: Store, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, *args, **kwargs)
        if hit(*args):
            die()
        return result

    setattr(Store, name, wrapper)


def before(name: str, hit: Callable[..., bool]) -> None:
    original = getattr(Store, name)

    @functools.wraps(original)
    async def wrapper(self: Store, *args: Any, **kwargs: Any) -> Any:
        if hit(*args):
            die()
        return await original(self, *args, **kwargs)

    setattr(Store, name, wrapper)


if POINT == "checkpointed":
    after("create_checkpoint", lambda task_id, step, *_: task_id == TASK_ID and step == STEP_NO)
elif POINT == "recorded":
    # The record moves (compare-and-set), then `step_completed` is emitted: die in between.
    before(
        "emit",
        lambda event, *_: (
            isinstance(event, StepCompleted) and event.task_id == TASK_ID and event.step == STEP_NO
        ),
    )
elif POINT == "handed-off":
    after("publish_work", lambda work, *_: work.task_id == TASK_ID and work.step == STEP_NO + 1)
elif POINT == "memo-stored":
    after("create_memo", lambda key, *_: key.startswith(TASK_ID + "."))
else:
    sys.exit(f"unknown crash point {POINT!r}")

if __name__ == "__main__":
    main()
