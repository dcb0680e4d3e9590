"""How a worker proves it is alive, and how soon the others act on its silence: one
value a large fleet can tune (`tether worker --beat-every ...`, `TETHER_BEAT_EVERY`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class Liveness:
    beat_every: float = 0.5
    """Seconds between a worker's beats: its liveness, and so that of every step it
    holds (one KV put per beat, whatever it holds). A fleet of thousands of workers may
    beat less often, at the cost of a slower takeover."""
    dead_after: float = 2.0
    """Seconds of silence after which a survivor hands a worker's held steps on, when the
    worker neither beat nor answered a question meanwhile (`ask_after`): a worker whose
    connection is gone is known at once."""
    look_every: float = 30.0
    """Seconds between looks at the records of the tasks whose steps run here, for a
    cancellation whose notice this worker missed (one read per task)."""
    step_slack: float = 1.0
    """Seconds a step's message waits past its next sign of life (every half heartbeat:
    held, or its message extended) before another worker takes it. A worker whose event
    loop stalls longer loses the steps it has not held yet to others (they run again:
    at least once, as always)."""
    loop_stall: float = 20.0
    """Seconds a worker's event loop may go without a turn (a tool calling blocking code,
    a machine starved of CPU) and still be answered for: its answers come from a thread
    of their own (`tether.nats.answering`). A loop blocked longer is taken for dead
    `dead_after` later: its held steps run again elsewhere, at least once as always."""

    @property
    def ask_after(self) -> float:
        """Seconds of silence after which a worker that answers questions is asked whether
        it is alive (`tether.worker.succession`): its beat a fifth of an interval late."""
        return min(self.beat_every * 1.2, (self.beat_every + self.dead_after) / 2)

    @property
    def ask_within(self) -> float:
        """Seconds a question waits for its answer; then it is asked again (the first
        one's answer still counts if it comes later, until `dead_after`)."""
        return self.dead_after / 4

    def ack_wait(self, heartbeat: timedelta) -> timedelta:
        """How long a step's message waits for its worker before another takes it: the
        recovery time of a step a crash cut short before it was held (1.5 s for the
        default 1 s heartbeat)."""
        return heartbeat / 2 + timedelta(seconds=self.step_slack)

    def __post_init__(self) -> None:
        if not 0 < self.beat_every < self.dead_after:
            raise ValueError(
                f"beat_every ({self.beat_every}s) must be above 0 and below dead_after "
                f"({self.dead_after}s): a worker that beats less often than others wait "
                "for it is taken for dead"
            )
        if self.look_every <= 0 or self.step_slack <= 0 or self.loop_stall <= 0:
            raise ValueError("look_every, step_slack and loop_stall must be above 0")
