"""The durable pull consumers Tether's processes share: one per tool, the dispatchers'
two. Workers and dispatchers create them as they start, so creating one is idempotent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from tether.schemas.names import DEFAULT_NAMES, Names


@dataclass(frozen=True)
class ConsumerOptions:
    """A tool's consumer; `max_ack_pending` is the tool's global concurrency limit."""

    ack_wait: timedelta = timedelta(seconds=5)
    max_ack_pending: int = 1000


BUILD_CONSUMER_IDLE = timedelta(hours=1)
"""A build's consumer that no worker pulled from this long is removed by the server (its
steps stay in the stream for the next worker of that build, or a mover)."""


async def ensure_tool_consumer(
    js: JetStreamContext,
    tool: str,
    options: ConsumerOptions,
    names: Names = DEFAULT_NAMES,
    build: str | None = None,
) -> None:
    """Create or update the durable pull consumer every replica serving `tool` shares
    (with `build`: the one of the steps routed to that build)."""
    durable = names.tool_consumer(tool, build)
    config = ConsumerConfig(
        # Named as well as durable, so that the create request's subject carries the name
        # and the filter (`$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`): what a
        # role's permissions can pin (deploy/nats/roles.conf).
        name=durable,
        durable_name=durable,
        filter_subject=names.work_subject(tool, build),
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=options.ack_wait.total_seconds(),
        max_deliver=-1,  # Tether counts attempts itself and dead-letters (see worker).
        max_ack_pending=options.max_ack_pending,
        max_waiting=512,
        inactive_threshold=None if build is None else BUILD_CONSUMER_IDLE.total_seconds(),
    )
    await _ensure_consumer(js, names.work_stream, config)


async def _ensure_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    """Create the consumer, or update it only if a setting we own differs.

    Every worker start calls this; skipping the no-op update keeps replicas from
    disturbing a consumer that others are pulling from.
    """
    assert config.durable_name is not None
    try:
        info = await js.consumer_info(stream, config.durable_name)
    except NotFoundError:
        await js.add_consumer(stream, config)
        return
    current = info.config
    if (
        current.ack_wait != config.ack_wait
        or current.max_ack_pending != config.max_ack_pending
        or current.filter_subject != config.filter_subject
    ):
        await js.add_consumer(stream, config)


async def ensure_timers_consumer(js: JetStreamContext, names: Names = DEFAULT_NAMES) -> None:
    """The dispatchers' consumer of fired timers (wakes, deadlines, input expiries)."""
    config = _dispatchers_consumer(names.timers_consumer, names.fired_subjects)
    await _ensure_consumer(js, names.timers_stream, config)


async def ensure_schedules_consumer(js: JetStreamContext, names: Names = DEFAULT_NAMES) -> None:
    """The dispatchers' consumer of timer requests, on the work stream."""
    config = _dispatchers_consumer(names.schedules_consumer, names.schedule_subject)
    await _ensure_consumer(js, names.work_stream, config)


async def ensure_dispatcher_consumer(js: JetStreamContext, names: Names = DEFAULT_NAMES) -> None:
    config = _dispatchers_consumer(names.dispatcher_consumer, names.submit_subjects)
    await _ensure_consumer(js, names.submit_stream, config)


async def ensure_sessions_consumer(js: JetStreamContext, names: Names = DEFAULT_NAMES) -> None:
    """The dispatchers' consumer of every session's inbox (a message wakes its session)."""
    config = _dispatchers_consumer(names.sessions_consumer, names.session_in_subject("*"))
    await _ensure_consumer(js, names.sessions_stream, config)


def _dispatchers_consumer(durable: str, subject: str) -> ConsumerConfig:
    """A consumer every dispatcher shares; its handling is quick, so a short ack wait."""
    return ConsumerConfig(
        name=durable,  # see `ensure_tool_consumer`
        durable_name=durable,
        filter_subject=subject,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=10.0,
        max_deliver=-1,
        max_ack_pending=1000,
        max_waiting=512,
    )
