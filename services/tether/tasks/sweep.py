"""The retention sweep: finished tasks past their retention, and blobs nothing refers to.

Run by `tether gc` (from cron, a Kubernetes CronJob, or by hand). It is safe to run
while workers run and to run twice at once: it removes only finished tasks, and a
blob only when no record or checkpoint kept refers to it and it is past the grace
period (see `tether.tasks.retention`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tether.clock import utcnow
from tether.deploys.forgetting import unused_builds
from tether.nats.blobs import BLOB_GRACE
from tether.nats.cleanup import Cleanup
from tether.nats.store import Store
from tether.schemas.codec import record_decoder
from tether.tasks.retention import DEFAULT_RETENTION, expired, garbage
from tether.tasks.retention import referenced_blobs as refs_in


@dataclass
class SweepReport:
    """What a sweep removed (or, with `dry_run`, would remove)."""

    tasks: list[str] = field(default_factory=list)
    blobs: list[str] = field(default_factory=list)
    builds: list[str] = field(default_factory=list)
    """Builds announced over `retention` ago that no worker runs, no unfinished task
    started on, and where no new task goes (see `tether builds`)."""
    kept_tasks: int = 0
    kept_blobs: int = 0


class Sweeper:
    def __init__(self, store: Store) -> None:
        self._cleanup = Cleanup(store)
        self._names = store.names
        self._store = store

    async def sweep(
        self,
        retention: timedelta = DEFAULT_RETENTION,
        grace: timedelta = BLOB_GRACE,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> SweepReport:
        now = now or utcnow()
        report = SweepReport()
        cleanup = self._cleanup
        # Blobs are listed first: one stored after this point is not considered at all.
        blobs = [found async for found in cleanup.stored_blobs()]
        referenced: set[str] = set()
        started_on: set[str | None] = set()
        async for task_id, value in cleanup.values(self._names.tasks_bucket):
            record = record_decoder.decode(value)
            if not record.status.is_terminal:
                started_on.add(record.build)
            if expired(record, now, retention):
                report.tasks.append(task_id)
            else:
                report.kept_tasks += 1
                referenced |= refs_in(value)
        gone = set(report.tasks)
        async for key, value in cleanup.values(self._names.checkpoints_bucket):
            if key.split(".", 1)[0] not in gone:
                referenced |= refs_in(value)
        report.blobs = garbage(blobs, referenced, now, grace)
        report.kept_blobs = len(blobs) - len(report.blobs)
        report.builds = await unused_builds(self._store.workers, started_on, now - retention)
        if not dry_run:
            for build in report.builds:
                await self._store.workers.forget_build(build)
            for task_id in report.tasks:
                await cleanup.remove_task(task_id)
            for digest in report.blobs:
                await cleanup.remove_blob(digest)
        return report
