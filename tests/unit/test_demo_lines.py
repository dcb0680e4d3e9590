"""What the demo says when its model cannot be reached (issue 40, item 1): each retry with
the step's own error (not "the worker died"), and the final error once, in one line."""

from __future__ import annotations

from datetime import UTC, datetime

from tether.demo.retries import again, failure_line, retry_line
from tether.demo.story import _failed
from tether.schemas.events import StepRetrying
from tether.schemas.plans import StepSpec
from tether.schemas.records import ErrorInfo, TaskRecord, TaskStatus

REFUSED = ErrorInfo(
    type="APIConnectionError",
    message="could not connect to http://127.0.0.1:9/v1 (from --base-url): Connection refused",
    traceback='Traceback (most recent call last):\n  File "x.py", line 1, in f\nboom\n',
)


def _record() -> TaskRecord:
    now = datetime.now(UTC)
    return TaskRecord(
        task_id="t1",
        status=TaskStatus.FAILED,
        steps=[StepSpec(tool="researcher")],
        error=REFUSED,
        created_at=now,
        updated_at=now,
    )


def test_a_retry_says_the_steps_own_error_and_when_it_runs_next() -> None:
    event = StepRetrying(
        task_id="t1",
        status=TaskStatus.RUNNING,
        step=0,
        attempt=1,
        time=datetime.now(UTC),
        error=REFUSED,
        retry_in_ms=4000,
    )
    line = retry_line(event, 8)
    assert "Connection refused" in line and "(from --base-url)" in line
    assert "attempt 2 of 8, next in 4 s" in line
    assert again(retried=True, killed=True) == ""  # its failure was told: no "worker died"


def test_the_final_error_is_one_line_without_its_traceback() -> None:
    line = failure_line(REFUSED)
    assert line.startswith("APIConnectionError: could not connect")
    assert "\n" not in line and "Traceback" not in line and "ErrorInfo(" not in line


def test_a_failure_told_as_it_happened_is_not_told_again_at_the_end() -> None:
    assert "Connection refused" not in _failed(_record(), told=True)
    assert "tether status t1" in _failed(_record(), told=True)
    assert _failed(_record(), told=False) == failure_line(REFUSED)
