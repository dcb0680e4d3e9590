"""What the demo says when its model cannot be reached (issue 40, item 1; issue 50, item
6): the step's own error at its first retry (not "the worker died"), the same error
again only counted, the final error once, in one line, and last words that still work
once the demo's server is gone."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tether.demo.retries import again, failed_line, failure_line, retry_line, save_failure
from tether.schemas.events import StepRetrying
from tether.schemas.plans import StepSpec
from tether.schemas.records import ErrorInfo, TaskRecord, TaskStatus

REFUSED = ErrorInfo(
    type="APIConnectionError",
    message="could not connect to http://127.0.0.1:9/v1 (from --base-url): Connection refused",
    traceback='Traceback (most recent call last):\n  File "x.py", line 1, in f\nboom\n',
)


def _record(error: ErrorInfo = REFUSED) -> TaskRecord:
    now = datetime.now(UTC)
    return TaskRecord(
        task_id="t1",
        status=TaskStatus.FAILED,
        steps=[StepSpec(tool="researcher")],
        error=error,
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


def test_the_same_error_again_is_counted_not_said_again() -> None:
    def retried(attempt: int) -> StepRetrying:
        return StepRetrying(
            task_id="t1",
            status=TaskStatus.RUNNING,
            step=0,
            attempt=attempt,
            time=datetime.now(UTC),
            error=REFUSED,
            retry_in_ms=8000,
        )

    first = retry_line(retried(1), 8)
    again_ = retry_line(retried(2), 8, before=REFUSED.message)
    assert "Connection refused" in first
    assert "Connection refused" not in again_ and "(attempt 3 of 8, next in 8 s)" in again_


def test_the_last_words_point_at_a_file_not_at_the_server_that_is_gone(tmp_path: Path) -> None:
    saved = save_failure(tmp_path / "t1-error.md", _record())
    told = failed_line(_record(), True, saved)
    untold = failed_line(_record(), False, saved)

    assert "tether status" not in told + untold and str(saved) in told
    assert "Connection refused" not in told and "Connection refused" in untold
    assert "Connection refused" in saved.read_text() and 'File "x.py"' in saved.read_text()


def test_how_to_retry_on_the_gone_server_becomes_running_the_demo_again(tmp_path: Path) -> None:
    gave_up = ErrorInfo(
        type="ModelUnreachable",
        message="could not connect (8 attempts); once that is mended, retry the task: "
        "'tether dlq retry t1', or Retry on its page in the dashboard",
    )
    line = failure_line(gave_up)
    assert "tether dlq retry" not in line and "dashboard" not in line
    assert line.endswith("(8 attempts); once that is mended, run the demo again")
    saved = save_failure(tmp_path / "t1-error.md", _record(gave_up)).read_text()
    assert "tether dlq retry" not in saved and "run the demo again" in saved
