"""What a step's last attempt left behind, for the delivery that comes after it."""

from __future__ import annotations

from datetime import datetime

import msgspec


class StepRun(msgspec.Struct, frozen=True, kw_only=True):
    """The last attempt of a step that started and ran a while, or failed, under
    `<task_id>=<step>` (`=b<branch>` for a branch) in `tether-heartbeats`: what tells a
    delivery that came back whether the one before it ran (see `tether.worker.runs`)."""

    generation: int
    attempt: int
    sequence: int
    """The work message's stream sequence."""
    delivered: int
    """The message's delivery count when this was written."""
    running: bool
    """True: the attempt started (a later delivery finds that its worker died); False: it
    failed and was sent back to run again, or (`waiting`) it has not started yet."""
    deaths: int = 0
    """Attempts during which the worker died while this step ran alone in it: the only
    deaths that count against the step (see `tether.worker.runs`)."""
    spared: int = 0
    """Attempts lost to a worker's death while other steps ran beside this one: no
    evidence against it, so they are not charged to its retry policy."""
    alone: bool = False
    """This attempt runs with nothing else beside it in its process: if its worker dies,
    the death is the step's own."""
    waiting: bool = False
    """Counted and not started (`running` is false): it waits for its process to run it
    alone; a worker that dies meanwhile costs it nothing."""
    time: datetime
    holder: str = ""
    """The worker running the attempt ("" from workers before 2026-12): a delivery that
    comes back while that worker still beats leaves the step to it (`runs.held_by`)."""
