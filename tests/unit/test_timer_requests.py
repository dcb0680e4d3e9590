"""What a dispatcher schedules from a timer request: only a well-formed id, time and wake
(the request comes from another role, and its id becomes a subject in TETHER_TIMERS)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tether.nats.schedules import TimerRequest, read_request, request_headers
from tether.schemas.names import DEFAULT_NAMES as NAMES

AT = datetime(2026, 1, 2, 3, 4, 5, 250_000, tzinfo=UTC)


def test_a_request_reads_back_as_it_was_made_its_time_rounded_up() -> None:
    sent = request_headers("t1.1.g2", AT, NAMES.work_subject("fast"))
    assert read_request(NAMES, sent) == TimerRequest(
        "t1.1.g2", "2026-01-02T03:04:06Z", sent["Tether-Wake"]
    )


def test_a_timer_with_no_wake_is_for_the_dispatchers() -> None:
    request = read_request(NAMES, request_headers(NAMES.deadline_timer("t1"), AT, None))
    assert request is not None and request.wake is None and request.timer_id == "t1.deadline"


@pytest.mark.parametrize(
    ("timer_id", "at", "wake"),
    [
        ("t1.>", "2026-01-02T03:04:06Z", None),  # a wildcard: the subject of many
        ("t1..1", "2026-01-02T03:04:06Z", None),  # an empty token
        ("", "2026-01-02T03:04:06Z", None),
        ("t1.1", "tomorrow", None),
        ("t1.1", "2026-01-02T03:04:06+02:00", None),  # not UTC
        ("t1.1", "2026-01-02T03:04:06Z", "tether.work._schedule"),  # not a tool's
        ("t1.1", "2026-01-02T03:04:06Z", "tether.work._timers"),
        ("t1.1", "2026-01-02T03:04:06Z", "tether.status.t1"),  # not work at all
        ("t1.1", "2026-01-02T03:04:06Z", "tether.work.fast.v1.extra"),
        ("t1.1", "2026-01-02T03:04:06Z", "tether.work.*"),
    ],
)
def test_a_malformed_request_schedules_nothing(timer_id: str, at: str, wake: str | None) -> None:
    sent = {"Tether-Timer": timer_id, "Tether-Timer-At": at}
    if wake is not None:
        sent["Tether-Wake"] = wake
    assert read_request(NAMES, sent) is None


def test_a_step_routed_to_a_build_may_be_woken() -> None:
    wake = NAMES.work_subject("fast", "v1.2")
    request = read_request(NAMES, request_headers("t1.1", AT, wake))
    assert request is not None and request.wake == wake
