"""What Tether gave up on, kept on `<prefix>.dead.<tool>` for a person to look at."""

from __future__ import annotations

from tether.clock import utcnow
from tether.nats.store import Store
from tether.schemas.records import ErrorInfo
from tether.schemas.work import DeadLetter

DEAD_LETTER_DATA_LIMIT = 64 * 1024


class DeadLetters:
    """`TaskService.dead_letters`: a message and why it was given up, cut to a size."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def keep(
        self,
        *,
        tool: str,
        subject: str,
        data: bytes,
        error: ErrorInfo,
        task_id: str | None = None,
        step: int | None = None,
        branch: int | None = None,
        attempt: int = 0,
    ) -> None:
        """Keep what Tether gave up on (the first 64 KiB of it) on `<prefix>.dead.<tool>`."""
        await self.store.dead_letter(
            DeadLetter(
                tool=tool,
                task_id=task_id,
                step=step,
                branch=branch,
                attempt=attempt,
                error=error,
                subject=subject,
                data=data[:DEAD_LETTER_DATA_LIMIT],
                size=len(data),
                time=utcnow(),
            )
        )
