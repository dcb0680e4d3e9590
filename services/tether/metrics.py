"""Prometheus metrics of one Tether process (worker, dispatcher, gateway).

Step attempts are counted from their one end (`tether.worker.attempts.Attempt`); tasks,
tokens and skipped steps from the status events this process publishes (`Store.publish_event`), and
dead letters as it writes them. Each process has its own registry (no globals); `serve`
exposes it on a port.

    tether_steps_started_total{tool}
    tether_steps_total{tool,outcome}          completed | retried | failed | cancelled |
                                              waiting | child | handed_on, and skipped
                                              (a checkpointed step replayed, not run)
    tether_step_duration_seconds{tool}        an attempt's start to its end
    tether_steps_in_flight{tool}
    tether_dead_letters_total{tool}
    tether_tasks_submitted_total
    tether_tasks_finished_total{outcome}      completed | failed | cancelled
    tether_llm_tokens_total{model,type}       input | output | cached
    tether_consumer_pending_messages{tool}    the tool's queue (num_pending)
    tether_consumer_ack_pending_messages{tool}  delivered, not yet acknowledged
    tether_nats_reconnects_total
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.process_collector import ProcessCollector

from tether.nats.store import Store
from tether.schemas.events import (
    AnyStatusEvent,
    Cancelled,
    Completed,
    Failed,
    StepCompleted,
    Submitted,
)
from tether.schemas.work import DeadLetter
from tether.worker.attempts import Outcome

DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 15, 60, 300, 1800)
"""Tool steps take milliseconds; LLM turns seconds to minutes."""


class Metrics:
    """The metrics of one process; `observe` and `dead_lettered` are called by `Store`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._reconnects_counted = False
        r = self.registry
        self.started = Counter(
            "tether_steps_started", "Step attempts started.", ["tool"], registry=r
        )
        self.steps = Counter(
            "tether_steps", "Step attempts ended, by outcome.", ["tool", "outcome"], registry=r
        )
        self.duration = Histogram(
            "tether_step_duration_seconds",
            "Seconds from a step attempt's start to its end.",
            ["tool"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "tether_steps_in_flight", "Step attempts running in this process.", ["tool"], registry=r
        )
        self.dead = Counter("tether_dead_letters", "Dead letters written.", ["tool"], registry=r)
        self.submitted = Counter("tether_tasks_submitted", "Tasks accepted.", registry=r)
        self.finished = Counter(
            "tether_tasks_finished", "Tasks ended, by outcome.", ["outcome"], registry=r
        )
        self.tokens = Counter(
            "tether_llm_tokens", "Model tokens spent, by type.", ["model", "type"], registry=r
        )
        self.pending = Gauge(
            "tether_consumer_pending_messages", "Steps queued for the tool.", ["tool"], registry=r
        )
        self.ack_pending = Gauge(
            "tether_consumer_ack_pending_messages",
            "Steps delivered to workers of the tool and not yet acknowledged.",
            ["tool"],
            registry=r,
        )
        ProcessCollector(registry=r)

    def attempt_started(self, tool: str) -> None:
        self.started.labels(tool).inc()
        self.in_flight.labels(tool).inc()

    def attempt_ended(self, tool: str, outcome: Outcome, seconds: float) -> None:
        self.in_flight.labels(tool).dec()
        self.duration.labels(tool).observe(seconds)
        self.steps.labels(tool, outcome.value).inc()

    def observe(self, event: AnyStatusEvent) -> None:
        """One status event this process emitted (the task's, not an attempt's end)."""
        if isinstance(event, StepCompleted):
            if event.skipped and event.tool is not None:
                self.steps.labels(event.tool, "skipped").inc()
            if event.usage is not None:
                model = event.usage.model or event.tool or ""
                for kind, count in (
                    ("input", event.usage.input_tokens),
                    ("output", event.usage.output_tokens),
                    ("cached", event.usage.cached_tokens),
                ):
                    self.tokens.labels(model, kind).inc(count)
        elif isinstance(event, Failed):
            if event.branch is None:
                self.finished.labels("failed").inc()
        elif isinstance(event, Completed | Cancelled):
            self.finished.labels(event.kind).inc()
        elif isinstance(event, Submitted):
            self.submitted.inc()

    def dead_lettered(self, letter: DeadLetter) -> None:
        self.dead.labels(letter.tool).inc()

    def attach(self, store: Store) -> None:
        """Count what `store` writes, and the reconnects of the first connection attached
        (a dispatcher and the API it serves share one `Metrics`)."""
        store.observer = self
        if self._reconnects_counted:
            return
        stats = store.nc.stats
        self.registry.register(_Reconnects(lambda: int(stats.get("reconnects", 0))))
        self._reconnects_counted = True

    def consumer_state(self, tool: str, pending: int, ack_pending: int) -> None:
        self.pending.labels(tool).set(pending)
        self.ack_pending.labels(tool).set(ack_pending)

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Expose `/metrics` on `host:port` (0: any free port); returns the port."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_port)


class _Reconnects:
    def __init__(self, reconnects: Callable[[], int]) -> None:
        self._reconnects = reconnects

    def collect(self) -> list[CounterMetricFamily]:
        family = CounterMetricFamily("tether_nats_reconnects", "Reconnects to NATS.")
        family.add_metric([], float(self._reconnects()))
        return [family]
