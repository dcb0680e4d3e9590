"""The public JSON shapes of DESIGN.md: field names are a contract for other languages."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from tether.schemas import codec
from tether.schemas.events import (
    AgentUpdated,
    AnyStatusEvent,
    Cancelled,
    Completed,
    Failed,
    MessageSent,
    StatusEvent,
    StepCompleted,
    StepRetrying,
    StepStarted,
    Submitted,
    Waiting,
)
from tether.schemas.plans import RetryOverride, StepSpec, TaskSubmit
from tether.schemas.records import Checkpoint, ErrorInfo, InputRequest, TaskRecord, TaskStatus
from tether.schemas.work import WorkMessage

# Verbatim from DESIGN.md, "The public JSON shapes".
DESIGN_SUBMIT = (
    '{"task_id": "report-42", "steps": [{"tool": "search", "input": {"query": "AI trends 2026"}},'
    ' {"tool": "summarize"}, {"tool": "write_report"}], "metadata": {"user": "alice"},'
    ' "deadline_ms": 600000}'
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

EVENT_KINDS: dict[str, type[StatusEvent]] = {
    "submitted": Submitted,
    "step_started": StepStarted,
    "step_completed": StepCompleted,
    "step_retrying": StepRetrying,
    "waiting": Waiting,
    "message_sent": MessageSent,
    "agent_updated": AgentUpdated,
    "completed": Completed,
    "failed": Failed,
    "cancelled": Cancelled,
}
REQUIRED = {"message_sent": {"text": "Cite the spec."}}
"""Fields a kind cannot do without."""


def _event_json(event: str, status: str) -> bytes:
    doc = {"event": event, "task_id": "t", "status": status, "time": "2026-01-02T03:04:05Z"}
    return json.dumps(doc).encode()


def _as_json(value: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(codec.encode(value))
    return result


# -- TaskSubmit ---------------------------------------------------------------


def test_design_submit_example_decodes() -> None:
    submit = codec.submit_decoder.decode(DESIGN_SUBMIT.encode())
    assert submit == TaskSubmit(
        task_id="report-42",
        steps=[
            StepSpec(tool="search", input={"query": "AI trends 2026"}),
            StepSpec(tool="summarize"),
            StepSpec(tool="write_report"),
        ],
        metadata={"user": "alice"},
        deadline_ms=600000,
    )
    assert submit.steps[1].input is None
    assert submit.steps[2].input is None


def test_design_submit_example_round_trips_with_the_same_field_names() -> None:
    submit = codec.decode(DESIGN_SUBMIT.encode(), TaskSubmit)
    original = json.loads(DESIGN_SUBMIT)
    assert _as_json(submit) == original
    assert set(_as_json(submit)) == {"task_id", "steps", "metadata", "deadline_ms"}


def test_submit_needs_only_task_id_and_steps() -> None:
    submit = codec.submit_decoder.decode(b'{"task_id": "t", "steps": [{"tool": "a"}]}')
    assert submit.metadata == {}
    assert submit.deadline_ms is None


@pytest.mark.parametrize("missing", ["task_id", "steps"])
def test_submit_without_a_required_field_names_it(missing: str) -> None:
    doc = json.loads(DESIGN_SUBMIT)
    del doc[missing]
    with pytest.raises(msgspec.ValidationError, match=f"missing required field `{missing}`"):
        codec.submit_decoder.decode(json.dumps(doc).encode())


def test_step_spec_with_omitted_input_decodes_with_none() -> None:
    assert codec.decode(b'{"tool": "summarize"}', StepSpec) == StepSpec(tool="summarize")
    assert codec.decode(b'{"tool": "summarize"}', StepSpec).input is None
    assert codec.decode(b'{"tool": "summarize", "input": null}', StepSpec).input is None


def test_step_spec_encodes_without_unset_fields() -> None:
    assert _as_json(StepSpec(tool="summarize")) == {"tool": "summarize"}
    spec = StepSpec(tool="llm", input={"p": 1}, timeout_ms=500, retry=RetryOverride(max_attempts=2))
    assert _as_json(spec) == {
        "tool": "llm",
        "input": {"p": 1},
        "timeout_ms": 500,
        "retry": {"max_attempts": 2},
    }
    assert codec.decode(codec.encode(spec), StepSpec) == spec


# -- status events ------------------------------------------------------------


def test_every_design_event_kind_has_a_class() -> None:
    assert set(EVENT_KINDS) == {
        "submitted",
        "step_started",
        "step_completed",
        "step_retrying",
        "waiting",
        "message_sent",
        "agent_updated",
        "completed",
        "failed",
        "cancelled",
    }
    assert set(EVENT_KINDS.values()) == set(AnyStatusEvent.__args__)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("kind", "cls"), list(EVENT_KINDS.items()))
def test_event_encodes_its_kind_and_decodes_to_its_class(kind: str, cls: type[StatusEvent]) -> None:
    event = cls(
        task_id="report-42",
        status=TaskStatus.RUNNING,
        step=1,
        tool="summarize",
        attempt=2,
        time=NOW,
        output={"text": "hi"},
        error=ErrorInfo(type="ValueError", message="boom"),
        **REQUIRED.get(kind, {}),
    )
    data = codec.encode(event)
    doc = json.loads(data)
    assert doc["event"] == kind
    # the DESIGN.md fields, with their exact names
    assert {
        "task_id",
        "event",
        "status",
        "step",
        "tool",
        "attempt",
        "time",
        "output",
        "error",
    } <= set(doc)
    assert doc["status"] == "running"
    assert doc["error"] == {"type": "ValueError", "message": "boom"}
    decoded = codec.event_decoder.decode(data)
    assert type(decoded) is cls
    assert decoded == event


def test_event_time_is_rfc3339_utc() -> None:
    doc = _as_json(Submitted(task_id="t", status=TaskStatus.PENDING, time=NOW))
    assert doc["time"] == "2026-01-02T03:04:05Z"


def test_event_decodes_from_a_foreign_publisher_with_only_required_fields() -> None:
    data = _event_json("failed", "failed")
    event = codec.event_decoder.decode(data)
    assert isinstance(event, Failed)
    assert event.status is TaskStatus.FAILED
    assert event.time == NOW
    assert event.step is None
    assert event.error is None


def test_event_specific_fields_round_trip() -> None:
    retrying = StepRetrying(
        task_id="t", status=TaskStatus.RUNNING, step=0, time=NOW, retry_in_ms=1500
    )
    assert _as_json(retrying)["retry_in_ms"] == 1500
    assert codec.event_decoder.decode(codec.encode(retrying)) == retrying

    waiting = Waiting(
        task_id="t",
        status=TaskStatus.WAITING,
        step=0,
        time=NOW,
        input_request=InputRequest(prompt="Approve?", schema={"type": "boolean"}),
    )
    doc = _as_json(waiting)
    assert doc["input_request"] == {
        "prompt": "Approve?",
        "schema": {"type": "boolean"},
        "expires_at": None,
    }
    assert codec.event_decoder.decode(codec.encode(waiting)) == waiting

    skipped = StepCompleted(task_id="t", status=TaskStatus.RUNNING, time=NOW, skipped=True)
    assert codec.event_decoder.decode(codec.encode(skipped)) == skipped


def test_unknown_event_kind_is_rejected() -> None:
    data = _event_json("exploded", "failed")
    with pytest.raises(msgspec.ValidationError, match="exploded"):
        codec.event_decoder.decode(data)


def test_unknown_status_is_rejected() -> None:
    data = _event_json("failed", "broken")
    with pytest.raises(msgspec.ValidationError, match=r"\$\.status"):
        codec.event_decoder.decode(data)


# -- task record --------------------------------------------------------------


def _record(**changes: Any) -> TaskRecord:
    fields: dict[str, Any] = {
        "task_id": "report-42",
        "status": TaskStatus.RUNNING,
        "steps": [StepSpec(tool="search", input={"q": 1}), StepSpec(tool="summarize")],
        "current_step": 1,
        "metadata": {"user": "alice"},
        "created_at": NOW,
        "updated_at": NOW,
    }
    fields.update(changes)
    return TaskRecord(**fields)


def test_task_record_has_the_design_fields() -> None:
    doc = _as_json(_record())
    assert {
        "task_id",
        "status",
        "steps",
        "current_step",
        "result",
        "error",
        "metadata",
        "created_at",
        "updated_at",
    } <= set(doc)
    assert doc["task_id"] == "report-42"
    assert doc["status"] == "running"
    assert doc["steps"] == [{"tool": "search", "input": {"q": 1}}, {"tool": "summarize"}]
    assert doc["current_step"] == 1
    assert doc["result"] is None
    assert doc["error"] is None
    assert doc["metadata"] == {"user": "alice"}
    assert doc["created_at"] == "2026-01-02T03:04:05Z"


def test_task_record_round_trips() -> None:
    record = _record(
        status=TaskStatus.FAILED,
        error=ErrorInfo(type="TimeoutError", message="deadline exceeded"),
        failed_step=1,
        generation=2,
    )
    assert codec.record_decoder.decode(codec.encode(record)) == record


@pytest.mark.parametrize("status", list(TaskStatus))
def test_task_status_values_are_their_lowercase_names(status: TaskStatus) -> None:
    assert status.value == status.name.lower()
    assert _as_json(_record(status=status))["status"] == status.value


def test_terminal_statuses() -> None:
    terminal = {s for s in TaskStatus if s.is_terminal}
    assert terminal == {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}


# -- other messages -----------------------------------------------------------


def test_work_message_and_checkpoint_round_trip() -> None:
    work = WorkMessage(task_id="t", step=2, tool="llm", input=[1, 2], generation=3)
    assert codec.work_decoder.decode(codec.encode(work)) == work
    checkpoint = Checkpoint(output={"a": 1}, next_steps=[StepSpec(tool="search")], time=NOW)
    assert codec.checkpoint_decoder.decode(codec.encode(checkpoint)) == checkpoint


def test_to_builtins_gives_plain_json_values() -> None:
    built = codec.to_builtins(_record())
    assert built["status"] == "running"
    assert built["steps"][1] == {"tool": "summarize"}
    assert isinstance(built["created_at"], str)


# -- validation errors name the field -----------------------------------------


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"task_id": 42, "steps": []}, "$.task_id"),
        ({"task_id": "t", "steps": [{"tool": "a"}, {"tool": 5}]}, "$.steps[1].tool"),
        ({"task_id": "t", "steps": "search"}, "$.steps"),
        ({"task_id": "t", "steps": [{"tool": "a", "timeout_ms": "10"}]}, "$.steps[0].timeout_ms"),
        (
            {"task_id": "t", "steps": [{"tool": "a", "retry": {"max_attempts": "x"}}]},
            "$.steps[0].retry.max_attempts",
        ),
        ({"task_id": "t", "steps": [], "deadline_ms": "soon"}, "$.deadline_ms"),
        ({"task_id": "t", "steps": [], "metadata": []}, "$.metadata"),
    ],
)
def test_wrong_type_names_the_field_path(doc: dict[str, Any], path: str) -> None:
    with pytest.raises(msgspec.ValidationError) as info:
        codec.decode(json.dumps(doc).encode(), TaskSubmit)
    assert f"`{path}`" in str(info.value)


def test_invalid_json_is_a_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError):
        codec.submit_decoder.decode(b"{not json")
