"""Task records a worker process wrote itself, so the step it hands off to can skip a read."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tether.schemas.records import TaskRecord, TaskStatus

MAX_AGE = 10.0
CAPACITY = 4096
MAX_RECORD_BYTES = 8192


@dataclass(frozen=True)
class Versioned:
    """A task record and the KV revision it was read at (for compare-and-set)."""

    record: TaskRecord
    revision: int


class RecentRecords:
    """The last record written per task, taken (not read) by the task's next step.

    A worker that completes step i knows the record it wrote; when the same process
    receives step i+1 it starts from that record instead of reading it again, one
    round trip less per step. The read is there to stop steps of cancelled tasks, so
    a cancellation reaches every worker as a notice that drops the entry, and entries
    from before a reconnect (which may have lost notices) or an unanswered NATS call (a
    failover, whose new leader may deliver a step again as a first delivery after another
    worker ran it) are never used. A step
    started from an entry still ends with a compare-and-set, so nothing it missed can
    be overwritten.
    """

    def __init__(self, disturbances: Callable[[], int]) -> None:
        self._disturbances = disturbances
        self._entries: dict[str, tuple[Versioned, float, int]] = {}

    def remember(self, found: Versioned, size: int) -> None:
        """Keep `found` (`size` bytes encoded) if a next step could start from it.

        Only running records are kept, only small ones, only for `MAX_AGE`: an entry
        whose next step went to another process is never taken, so these bounds are
        what limit the memory it holds. A record whose current step a child task runs,
        or whose parallel step has branches done, is not kept: the next message of that
        step may find a checkpoint (the child's result, a branch's output).
        """
        task_id = found.record.task_id
        self._entries.pop(task_id, None)
        record = found.record
        handed_off = record.awaiting is None and not record.done_branches
        if record.status is not TaskStatus.RUNNING or size > MAX_RECORD_BYTES or not handed_off:
            return
        now = time.monotonic()
        entries = self._entries
        while entries:
            oldest = next(iter(entries))
            if len(entries) < CAPACITY and now - entries[oldest][1] < MAX_AGE:
                break
            del entries[oldest]
        entries[task_id] = (found, now, self._disturbances())

    def take(self, task_id: str, step: int, generation: int) -> Versioned | None:
        """The record for a first delivery of `step`, if this process wrote it lately."""
        entry = self._entries.pop(task_id, None)
        if entry is None:
            return None
        found, written_at, disturbances = entry
        record = found.record
        usable = (  # only running records are kept (see `remember`)
            record.current_step == step
            and record.generation == generation
            and disturbances == self._disturbances()
            and time.monotonic() - written_at < MAX_AGE
        )
        return found if usable else None

    def forget(self, task_id: str) -> None:
        self._entries.pop(task_id, None)
