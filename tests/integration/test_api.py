"""The request/reply API on `<prefix>.api.<verb>`, driven as a client in any language would.

Raw nats-py requests with JSON (or garbage) bodies and JSON replies: every verb's
happy path, typed errors with stable codes, cancel racing completion, replies that
must fit the server's max_payload, `$SRV.*` discovery, and two API replicas sharing
the load through their queue group.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import nats
import nats.errors
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from tests.apps.tools import app
from tests.conftest import MakeWorker, Raw
from tether import Client, NatsConfig
from tether.api import ApiService
from tether.nats.store import Store
from tether.schemas.api import ErrorCode, ListReply, ResultReply, SubmitReply
from tether.schemas.builds import BuildsReply
from tether.schemas.records import TaskRecord, TaskStatus
from tether.testing import eventually, wait_until

T = TypeVar("T")
VERBS = ["submit", "get", "result", "list", "cancel", "input", "retry", "fork"]
TASK_VERBS = ["get", "result", "cancel", "input", "retry", "fork"]
"""The verbs that name one existing task."""
STABLE_CODES = {code.value for code in ErrorCode}
REPLY_TIMEOUT = 5.0
TASK_ID = r"[A-Za-z0-9_-]{1,128}"
FAST = [{"tool": "fast", "input": {"x": 1}}]
FAST_RESULT = {"step": 0, "payload": {"x": 1}}
LONG_ID = "x" * 500


# -- fixtures ------------------------------------------------------------------


@pytest.fixture
async def nc(config: NatsConfig) -> AsyncIterator[NATS]:
    """A plain NATS connection: no Tether code between the test and the wire."""
    conn = await nats.connect(config.url)
    try:
        yield conn
    finally:
        await conn.close()


class Calls:
    """Requests on `<prefix>.api.<verb>` from a raw connection; replies read as JSON."""

    def __init__(self, nc: NATS, config: NatsConfig) -> None:
        self.nc = nc
        self.names = config.names

    async def send(self, verb: str, body: Any, timeout: float = REPLY_TIMEOUT) -> bytes:
        """Bytes go out as they are, anything else as JSON; the raw reply comes back."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            reply = await self.nc.request(self.names.api_subject(verb), data, timeout=timeout)
        except nats.errors.TimeoutError:
            raise AssertionError(f"no reply to {verb} {_short(body)} within {timeout}s") from None
        return reply.data

    async def reply(self, verb: str, body: Any, timeout: float = REPLY_TIMEOUT) -> Any:
        data = await self.send(verb, body, timeout)
        try:
            return json.loads(data)
        except ValueError:
            raise AssertionError(f"{verb} {_short(body)} replied non-JSON {data[:200]!r}") from None

    async def ok(self, verb: str, body: Any, kind: type[T], timeout: float = REPLY_TIMEOUT) -> T:
        """A success reply, decoded (and so shape-checked) as `kind`."""
        data = await self.send(verb, body, timeout)
        value = json.loads(data)
        assert not is_error(value), f"{verb} {_short(body)} -> {value}"
        return msgspec.json.decode(data, type=kind)

    async def fails(self, verb: str, body: Any, timeout: float = REPLY_TIMEOUT) -> tuple[str, str]:
        """An error reply: `{"error": {"code", "message"}}` with a stable code."""
        value = await self.reply(verb, body, timeout)
        return error_of(value, f"{verb} {_short(body)}")

    async def record(self, task_id: str) -> TaskRecord:
        return await self.ok("get", {"task_id": task_id}, TaskRecord)

    async def outcome(self, task_id: str, timeout_ms: int = 15_000) -> ResultReply:
        """`result`, waiting up to `timeout_ms` for the task to end."""
        body = {"task_id": task_id, "timeout_ms": timeout_ms}
        return await self.ok("result", body, ResultReply, timeout=timeout_ms / 1000 + 5)


def is_error(value: Any) -> bool:
    """An error reply has the one key `error` (a record or result has `error` among others)."""
    return isinstance(value, dict) and set(value) == {"error"}


def error_of(value: Any, what: str) -> tuple[str, str]:
    assert isinstance(value, dict) and set(value) == {"error"}, f"{what} -> {value}"
    error = value["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message"}, f"{what} -> {value}"
    assert error["code"] in STABLE_CODES, f"{what}: unknown code in {value}"
    assert isinstance(error["message"], str) and error["message"], f"{what}: empty message"
    return error["code"], error["message"]


def _short(body: Any) -> str:
    text = repr(body)
    return text if len(text) <= 120 else text[:117] + "..."


@pytest.fixture
def calls(nc: NATS, config: NatsConfig, api: ApiService) -> Calls:
    return Calls(nc, config)


async def status_is(calls: Calls, task_id: str, status: TaskStatus) -> TaskRecord:
    record = await calls.record(task_id)
    assert record.status is status, f"task {task_id!r} is {record.status.value}"
    return record


async def valid_task_completes(calls: Calls) -> None:
    """The API still takes a task and the task runs to its result."""
    submitted = await calls.ok("submit", {"steps": FAST}, SubmitReply)
    outcome = await calls.outcome(submitted.task_id)
    assert (outcome.status, outcome.result) == (TaskStatus.COMPLETED, FAST_RESULT)


async def stats(nc: NATS, service: ApiService) -> dict[str, dict[str, Any]]:
    """One instance's `$SRV.STATS` endpoints, by name."""
    reply = await nc.request(f"$SRV.STATS.tether-api.{service.discovery.id}", b"", timeout=2)
    body = json.loads(reply.data)
    assert body["type"] == "io.nats.micro.v1.stats_response"
    return {endpoint["name"]: endpoint for endpoint in body["endpoints"]}


async def drained(raw: Raw, stream: str) -> None:
    info = await raw.js.stream_info(stream)
    assert info.state.messages == 0, f"{info.state.messages} message(s) still on {stream}"


# -- 1. every verb's happy path --------------------------------------------------


async def test_submit_with_and_without_a_task_id_then_get_and_result(
    calls: Calls, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    named = await calls.ok(
        "submit", {"task_id": "named", "steps": FAST, "metadata": {"user": "alice"}}, SubmitReply
    )
    generated = await calls.ok("submit", {"steps": FAST}, SubmitReply)

    assert named.task_id == "named"
    assert re.fullmatch(TASK_ID, generated.task_id) and generated.task_id != "named"
    for task_id in (named.task_id, generated.task_id):
        outcome = await calls.reply("result", {"task_id": task_id, "timeout_ms": 15_000}, 20)
        assert outcome == {
            "task_id": task_id,
            "status": "completed",
            "result": FAST_RESULT,
            "error": None,
        }
        record = await calls.record(task_id)
        assert record.task_id == task_id and record.status is TaskStatus.COMPLETED
        assert [s.tool for s in record.steps] == ["fast"] and record.result == FAST_RESULT
    assert (await calls.record("named")).metadata == {"user": "alice"}
    raw = await calls.reply("get", {"task_id": "named"})
    assert {"task_id", "status", "steps", "current_step", "result", "error", "metadata"} <= set(raw)
    assert {"created_at", "updated_at"} <= set(raw)


async def test_a_task_is_found_as_soon_as_submit_replies(
    calls: Calls, dispatcher: object, make_worker: MakeWorker
) -> None:
    """A `{task_id}` reply means the task exists: `get` right after it must not be not_found."""
    await make_worker(app)
    for n in range(5):
        task_id = f"visible-{n}"
        await calls.ok("submit", {"task_id": task_id, "steps": FAST}, SubmitReply)

        reply = await calls.reply("get", {"task_id": task_id})

        assert not is_error(reply), f"get right after submit of {task_id!r} -> {reply}"
        assert reply["task_id"] == task_id


async def test_result_without_timeout_on_a_running_task_then_cancel_it(
    calls: Calls,
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
) -> None:
    await make_worker(app)
    await calls.ok(
        "submit",
        {"task_id": "slow", "steps": [{"tool": "slow", "input": {"sleep": 30}}, {"tool": "fast"}]},
        SubmitReply,
    )
    await eventually(lambda: status_is(calls, "slow", TaskStatus.RUNNING))

    code, message = await calls.fails("result", {"task_id": "slow"})
    assert code == "timeout" and "'slow' is running" in message and "timeout_ms" in message
    code, message = await calls.fails("result", {"task_id": "slow", "timeout_ms": 200})
    assert code == "timeout" and "did not finish within 0.2s" in message

    cancelled = await calls.ok("cancel", {"task_id": "slow"}, TaskRecord)

    assert cancelled.task_id == "slow" and cancelled.status is TaskStatus.CANCELLED
    outcome = await calls.ok("result", {"task_id": "slow"}, ResultReply)
    assert outcome.status is TaskStatus.CANCELLED and outcome.result is None
    names = store.names

    async def let_go() -> None:
        info = await raw.js.consumer_info(names.work_stream, names.tool_consumer("slow"))
        assert info.num_ack_pending == 0 and info.num_pending == 0, info

    await eventually(let_go, timeout=5)
    record = await calls.record("slow")
    assert record.status is TaskStatus.CANCELLED and record.current_step == 0


async def test_result_of_a_failed_task_carries_the_error(
    calls: Calls, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    await calls.ok("submit", {"task_id": "refused", "steps": [{"tool": "refuses"}]}, SubmitReply)

    outcome = await calls.outcome("refused")

    assert outcome.status is TaskStatus.FAILED and outcome.result is None
    assert outcome.error is not None and "permission denied" in outcome.error.message
    raw = await calls.reply("result", {"task_id": "refused"})
    assert raw["status"] == "failed" and {"type", "message"} <= set(raw["error"])


async def test_list_filters_by_status_and_pages_in_creation_order(
    calls: Calls, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    done = [f"list-{n}" for n in range(5)]
    for task_id in done:
        await calls.ok("submit", {"task_id": task_id, "steps": FAST}, SubmitReply)
    await calls.ok(
        "submit", {"task_id": "list-failed", "steps": [{"tool": "refuses"}]}, SubmitReply
    )
    for task_id in [*done, "list-failed"]:
        assert (await calls.outcome(task_id)).status.is_terminal

    seen: list[TaskRecord] = []
    pages = 0
    body: dict[str, Any] = {"status": "completed", "limit": 2}
    while True:
        page = await calls.ok("list", body, ListReply)
        pages += 1
        assert 1 <= len(page.tasks) <= 2, page
        seen.extend(page.tasks)
        if page.next_cursor is None:
            break
        assert page.next_cursor == page.tasks[-1].task_id
        body = {**body, "cursor": page.next_cursor}

    assert pages == 3
    ids = [record.task_id for record in seen]
    assert ids == done, "each task once, oldest first (each submit replied before the next)"
    assert all(record.status is TaskStatus.COMPLETED for record in seen)
    created = [record.created_at for record in seen]
    assert created == sorted(created), "pages must come oldest first"
    failed = await calls.ok("list", {"status": "failed"}, ListReply)
    assert [r.task_id for r in failed.tasks] == ["list-failed"] and failed.next_cursor is None
    everything = await calls.ok("list", {}, ListReply)
    assert len(everything.tasks) == 6 and everything.next_cursor is None
    exact = await calls.ok("list", {"status": "completed", "limit": 5}, ListReply)
    assert len(exact.tasks) == 5 and exact.next_cursor is None
    assert (await calls.ok("list", {"status": "waiting"}, ListReply)).tasks == []


async def test_input_answers_a_waiting_task_which_then_completes(
    calls: Calls, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    steps = [{"tool": "asks", "input": "draft"}, {"tool": "fast"}]
    await calls.ok("submit", {"task_id": "asking", "steps": steps}, SubmitReply)
    waiting = await eventually(lambda: status_is(calls, "asking", TaskStatus.WAITING))
    assert waiting.input_request is not None
    assert waiting.input_request.prompt == "Approve the draft?"

    code, message = await calls.fails("input", {"task_id": "asking", "data": {"approved": 1}})
    assert code == "invalid" and "$.approved: 1 is not of type 'boolean'" in message
    answered = await calls.ok(
        "input", {"task_id": "asking", "data": {"approved": True}}, TaskRecord
    )

    assert answered.task_id == "asking"
    outcome = await calls.outcome("asking")
    assert outcome.status is TaskStatus.COMPLETED
    assert outcome.result == {"step": 1, "payload": {"approved": True}}
    code, message = await calls.fails("input", {"task_id": "asking", "data": {"again": 1}})
    assert code == "conflict" and "not waiting" in message


async def test_retry_runs_a_failed_task_again_from_its_failed_step(
    calls: Calls,
    dispatcher: object,
    make_worker: MakeWorker,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await make_worker(app)
    gate = tmp_path / "gate"
    monkeypatch.setenv("TETHER_TEST_GATE", str(gate))
    steps = [{"tool": "fast", "input": 1}, {"tool": "gated"}, {"tool": "fast"}]
    await calls.ok("submit", {"task_id": "gated", "steps": steps}, SubmitReply)
    failed = await calls.outcome("gated")
    assert failed.status is TaskStatus.FAILED
    assert failed.error is not None and "the gate is closed" in failed.error.message
    gate.touch()

    retried = await calls.ok("retry", {"task_id": "gated"}, TaskRecord)

    assert retried.task_id == "gated" and retried.status is TaskStatus.RUNNING
    assert retried.current_step == 1 and retried.generation == 2
    outcome = await calls.outcome("gated")
    assert outcome.status is TaskStatus.COMPLETED and outcome.error is None
    assert outcome.result == {
        "step": 2,
        "payload": {"passed": True, "input": {"step": 0, "payload": 1}},
    }


# -- 2. typed errors with stable codes -------------------------------------------


async def test_an_unknown_task_is_not_found_on_every_verb(calls: Calls) -> None:
    for verb in TASK_VERBS:
        code, message = await calls.fails(verb, {"task_id": "ghost"})
        assert code == "not_found", (verb, code, message)
        assert "'ghost' not found" in message, (verb, message)


async def test_waiting_for_the_result_of_an_unknown_task_is_not_found(calls: Calls) -> None:
    """With timeout_ms, a task that does not exist is still not_found, not a timeout."""
    code, message = await calls.fails("result", {"task_id": "ghost", "timeout_ms": 300})

    assert (code, "'ghost'" in message) == ("not_found", True), message


def _bad_ids(verb: str) -> list[tuple[Any, str]]:
    """Bodies naming an unusable task id, and the words the message must contain."""
    extra = {"steps": FAST} if verb == "submit" else {}
    return [
        ({"task_id": "a.b", **extra}, "'a.b' is not a valid id"),
        ({"task_id": "a*", **extra}, "'a*' is not a valid id"),
        ({"task_id": "a>b", **extra}, "'a>b' is not a valid id"),
        ({"task_id": "a b", **extra}, "'a b' is not a valid id"),
        ({"task_id": LONG_ID, **extra}, "is 500 characters long: the limit is 128"),
        ({"task_id": "", **extra}, "task id is empty"),
    ]


def invalid_bodies(verb: str) -> list[tuple[Any, str]]:
    """(body, expected words in the message) that `verb` must answer with `invalid`."""
    common: list[tuple[Any, str]] = [
        (b"this is not json {", f"invalid {verb} request: JSON is malformed"),
        (b"\xff\xfe\x00\x01", f"invalid {verb} request: JSON is malformed"),
        (b"", f"invalid {verb} request"),
        ([], f"invalid {verb} request: Expected `object`, got `array`"),
        ("get", f"invalid {verb} request: Expected `object`, got `str`"),
    ]
    if verb == "list":
        return [
            *common,
            ({"limit": "2"}, "Expected `int`, got `str` - at `$.limit`"),
            ({"status": 5}, "at `$.status`"),
            ({"status": "bogus"}, "Invalid enum value 'bogus' - at `$.status`"),
            ({"cursor": 5}, "at `$.cursor`"),
            ({"limit": 0}, "limit must be between 1 and 1000"),
            ({"limit": 1001}, "limit must be between 1 and 1000"),
            ({"cursor": "no-such-task"}, "unknown cursor 'no-such-task'"),
            ({"cursor": "a.b"}, "unknown cursor 'a.b'"),
        ]
    if verb == "submit":
        return [
            *common,
            ({}, "missing required field `steps`"),
            ({"task_id": 5, "steps": FAST}, "got `int` - at `$.task_id`"),
            ({"steps": "fast"}, "Expected `array`, got `str` - at `$.steps`"),
            ({"steps": [{"tool": 5}]}, "got `int` - at `$.steps[0].tool`"),
            ({"steps": [5]}, "Expected `object`, got `int` - at `$.steps[0]`"),
            ({"steps": FAST, "metadata": [1]}, "at `$.metadata`"),
            ({"steps": FAST, "deadline_ms": "soon"}, "at `$.deadline_ms`"),
            ({"steps": FAST, "deadline_ms": -1}, "deadline_ms must be between"),
            ({"steps": [{"tool": "fa.st"}]}, "tool name 'fa.st' is not valid"),
            ({"steps": [{"tool": "fast", "timeout_ms": 0}]}, "timeout_ms must be positive"),
            ({"task_id": "unknown", "steps": [{"tool": "nope"}], "strict": True}, "unknown tool"),
            ({"task_id": "empty", "steps": []}, "'empty' has no steps"),
            (
                {"task_id": "huge-plan", "steps": [{"tool": "fast"}] * 10_000},
                "has 10000 steps; the limit is 1000",
            ),
            *_bad_ids(verb),
        ]
    own = {"result": ({"task_id": "x", "timeout_ms": "1s"}, "at `$.timeout_ms`")}
    return [
        *common,
        ({}, "missing required field `task_id`"),
        ({"task_id": 5}, "Expected `str`, got `int` - at `$.task_id`"),
        ({"task_id": None}, "Expected `str`, got `null` - at `$.task_id`"),
        ({"task_id": ["a"]}, "got `array` - at `$.task_id`"),
        *([own[verb]] if verb in own else []),
        *_bad_ids(verb),
    ]


async def test_invalid_requests_get_invalid_with_a_message_naming_the_problem(
    calls: Calls,
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
) -> None:
    await make_worker(app)
    for verb in VERBS:
        for body, expected in invalid_bodies(verb):
            code, message = await calls.fails(verb, body)
            assert code == "invalid", (verb, _short(body), code, message)
            assert expected in message, (verb, _short(body), message)

    info = await raw.js.stream_info(store.names.submit_stream)
    assert info.state.last_seq == 0, "an invalid submit must not be published"
    assert await client.list() == []
    await valid_task_completes(calls)


async def test_deeply_nested_json_is_invalid_not_an_internal_error(
    calls: Calls, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    deep = "[" * 5000 + "]" * 5000
    bodies = {
        "submit": '{"steps": [{"tool": "fast", "input": %s}]}',
        "get": '{"task_id": "x", "extra": %s}',
        "result": '{"task_id": "x", "extra": %s}',
        "list": '{"extra": %s}',
        "cancel": '{"task_id": "x", "extra": %s}',
        "input": '{"task_id": "x", "data": %s}',
        "retry": '{"task_id": "x", "extra": %s}',
        "fork": '{"task_id": "x", "input": %s}',
        "continue": '{"task_id": "x", "input": %s}',
    }
    codes = {}
    for verb, body in bodies.items():
        codes[verb] = await calls.fails(verb, (body % deep).encode())

    found = {verb: code for verb, (code, _) in codes.items()}
    assert found == dict.fromkeys(bodies, "invalid"), codes
    await valid_task_completes(calls)


async def test_conflicts_and_duplicates(
    calls: Calls, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    await calls.ok("submit", {"task_id": "done", "steps": FAST}, SubmitReply)
    assert (await calls.outcome("done")).status is TaskStatus.COMPLETED
    before = await calls.record("done")

    code, message = await calls.fails("cancel", {"task_id": "done"})
    assert code == "conflict" and "'done' is already completed" in message
    code, message = await calls.fails("input", {"task_id": "done", "data": 1})
    assert code == "conflict" and "'done' is completed, not waiting for input" in message
    code, message = await calls.fails("retry", {"task_id": "done"})
    assert code == "conflict" and "only a task that failed" in message
    code, message = await calls.fails(
        "submit", {"task_id": "done", "steps": [{"tool": "fast", "input": 2}]}
    )
    assert code == "already_exists" and "'done' already exists" in message
    assert await calls.record("done") == before

    # A duplicate in quick succession, while the first is still running.
    first = await calls.reply("submit", {"task_id": "twice", "steps": FAST})
    second = await calls.reply("submit", {"task_id": "twice", "steps": FAST})
    assert first == {"task_id": "twice"}
    assert error_of(second, "second submit")[0] == "already_exists"
    assert (await calls.outcome("twice")).result == FAST_RESULT


async def test_a_request_over_max_payload_cannot_be_sent_and_the_service_keeps_answering(
    nc: NATS, calls: Calls, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    body = b'{"task_id": "' + b"x" * nc.max_payload + b'"}'

    for verb in VERBS:
        with pytest.raises(nats.errors.MaxPayloadError):
            await nc.request(calls.names.api_subject(verb), body, timeout=2)

    assert (await calls.fails("get", {"task_id": "ghost"}))[0] == "not_found"
    await valid_task_completes(calls)


async def test_a_list_reply_never_exceeds_max_payload(
    calls: Calls, client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    """Three records of ~600 kB each: a page must fit in one message, the cursor gets the rest."""
    await make_worker(app)
    big = "x" * 300_000
    for n in range(3):
        handle = await client.submit([{"tool": "fast", "input": big}], task_id=f"big-{n}")
        await handle.wait(timeout=15)

    seen: list[str] = []
    body: dict[str, Any] = {}
    for _ in range(4):
        data = await calls.send("list", body, timeout=3)
        assert len(data) <= calls.nc.max_payload
        page = msgspec.json.decode(data, type=ListReply)
        seen.extend(record.task_id for record in page.tasks)
        if page.next_cursor is None:
            break
        body = {"cursor": page.next_cursor}
    assert seen == ["big-0", "big-1", "big-2"]


async def test_a_long_result_wait_does_not_hold_up_other_requests(
    nc: NATS, api: ApiService, calls: Calls, dispatcher: object, make_worker: MakeWorker
) -> None:
    """A client waiting on `result` must not make every other `result` caller wait."""
    await make_worker(app)
    await calls.ok("submit", {"task_id": "waits", "steps": [{"tool": "asks"}]}, SubmitReply)
    await calls.ok("submit", {"task_id": "quick", "steps": FAST}, SubmitReply)
    await eventually(lambda: status_is(calls, "waits", TaskStatus.WAITING))
    await eventually(lambda: status_is(calls, "quick", TaskStatus.COMPLETED))
    before: int = (await stats(nc, api))["result"]["num_requests"]
    long_wait = asyncio.create_task(
        calls.fails("result", {"task_id": "waits", "timeout_ms": 3000}, timeout=8)
    )

    async def waiting_started() -> bool:
        started: int = (await stats(nc, api))["result"]["num_requests"]
        return started > before

    await wait_until(waiting_started, message="the long result wait reached the service")
    try:
        quick = await calls.ok("result", {"task_id": "quick"}, ResultReply, timeout=1.5)
        still_waiting = not long_wait.done()
    finally:
        code, _ = await long_wait

    assert quick.status is TaskStatus.COMPLETED and quick.result == FAST_RESULT
    assert still_waiting and code == "timeout"


# -- 3. cancel racing completion ---------------------------------------------------


async def test_cancel_racing_completion_leaves_each_task_in_one_consistent_end(
    calls: Calls,
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
) -> None:
    await make_worker(app)
    ids = [f"race-{n}" for n in range(20)]

    async def submit_then_cancel(task_id: str) -> Any:
        await calls.ok("submit", {"task_id": task_id, "steps": FAST}, SubmitReply)
        return await calls.reply("cancel", {"task_id": task_id})

    replies = dict(zip(ids, await asyncio.gather(*map(submit_then_cancel, ids)), strict=True))

    # Every task ends (none is stuck), whatever its cancel reply said.
    ends = {task_id: (await calls.outcome(task_id)).status.value for task_id in ids}
    names = store.names
    await eventually(lambda: drained(raw, names.submit_stream))
    await eventually(lambda: drained(raw, names.work_stream))

    pairs = {
        task_id: (cancel_reply(task_id, reply), ends[task_id]) for task_id, reply in replies.items()
    }
    consistent = {("cancelled", "cancelled"), ("conflict", "completed")}
    wrong = {task_id: pair for task_id, pair in pairs.items() if pair not in consistent}
    assert not wrong, f"(cancel reply, end state) not consistent: {wrong}"
    later = {r.task_id: r.status.value for r in await client.list()}
    assert later == ends, "a task changed after it ended"


def cancel_reply(task_id: str, reply: Any) -> str:
    """`cancelled` for the cancelled record, else the error code (a conflict must say why)."""
    if is_error(reply):
        code, message = error_of(reply, f"cancel {task_id}")
        if code == "conflict":
            assert f"{task_id!r} is already completed" in message, message
        return code
    record = msgspec.json.decode(json.dumps(reply), type=TaskRecord)
    assert record.task_id == task_id, reply
    return record.status.value


# -- 5. discovery ------------------------------------------------------------------


async def test_discovery_ping_info_and_stats(
    nc: NATS, api: ApiService, calls: Calls, config: NatsConfig
) -> None:
    for subject in (
        "$SRV.PING",
        "$SRV.PING.tether-api",
        f"$SRV.PING.tether-api.{api.discovery.id}",
    ):
        ping = json.loads((await nc.request(subject, b"", timeout=2)).data)
        assert ping["type"] == "io.nats.micro.v1.ping_response", subject
        assert ping["name"] == "tether-api" and ping["id"] == api.discovery.id, subject
        assert ping["version"]

    info = json.loads((await nc.request("$SRV.INFO.tether-api", b"", timeout=2)).data)
    assert info["type"] == "io.nats.micro.v1.info_response" and info["name"] == "tether-api"
    endpoints = {e["name"]: (e["subject"], e["queue_group"]) for e in info["endpoints"]}
    # `blob` takes a reference, not a task (test_blobs.py); the agent verbs need an agent
    every = [*VERBS, "blob", "builds", "deploy", "continue", "message", "update_agent"]
    assert endpoints == {verb: (config.names.api_subject(verb), "tether-api") for verb in every}

    before = (await stats(nc, api))["get"]
    await calls.fails("get", {"task_id": "ghost"})
    await calls.fails("get", b"not json")
    await calls.fails("get", {"task_id": "a.b"})
    after = (await stats(nc, api))["get"]

    assert after["subject"] == config.names.api_subject("get")
    assert after["num_requests"] == before["num_requests"] + 3
    assert after["num_errors"] == before["num_errors"] + 3
    assert "'a.b' is not a valid id" in after["last_error"]


# -- 6. two replicas share the load ------------------------------------------------


async def test_two_api_instances_answer_each_request_exactly_once(
    nc: NATS, api: ApiService, config: NatsConfig
) -> None:
    replies: list[Msg] = []

    async def received(msg: Msg) -> None:
        replies.append(msg)

    async with ApiService(config) as second:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox, cb=received)
        try:
            for n in range(20):
                body = json.dumps({"task_id": f"ghost-{n}"}).encode()
                await nc.publish(config.names.api_subject("get"), body, reply=inbox)
            await wait_until(lambda: len(replies) >= 20, message="20 replies")
            counts = [
                (await stats(nc, service))["get"]["num_requests"] for service in (api, second)
            ]
            await nc.flush()
        finally:
            await sub.unsubscribe()

    answered: Counter[str] = Counter()
    for msg in replies:
        code, message = error_of(json.loads(msg.data), "get")
        found = re.search(r"'(ghost-\d+)' not found", message)
        assert code == "not_found" and found, message
        answered[found.group(1)] += 1
    assert answered == Counter({f"ghost-{n}": 1 for n in range(20)})
    assert sum(counts) == 20 and all(counts), f"requests per instance: {counts}"


# -- fuzzing --------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
usable_ids = st.sampled_from(["fuzz-a", "fuzz-b"]) | st.from_regex(
    r"[A-Za-z0-9_-]{1,12}", fullmatch=True
)
task_ids = st.one_of(usable_ids, usable_ids, usable_ids, st.text(max_size=20), json_values)
good_steps = st.lists(
    st.fixed_dictionaries({"tool": st.just("fast")}, optional={"input": json_values}),
    min_size=1,
    max_size=3,
)
messy_steps = st.lists(
    st.fixed_dictionaries(
        {"tool": st.sampled_from(["fast", "nope", "", "a.b"]) | json_values},
        optional={"input": json_values, "timeout_ms": json_values},
    ),
    max_size=3,
)
task_shaped = st.fixed_dictionaries(
    {"task_id": task_ids},
    optional={"data": json_values, "timeout_ms": json_values, "steps": json_values},
)
metadata = st.dictionaries(st.text(max_size=8), json_values, max_size=3)
deadlines = st.integers(-5, 10**6)
submit_shaped = st.fixed_dictionaries(
    {"steps": st.one_of(good_steps, good_steps, messy_steps, json_values)},
    optional={
        "task_id": task_ids,
        "metadata": st.one_of(metadata, metadata, json_values),
        "deadline_ms": st.one_of(deadlines, deadlines, json_values),
    },
)
list_shaped = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from([s.value for s in TaskStatus]) | json_values,
        "limit": st.integers(-5, 2000) | json_values,
        "cursor": task_ids,
    },
)


def bodies(verb: str) -> st.SearchStrategy[Any]:
    """Raw bytes, any JSON, or near misses of the verb's own shape (drawn more often)."""
    shaped = {"list": list_shaped, "submit": submit_shaped}.get(verb, task_shaped)
    return st.one_of(st.binary(max_size=200), json_values, shaped, shaped, shaped)


FUZZED = {
    "submit": SubmitReply,
    "get": TaskRecord,
    "list": ListReply,
    "cancel": TaskRecord,
    "input": TaskRecord,
    "retry": TaskRecord,
    "fork": TaskRecord,
    "continue": SubmitReply,
}
"""Every verb but `result`, whose timeout_ms would make the fuzzer wait, with its reply."""


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(request=st.sampled_from(sorted(FUZZED)).flatmap(lambda v: st.tuples(st.just(v), bodies(v))))
async def test_generated_requests_get_a_success_or_a_typed_error(
    calls: Calls, dispatcher: object, make_worker: MakeWorker, request: tuple[str, Any]
) -> None:
    await make_worker(app)
    verb, body = request
    data = await calls.send(verb, body)

    value = json.loads(data)  # always JSON
    if is_error(value):
        code, _ = error_of(value, f"{verb} {_short(body)}")
        assert code != ErrorCode.INTERNAL.value, f"{verb} {_short(body)} -> {value}"
        event(f"{verb}: {code}")
    else:
        msgspec.json.decode(data, type=FUZZED[verb])
        event(f"{verb}: success")


async def test_builds_lists_the_builds_and_refuses_a_change_it_cannot_make(
    calls: Calls, make_worker: MakeWorker
) -> None:
    worker = await make_worker(app)
    listed = await calls.ok("builds", {}, BuildsReply)
    assert [row.build for row in listed.builds] == [worker.build]
    assert listed.builds[0].workers == 1 and listed.builds[0].state == "current"
    code, message = await calls.fails("builds", {"action": "promote", "build": worker.build})
    assert code == "invalid" and ".api.deploy (the operator's)" in message
    code, message = await calls.fails("deploy", {"action": "promote", "build": "v9"})
    assert code == "conflict" and "no worker has announced build 'v9'" in message
    code, message = await calls.fails("deploy", {"action": "ramp"})
    assert code == "invalid" and "`build`" in message
    code, _ = await calls.fails("deploy", {"action": "ramp", "build": worker.build, "percent": 150})
    assert code == "invalid"
    ramped = await calls.ok(
        "deploy", {"action": "ramp", "build": worker.build, "percent": 5}, BuildsReply
    )
    assert ramped.deployment.ramp == worker.build and ramped.deployment.percent == 5
