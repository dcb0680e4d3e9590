"""The gateway's pure mappings: tool schemas, task shapes, input requests (no server)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tether.errors import InvalidTaskError
from tether.gateway.inputs import answer, input_key, input_requests, requested_schema
from tether.gateway.tasks import (
    as_created,
    detailed_task,
    legacy_task,
    mcp_status,
    modern_task,
    tool_result,
)
from tether.gateway.tools import input_schema, plan_steps, tool_step
from tether.schemas.plans import StepSpec
from tether.schemas.records import ErrorInfo, InputRequest, TaskRecord, TaskStatus
from tether.schemas.workers import ToolInfo

NOW = datetime(2026, 7, 28, 12, 0, tzinfo=UTC)


def _record(status: TaskStatus, **fields: Any) -> TaskRecord:
    return TaskRecord(
        task_id="t1",
        status=status,
        steps=[StepSpec(tool="asks"), StepSpec(tool="fast")],
        created_at=NOW,
        updated_at=NOW + timedelta(seconds=2),
        **fields,
    )


def test_status_mapping() -> None:
    assert [mcp_status(status) for status in TaskStatus] == [
        "working",
        "working",
        "input_required",
        "completed",
        "failed",
        "cancelled",
    ]


def test_struct_schemas_are_inlined_and_other_inputs_wrapped() -> None:
    struct = {
        "$ref": "#/$defs/Query",
        "$defs": {"Query": {"type": "object", "properties": {"query": {"type": "string"}}}},
    }
    schema, wrapped = input_schema(struct)
    assert not wrapped and schema["type"] == "object" and "query" in schema["properties"]
    assert input_schema({}) == ({"type": "object", "properties": {}}, False)

    listing, wrapped = input_schema(
        {"type": "array", "items": {"$ref": "#/$defs/Hit"}, "$defs": {}}
    )
    assert wrapped and listing["required"] == ["input"] and "$defs" in listing
    assert listing["properties"]["input"] == {"type": "array", "items": {"$ref": "#/$defs/Hit"}}

    info = ToolInfo(name="summarize", input_schema={"type": "array"}, updated_at=NOW)
    assert tool_step(info, {"input": ["a"]}) == StepSpec(tool="summarize", input=["a"])
    with pytest.raises(InvalidTaskError, match="'input'"):
        tool_step(info, {"hits": ["a"]})


def test_run_plan_arguments() -> None:
    steps = plan_steps({"steps": [{"tool": "search", "input": {"query": "q"}}, {"tool": "fast"}]})
    assert [step.tool for step in steps] == ["search", "fast"]
    for bad in ({}, {"steps": []}, {"steps": "search"}, {"steps": [{"input": 1}]}):
        with pytest.raises(InvalidTaskError):
            plan_steps(bad)


def test_task_shapes_of_both_generations() -> None:
    record = _record(TaskStatus.RUNNING, metadata={"mcp": {"ttl_ms": 60_000}})
    legacy = legacy_task(record, 500)
    assert legacy["status"] == "working" and legacy["ttl"] == 60_000
    assert legacy["pollInterval"] == 500 and legacy["createdAt"] == "2026-07-28T12:00:00.000Z"
    assert legacy["lastUpdatedAt"] == "2026-07-28T12:00:02.000Z"
    modern = modern_task(_record(TaskStatus.PENDING), 500)
    assert modern["ttlMs"] is None and modern["pollIntervalMs"] == 500

    done = detailed_task(_record(TaskStatus.COMPLETED, result="ok"), 500)
    assert done["result"] == tool_result("ok")
    assert done["result"]["structuredContent"] == {"result": "ok"}
    error = ErrorInfo(type="TerminalError", message="permission denied")
    failed = detailed_task(_record(TaskStatus.FAILED, error=error, failed_step=1), 500)
    assert failed["status"] == "completed" and "error" not in failed  # SEP-2663: isError result
    assert failed["result"]["isError"] is True
    assert "permission denied" in failed["result"]["content"][0]["text"]
    assert "step 1 (fast)" in failed["statusMessage"]  # from 0, as in "step": 1

    created = legacy_task(as_created(_record(TaskStatus.COMPLETED, result=1)), 500)
    assert created["status"] == "working" and created["lastUpdatedAt"] == created["createdAt"]


@pytest.mark.parametrize(
    ("schema", "content", "expected"),
    [
        ({"type": "object"}, {"approved": True}, {"approved": True}),
        ({"type": "object", "properties": {"n": {"type": "integer"}}}, {"n": 3}, {"n": 3}),
        ({"type": "string"}, {"answer": "yes"}, "yes"),
        ({"type": "array", "items": {"type": "string"}}, {"answer": '["a","b"]'}, ["a", "b"]),
        (  # an object's field that is not primitive is asked as JSON text
            {
                "type": "object",
                "properties": {"ok": {"type": "boolean"}, "args": {"type": "object"}},
            },
            {"ok": True, "args": '{"to": "w"}'},
            {"ok": True, "args": {"to": "w"}},
        ),
    ],
)
def test_input_requests_become_forms_and_answers_come_back(
    schema: dict[str, Any], content: dict[str, Any], expected: Any
) -> None:
    request = InputRequest(prompt="Approve?", schema=schema)
    form = requested_schema(request)
    assert form["type"] == "object" and isinstance(form["properties"], dict)
    assert all("type" in field for field in form["properties"].values())
    assert answer(request, content) == expected

    record = _record(TaskStatus.WAITING, input_request=request, current_step=0, generation=2)
    assert input_key(record) == "step-0-g2"
    [(key, asked)] = input_requests(record).items()
    assert key == "step-0-g2" and asked["method"] == "elicitation/create"
    assert asked["params"] == {"mode": "form", "message": "Approve?", "requestedSchema": form}
