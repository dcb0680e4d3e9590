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
    failed and was sent back to run again."""
    deaths: int = 0
    """Attempts of this step during which the worker running it died."""
    time: datetime
