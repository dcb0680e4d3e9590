"""The wire contract with nats-py alone: JSON bytes, subjects, headers, KV, request/reply.

The fixtures run Tether (dispatcher, worker, API); the test bodies know only the NATS
URL, the prefix and schemas/README.md, as a client in another language would.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client as Nats
from nats.aio.subscription import Subscription

from tests.apps.tools import APPROVAL, app
from tests.conftest import MakeWorker

SEED = [
    {"tool": "search", "input": {"query": "AI trends 2026"}},
    {"tool": "summarize"},
    {"tool": "write_report"},
]
HITS = ["agents run for hours", "durable execution matters", "MCP tasks"]
REPORT = {"report": f"# Report\n\n{'; '.join(HITS)}\n", "sources": 3}
# Field names are a contract (DESIGN.md); some events carry one field of their own.
EVENT_FIELDS = {
    "event",
    "task_id",
    "status",
    "generation",
    "step",
    "branch",
    "tool",
    "attempt",
    "time",
    "output",
    "error",
    "build",
}
EVENT_EXTRAS = {
    "step_completed": {"skipped", "wake_at", "usage", "notes"},
    "step_started": {"worker"},
    "step_retrying": {"retry_in_ms"},
    "waiting": {"input_request"},
    "submitted": {"note"},
}
RECORD_FIELDS = {
    "task_id",
    "status",
    "steps",
    "current_step",
    "result",
    "error",
    "metadata",
    "created_at",
    "updated_at",
}
TERMINAL = {"completed", "failed", "cancelled"}
RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
VERBS = ["submit", "get", "result", "list", "cancel", "input", "retry", "fork", "blob", "builds"]
VERBS += ["continue", "message", "update_agent", "deploy"]


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[Nats]:
    conn = await nats.connect(nats_url)
    yield conn
    await conn.close()


def new_id() -> str:
    return f"raw-{uuid.uuid4().hex}"


async def submit(nc: Nats, prefix: str, task_id: str, steps: list[dict[str, Any]]) -> None:
    """Publish a TaskSubmit with JetStream; `Nats-Msg-Id` = task id makes a re-submit a no-op."""
    js = nc.jetstream()
    body = json.dumps({"task_id": task_id, "steps": steps, "metadata": {"user": "alice"}})
    headers = {"Nats-Msg-Id": task_id}
    ack = await js.publish(f"{prefix}.submit.{task_id}", body.encode(), headers=headers)
    assert ack.stream == f"{prefix.upper()}_SUBMIT" and not ack.duplicate
    again = await js.publish(f"{prefix}.submit.{task_id}", body.encode(), headers=headers)
    assert again.duplicate


async def follow(sub: Subscription, until: str, timeout: float = 20) -> list[dict[str, Any]]:
    """Status events from a live subscription up to the first `until` event."""
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        msg = await sub.next_msg(timeout=max(0.01, deadline - time.monotonic()))
        event = json.loads(msg.data)
        events.append(event)
        if event["event"] == until:
            return events
        assert event["event"] not in TERMINAL, f"waited for {until!r}, the task ended: {event}"


async def call(nc: Nats, prefix: str, verb: str, body: dict[str, Any] | bytes) -> Any:
    """A request on `<prefix>.api.<verb>`: the decoded reply, an error reply included."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = await nc.request(f"{prefix}.api.{verb}", data, timeout=10)
    return json.loads(reply.data)


def is_error(reply: Any) -> bool:
    """Records and results have an `error` field too: an error reply has nothing else."""
    return isinstance(reply, dict) and set(reply) == {"error"}


async def call_ok(nc: Nats, prefix: str, verb: str, body: dict[str, Any]) -> Any:
    reply = await call(nc, prefix, verb, body)
    assert not is_error(reply), f"{verb} {body} answered {reply}"
    return reply


async def call_error(nc: Nats, prefix: str, verb: str, body: dict[str, Any] | bytes) -> str:
    """The error code of a request that must fail; its reply has exactly code and message."""
    reply = await call(nc, prefix, verb, body)
    assert is_error(reply) and set(reply["error"]) == {"code", "message"}, reply
    assert reply["error"]["message"], reply
    code: str = reply["error"]["code"]
    return code


async def read_record(nc: Nats, prefix: str, task_id: str) -> dict[str, Any]:
    kv = await nc.jetstream().key_value(f"{prefix}-tasks")
    entry = await kv.get(task_id)
    assert entry.value
    record: dict[str, Any] = json.loads(entry.value)
    return record


def assert_event_shapes(events: list[dict[str, Any]], task_id: str) -> None:
    for event in events:
        assert set(event) == EVENT_FIELDS | EVENT_EXTRAS.get(event["event"], set()), event
        assert event["task_id"] == task_id
        assert RFC3339_UTC.fullmatch(event["time"]), event["time"]


async def test_submit_follow_and_read_the_record(
    nc: Nats, prefix: str, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    task_id = new_id()
    sub = await nc.subscribe(f"{prefix}.status.{task_id}")  # live: subscribe first

    await submit(nc, prefix, task_id, SEED)
    events = await follow(sub, "completed")

    assert [(e["event"], e["step"], e["status"]) for e in events] == [
        ("submitted", None, "pending"),
        ("step_started", 0, "running"),
        ("step_completed", 0, "running"),
        ("step_started", 1, "running"),
        ("step_completed", 1, "running"),
        ("step_started", 2, "running"),
        ("step_completed", 2, "completed"),
        ("completed", None, "completed"),
    ]
    assert_event_shapes(events, task_id)
    assert [e["tool"] for e in events[1:7:2]] == ["search", "summarize", "write_report"]
    assert events[2]["output"] == HITS and events[2]["attempt"] == 1
    assert events[2]["skipped"] is False and events[2]["error"] is None
    assert events[-1]["output"] == REPORT
    record = await read_record(nc, prefix, task_id)
    assert set(record) >= RECORD_FIELDS
    assert record["task_id"] == task_id and record["status"] == "completed"
    # The record keeps the plan from the last completed step on; an omitted input stays
    # omitted.
    assert (record["done_steps"], record["steps"]) == (2, SEED[2:])
    assert record["current_step"] == len(SEED)
    assert record["result"] == REPORT and record["error"] is None
    assert record["metadata"] == {"user": "alice"}
    assert RFC3339_UTC.fullmatch(record["created_at"]) and RFC3339_UTC.fullmatch(
        record["updated_at"]
    )
    assert record["created_at"] <= record["updated_at"]


async def test_a_late_reader_replays_the_status_stream(
    nc: Nats, prefix: str, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    task_id = new_id()
    live = await nc.subscribe(f"{prefix}.status.{task_id}")
    await submit(nc, prefix, task_id, [{"tool": "fast", "input": 1}])
    await follow(live, "completed")

    js = nc.jetstream()
    replay = await js.subscribe(
        f"{prefix}.status.{task_id}", stream=f"{prefix.upper()}_STATUS", ordered_consumer=True
    )
    events = await follow(replay, "completed", timeout=5)
    await replay.unsubscribe()

    assert [e["event"] for e in events] == [
        "submitted",
        "step_started",
        "step_completed",
        "completed",
    ]
    assert events[-1]["output"] == {"step": 0, "payload": 1}


async def test_api_get_and_cancel_by_request_reply(
    nc: Nats, prefix: str, dispatcher: object, make_worker: MakeWorker, api: None
) -> None:
    await make_worker(app)
    done_id, slow_id = new_id(), new_id()
    done = await nc.subscribe(f"{prefix}.status.{done_id}")
    slow = await nc.subscribe(f"{prefix}.status.{slow_id}")
    await submit(nc, prefix, done_id, SEED)
    await follow(done, "completed")

    assert await call_ok(nc, prefix, "get", {"task_id": done_id}) == await read_record(
        nc, prefix, done_id
    )

    await submit(nc, prefix, slow_id, [{"tool": "slow", "input": {"sleep": 30}}])
    await follow(slow, "step_started")
    cancelled = await call_ok(nc, prefix, "cancel", {"task_id": slow_id})
    assert set(cancelled) >= RECORD_FIELDS
    assert cancelled["task_id"] == slow_id and cancelled["status"] == "cancelled"
    (event,) = await follow(slow, "cancelled")
    assert set(event) == EVENT_FIELDS and event["status"] == "cancelled"
    assert (await read_record(nc, prefix, slow_id))["status"] == "cancelled"

    assert await call_error(nc, prefix, "cancel", {"task_id": slow_id}) == "conflict"
    assert await call_error(nc, prefix, "get", {"task_id": "no-such-task"}) == "not_found"
    for bad in (b"not json", {"task_id": "has.a.dot"}, {}):
        assert await call_error(nc, prefix, "get", bad) == "invalid", bad


async def test_api_submit_result_and_list(
    nc: Nats, prefix: str, dispatcher: object, make_worker: MakeWorker, api: None
) -> None:
    await make_worker(app)
    submitted = await call_ok(nc, prefix, "submit", {"steps": [{"tool": "fast", "input": 7}]})
    task_id = submitted["task_id"]

    outcome = await call_ok(nc, prefix, "result", {"task_id": task_id, "timeout_ms": 10_000})

    assert outcome == {
        "task_id": task_id,
        "status": "completed",
        "result": {"step": 0, "payload": 7},
        "error": None,
    }
    listed = await call_ok(nc, prefix, "list", {"status": "completed", "limit": 10})
    assert [t["task_id"] for t in listed["tasks"]] == [task_id]
    assert listed["next_cursor"] is None
    again = {"task_id": task_id, "steps": [{"tool": "fast"}]}
    assert await call_error(nc, prefix, "submit", again) == "already_exists"
    strict = {"steps": [{"tool": "nope"}], "strict": True}
    assert await call_error(nc, prefix, "submit", strict) == "invalid"
    kept = await call_ok(nc, prefix, "submit", {"steps": [{"tool": "nope"}]})  # waits
    waiting = await call_ok(nc, prefix, "get", {"task_id": kept["task_id"]})
    assert waiting["status"] == "pending" and "no worker serves 'nope'" in waiting["note"]


async def test_api_input_resumes_a_waiting_task(
    nc: Nats, prefix: str, dispatcher: object, make_worker: MakeWorker, api: None
) -> None:
    await make_worker(app)
    task_id = new_id()
    sub = await nc.subscribe(f"{prefix}.status.{task_id}")
    await submit(nc, prefix, task_id, [{"tool": "asks", "input": "draft"}, {"tool": "fast"}])
    waiting = (await follow(sub, "waiting"))[-1]
    assert waiting["status"] == "waiting" and waiting["step"] == 0
    request = {"prompt": "Approve the draft?", "schema": APPROVAL, "expires_at": None}
    assert waiting["input_request"] == request

    answered = await call_ok(nc, prefix, "input", {"task_id": task_id, "data": {"approved": True}})

    assert answered["task_id"] == task_id  # resuming is asynchronous: follow the events
    events = await follow(sub, "completed")
    assert_event_shapes([waiting, *events], task_id)
    assert [(e["event"], e["step"]) for e in events] == [
        ("step_completed", 0),
        ("step_started", 1),
        ("step_completed", 1),
        ("completed", None),
    ]
    assert events[0]["output"] == {"approved": True} and events[0]["skipped"] is True
    assert events[-1]["output"] == {"step": 1, "payload": {"approved": True}}
    again = {"task_id": task_id, "data": {"approved": False}}
    assert await call_error(nc, prefix, "input", again) == "conflict"


async def test_api_retry_runs_a_failed_task_again_as_a_new_generation(
    nc: Nats, prefix: str, dispatcher: object, make_worker: MakeWorker, api: None
) -> None:
    await make_worker(app)
    task_id = new_id()
    sub = await nc.subscribe(f"{prefix}.status.{task_id}")
    await submit(nc, prefix, task_id, [{"tool": "fast", "input": 1}, {"tool": "refuses"}])
    failed = (await follow(sub, "failed"))[-1]
    assert failed["step"] == 1 and failed["error"]["type"] == "TerminalError"
    record = await read_record(nc, prefix, task_id)
    assert record["failed_step"] == 1 and record["error"] == failed["error"]

    retried = await call_ok(nc, prefix, "retry", {"task_id": task_id})

    assert retried["status"] == "running" and retried["generation"] == 2
    assert retried["current_step"] == 1 and retried["error"] is None
    events = await follow(sub, "failed")
    assert [(e["event"], e["step"], e["attempt"]) for e in events] == [
        ("step_retrying", 1, None),
        ("step_started", 1, 1),
        ("failed", 1, 1),
    ]
    assert await call_error(nc, prefix, "retry", {"task_id": new_id()}) == "not_found"


async def test_the_api_is_discoverable_with_the_micro_protocol(
    nc: Nats, prefix: str, api: None
) -> None:
    ping = json.loads((await nc.request("$SRV.PING.tether-api", b"", timeout=5)).data)
    assert ping["type"] == "io.nats.micro.v1.ping_response" and ping["name"] == "tether-api"

    info = json.loads((await nc.request(f"$SRV.INFO.tether-api.{ping['id']}", b"")).data)

    assert info["type"] == "io.nats.micro.v1.info_response"
    assert sorted(e["subject"] for e in info["endpoints"]) == sorted(
        f"{prefix}.api.{verb}" for verb in VERBS
    )
