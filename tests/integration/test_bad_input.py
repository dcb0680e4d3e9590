"""Bad input gets a clear error and loses nothing; valid tasks keep running afterwards.

Malformed submissions published raw on `tether.submit` (any language can do that),
submissions the Python client must refuse before publishing, duplicate submissions,
and work messages injected straight onto a tool's work subject.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from nats.aio.msg import Msg
from nats.js.api import Header

from tests.apps.tools import app, read_executions
from tests.conftest import MakeWorker, Raw, inline_only
from tether import (
    Client,
    InvalidTaskError,
    NatsConfig,
    TaskExistsError,
    TaskFailedError,
    TaskNotFoundError,
)
from tether.nats.store import Store
from tether.schemas import DeadLetter, Failed, InvalidNameError, TaskRecord, TaskStatus
from tether.schemas.names import SUBMIT_DEAD_LETTER, Names
from tether.tasks.plans import task_id_of
from tether.testing import eventually

VALID = [{"tool": "fast", "input": {"x": 1}}]
VALID_RESULT = {"step": 0, "payload": {"x": 1}}
TASK_ID = r"[A-Za-z0-9_-]{1,128}"


@pytest.fixture
async def client(config: NatsConfig) -> AsyncIterator[Client]:
    async with Client(config, layout=inline_only(config)) as c:
        yield c


# -- helpers -------------------------------------------------------------------


class DeadLetters:
    """Every dead letter on one tool's subject, collected as it arrives (ordered consumer)."""

    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []

    async def received(self, msg: Msg) -> None:
        self.letters.append(msgspec.json.decode(msg.data, type=DeadLetter))

    def of(self, data: bytes) -> list[DeadLetter]:
        return [letter for letter in self.letters if letter.data == data]

    async def for_task(self, task_id: str) -> DeadLetter:
        letters = [letter for letter in self.letters if letter.task_id == task_id]
        assert len(letters) == 1, f"{len(letters)} dead letters for task {task_id!r}"
        return letters[0]

    async def one_of(self, data: bytes) -> DeadLetter:
        """The dead letter of the message whose payload was `data` (for `eventually`)."""
        letters = self.of(data)
        assert letters, f"no dead letter for {data[:80]!r}"
        assert len(letters) == 1, f"{len(letters)} dead letters for {data[:80]!r}"
        return letters[0]


@contextlib.asynccontextmanager
async def dead_letters(raw: Raw, names: Names, tool: str) -> AsyncIterator[DeadLetters]:
    box = DeadLetters()
    subject = names.dead_letter_subject(tool)
    sub = await raw.js.subscribe(subject, ordered_consumer=True, cb=box.received)
    try:
        yield box
    finally:
        await sub.unsubscribe()


def submit_subject(names: Names, data: bytes) -> str:
    """Where a sender puts `data`: on its own task id's subject, when it has a usable one."""
    return names.submit_subject(task_id_of(data) or "unnamed")


async def publish_submit(raw: Raw, names: Names, data: bytes, msg_id: str | None = None) -> int:
    """Publish raw bytes on the submit subject, as a client in any language could."""
    headers = {Header.MSG_ID: msg_id} if msg_id is not None else None
    ack = await raw.js.publish(submit_subject(names, data), data, headers=headers)
    return ack.seq


async def find_record(client: Client, task_id: str) -> TaskRecord:
    try:
        return await client.get(task_id)
    except TaskNotFoundError:
        raise AssertionError(f"no record for task {task_id!r} yet") from None


async def failed_record(client: Client, task_id: str) -> TaskRecord:
    record = await find_record(client, task_id)
    assert record.status is TaskStatus.FAILED, f"task {task_id!r} is {record.status.value}"
    return record


async def backlog(raw: Raw, stream: str) -> int:
    info = await raw.js.stream_info(stream)
    return info.state.messages


async def drained(raw: Raw, stream: str) -> None:
    """Every message on `stream` has been settled (acked or terminated): nothing is stuck."""
    left = await backlog(raw, stream)
    assert left == 0, f"{left} message(s) still on {stream}"


async def events_of(client: Client, task_id: str) -> list[Any]:
    return [event async for event in client.handle(task_id).events(timeout=5)]


async def assert_rejected_with_failed_task(
    client: Client, task_id: str, expected: str, letter: DeadLetter
) -> None:
    """A usable id: the sender finds a failed record and a `failed` event saying why."""
    record = await eventually(lambda: failed_record(client, task_id))
    assert record.error is not None
    assert expected in record.error.message, record.error.message
    assert record.error.message == letter.error.message
    events = await events_of(client, task_id)
    assert isinstance(events[-1], Failed), events
    assert events[-1].error is not None and expected in events[-1].error.message


async def valid_task_completes(client: Client, task_id: str | None = None) -> None:
    handle = await client.submit(VALID, task_id=task_id)
    assert await handle.wait(timeout=15) == VALID_RESULT


def submission(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


# -- 1. malformed submissions published raw ------------------------------------


@dataclass(frozen=True)
class Bad:
    name: str
    data: bytes
    task_id: str | None
    """The id the rejection is recorded under; None when the id is unusable."""
    expected: str
    """A substring the error message must contain."""


LONG_ID = "x" * 500
BAD_SUBMISSIONS = [
    Bad("not-json", b"this is not json {", None, "JSON is malformed"),
    Bad("binary", b"\xff\xfe\x00\x01", None, "JSON is malformed"),
    Bad("json-list", json.dumps(VALID).encode(), None, "Expected `object`, got `array`"),
    Bad("json-string", b'"fast"', None, "Expected `object`, got `str`"),
    Bad(
        "steps-is-a-string",
        submission(task_id="steps-str", steps="fast"),
        "steps-str",
        "Expected `array`, got `str` - at `$.steps`",
    ),
    Bad(
        "steps-missing",
        submission(task_id="no-steps"),
        "no-steps",
        "missing required field `steps`",
    ),
    Bad("task-id-missing", submission(steps=VALID), None, "missing required field `task_id`"),
    Bad(
        "tool-is-a-number",
        submission(task_id="tool-int", steps=[{"tool": 5}]),
        "tool-int",
        "got `int` - at `$.steps[0].tool`",
    ),
    Bad(
        "step-is-a-number",
        submission(task_id="step-int", steps=[5]),
        "step-int",
        "Expected `object`, got `int` - at `$.steps[0]`",
    ),
    Bad(
        "metadata-is-a-list",
        submission(task_id="meta-list", steps=VALID, metadata=[1]),
        "meta-list",
        "at `$.metadata`",
    ),
    Bad("empty-plan", submission(task_id="empty-plan", steps=[]), "empty-plan", "has no steps"),
    Bad("id-with-dot", submission(task_id="a.b", steps=VALID), None, "not a valid id"),
    Bad("id-with-star", submission(task_id="a*", steps=VALID), None, "not a valid id"),
    Bad("id-with-gt", submission(task_id="a>b", steps=VALID), None, "not a valid id"),
    Bad("id-with-space", submission(task_id="a b", steps=VALID), None, "not a valid id"),
    Bad("id-empty", submission(task_id="", steps=VALID), None, "task id is empty"),
    Bad("id-500-chars", submission(task_id=LONG_ID, steps=VALID), None, "is 500 characters long"),
    Bad(
        "id-is-a-number",
        submission(task_id=42, steps=VALID),
        None,
        "Expected `str`, got `int` - at `$.task_id`",
    ),
    Bad(
        "tool-name-invalid",
        submission(task_id="tool-dot", steps=[{"tool": "fa.st"}]),
        "tool-dot",
        "tool name 'fa.st' is not valid",
    ),
    Bad(
        "unknown-tool-strict",  # without `strict` the task waits for a worker instead
        submission(task_id="unknown-tool", steps=[{"tool": "nope"}], strict=True),
        "unknown-tool",
        "unknown tool 'nope'",
    ),
    Bad(
        "zero-timeout",
        submission(task_id="zero-timeout", steps=[{"tool": "fast", "timeout_ms": 0}]),
        "zero-timeout",
        "timeout_ms must be positive",
    ),
    Bad(
        "negative-deadline",
        submission(task_id="neg-deadline", steps=VALID, deadline_ms=-1),
        "neg-deadline",
        "deadline_ms must be between",
    ),
]


async def test_bad_submissions_get_clear_errors_and_the_dispatcher_keeps_serving(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    async with dead_letters(raw, names, SUBMIT_DEAD_LETTER) as box:
        for bad in BAD_SUBMISSIONS:
            await publish_submit(raw, names, bad.data)

        await valid_task_completes(client, "after-the-bad-ones")

        letters = {}
        for bad in BAD_SUBMISSIONS:
            letters[bad.name] = await eventually(lambda bad=bad: box.one_of(bad.data))

    for bad in BAD_SUBMISSIONS:
        letter = letters[bad.name]
        assert letter.tool == SUBMIT_DEAD_LETTER, bad.name
        assert letter.subject == submit_subject(names, bad.data), bad.name
        assert letter.task_id == bad.task_id, bad.name
        assert bad.expected in letter.error.message, (bad.name, letter.error.message)
        if bad.task_id is not None:
            await assert_rejected_with_failed_task(client, bad.task_id, bad.expected, letter)
    await eventually(lambda: drained(raw, names.submit_stream))
    statuses = {record.task_id: record.status for record in await client.list()}
    assert statuses.pop("after-the-bad-ones") is TaskStatus.COMPLETED
    assert statuses == {bad.task_id: TaskStatus.FAILED for bad in BAD_SUBMISSIONS if bad.task_id}


async def test_bad_resubmit_never_fails_an_existing_task(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    await valid_task_completes(client, "existing")
    before = await client.get("existing")
    data = submission(task_id="existing", steps="not a plan")

    async with dead_letters(raw, names, SUBMIT_DEAD_LETTER) as box:
        await publish_submit(raw, names, data)
        letter = await eventually(lambda: box.one_of(data))

    assert letter.task_id == "existing" and "$.steps" in letter.error.message
    await eventually(lambda: drained(raw, names.submit_stream))
    assert await client.get("existing") == before


async def test_a_step_retry_override_out_of_range_fails_the_task_clearly(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
) -> None:
    """`retry.max_attempts: 0` is accepted by the JSON shape but is not a usable policy."""
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    data = submission(
        task_id="no-attempts", steps=[{"tool": "fast", "input": {}, "retry": {"max_attempts": 0}}]
    )

    await publish_submit(raw, store.names, data)

    record = await eventually(lambda: failed_record(client, "no-attempts"), timeout=5)
    assert record.error is not None and "max_attempts" in record.error.message, record.error
    await valid_task_completes(client)


async def test_a_large_invalid_submission_is_still_rejected(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
) -> None:
    """Under max_payload as sent, but its dead letter (bytes as base64) would be over it."""
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    steps = [{"tool": "nope", "input": "x" * 900_000}]
    data = submission(task_id="big-unknown", steps=steps, strict=True)
    assert len(data) < client.max_payload

    async with dead_letters(raw, names, SUBMIT_DEAD_LETTER) as box:
        await publish_submit(raw, names, data)

        record = await eventually(lambda: failed_record(client, "big-unknown"), timeout=5)
        letter = await eventually(lambda: box.for_task("big-unknown"))
    assert record.error is not None and "unknown tool 'nope'" in record.error.message
    assert letter.error == record.error
    await eventually(lambda: drained(raw, names.submit_stream))
    await valid_task_completes(client)


async def test_a_large_step_input_of_the_wrong_type_fails_the_task(
    client: Client, dispatcher: object, make_worker: MakeWorker, config: NatsConfig
) -> None:
    """`search` takes a Query; a ~900 kB input of the wrong shape must fail, not loop."""
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    handle = await client.submit(
        [{"tool": "search", "input": {"query": ["x" * 900_000]}}], task_id="big-input"
    )

    record = await eventually(lambda: failed_record(client, handle.task_id), timeout=5)
    assert record.error is not None and record.error.type == "InvalidInput"
    assert "Expected `str`, got `array` - at `$.query`" in record.error.message
    await valid_task_completes(client)


# -- 2. the Python client refuses before publishing ----------------------------


async def nothing_published(raw: Raw, names: Names) -> None:
    info = await raw.js.stream_info(names.submit_stream)
    assert info.state.last_seq == 0, f"{info.state.last_seq} submission(s) were published"


async def test_client_refuses_invalid_task_ids(
    client: Client, store: Store, raw: Raw, make_worker: MakeWorker, config: NatsConfig
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    for task_id, expected in [
        ("a.b", "not a valid id"),
        ("a*", "not a valid id"),
        ("a>b", "not a valid id"),
        ("a b", "not a valid id"),
        (LONG_ID, "is 500 characters long: the limit is 128"),
    ]:
        with pytest.raises((InvalidTaskError, InvalidNameError)) as refused:
            await client.submit(VALID, task_id=task_id)
        assert expected in str(refused.value), (task_id, str(refused.value))

    await nothing_published(raw, store.names)


async def test_client_refuses_invalid_plans_before_publishing(
    client: Client, store: Store, raw: Raw, make_worker: MakeWorker, config: NatsConfig
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    with pytest.raises(InvalidTaskError, match="'empty' has no steps"):
        await client.submit([], task_id="empty")
    with pytest.raises(InvalidTaskError, match="unknown tool 'nope': no worker has registered it"):
        await client.submit([{"tool": "nope"}], task_id="unknown", strict=True)
    with pytest.raises(InvalidTaskError, match=r"tool name 'fa\.st' is not valid"):
        await client.submit(["fa.st"], task_id="bad-tool")
    with pytest.raises(InvalidTaskError, match="invalid step"):
        await client.submit([{"tool": 5}], task_id="tool-int")
    with pytest.raises(InvalidTaskError, match=r"'huge' is 2,000,\d+ bytes; at most [\d,]+ fit"):
        await client.submit([{"tool": "fast", "input": "x" * 2_000_000}], task_id="huge")

    for task_id in ("empty", "unknown", "bad-tool", "tool-int", "huge"):
        with pytest.raises(TaskNotFoundError):
            await client.get(task_id)
    await nothing_published(raw, store.names)


async def test_client_refuses_a_task_id_that_already_ran(
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
    executions: Path,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    await valid_task_completes(client, "once")
    before = await client.get("once")

    with pytest.raises(TaskExistsError, match="task 'once' already exists"):
        await client.submit([{"tool": "fast", "input": {"x": 2}}], task_id="once")

    assert await client.get("once") == before
    assert read_executions(executions)[("once", 0)] == 1


async def test_client_refuses_a_duplicate_submitted_in_quick_succession(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
    executions: Path,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    first = await client.submit(VALID, task_id="twice")
    with pytest.raises(TaskExistsError, match="task 'twice' already exists"):
        await client.submit([{"tool": "fast", "input": {"x": 2}}], task_id="twice")

    assert await first.wait(timeout=15) == VALID_RESULT
    info = await raw.js.stream_info(store.names.submit_stream)
    assert info.state.last_seq == 0  # submitted directly: nothing went through the queue
    assert read_executions(executions)[("twice", 0)] == 1


# -- 3. a raw duplicate without Nats-Msg-Id ------------------------------------


async def test_raw_duplicate_without_msg_id_changes_nothing(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
    executions: Path,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    await valid_task_completes(client, "raw-dup")
    before = await client.get("raw-dup")
    events_before = await events_of(client, "raw-dup")
    again = submission(task_id="raw-dup", steps=[{"tool": "fast", "input": {"x": 2}}])

    seq = await publish_submit(raw, names, again)

    assert seq == 1  # no Nats-Msg-Id: the server stored it; the dispatcher must ignore it
    await eventually(lambda: drained(raw, names.submit_stream))
    after = await client.get("raw-dup")
    assert after == before
    assert (after.created_at, after.result) == (before.created_at, VALID_RESULT)
    assert await events_of(client, "raw-dup") == events_before
    assert [r.task_id for r in await client.list()] == ["raw-dup"]
    assert read_executions(executions)[("raw-dup", 0)] == 1
    # With the header too (the task was submitted directly, not through the queue).
    await raw.js.publish(names.submit_subject("raw-dup"), again, headers={Header.MSG_ID: "raw-dup"})
    await eventually(lambda: drained(raw, names.submit_stream))
    assert await client.get("raw-dup") == before


# -- 4. work messages injected onto a tool's subject ---------------------------


async def test_bad_work_messages_are_dead_lettered_and_the_worker_keeps_serving(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    subject = names.work_subject("fast")
    bad = {
        b"\x00 not json": (None, "undecodable work message: JSON is malformed"),
        b'{"task_id": "ghost"}': (None, "undecodable work message: Object missing required field"),
        b'{"task_id": "a.b", "step": 0, "tool": "fast"}': (None, "task id 'a.b' is not a valid id"),
        b'{"task_id": "ghost", "step": 0, "tool": "fast"}': ("ghost", "no task 'ghost' exists"),
        b'{"task_id": "ghost2", "step": 0, "tool": "slow"}': ("ghost2", f"'slow' on {subject}"),
    }

    async with dead_letters(raw, names, "fast") as box:
        for data in bad:
            await raw.js.publish(subject, data)

        letters = {data: await eventually(lambda data=data: box.one_of(data)) for data in bad}

    for data, (task_id, expected) in bad.items():
        letter = letters[data]
        assert letter.tool == "fast" and letter.subject == subject
        assert letter.task_id == task_id
        assert expected in letter.error.message, letter.error.message
    for ghost in ("ghost", "ghost2"):
        with pytest.raises(TaskNotFoundError):
            await client.get(ghost)  # a stray message never invents a task
    await valid_task_completes(client, "after-bad-work")
    await eventually(lambda: drained(raw, names.work_stream))


async def test_a_stray_message_fails_a_task_only_for_the_step_it_waits_on(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
) -> None:
    """A message naming another tool fails the task when it stands for the step the task
    waits on (that step cannot run); one about another step or run is dead-lettered
    alone, and the task goes on."""
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    live = await client.submit([{"tool": "slow", "input": {"sleep": 1}}, "fast"])
    await live.wait_for(lambda record: record.status.value == "running", timeout=20)
    stray = {"task_id": live.task_id, "step": 5, "tool": "slow", "generation": 1}
    async with dead_letters(raw, names, "fast") as box:
        await raw.js.publish(names.work_subject("fast"), json.dumps(stray).encode())
        await eventually(lambda: box.one_of(json.dumps(stray).encode()))
    assert (await live.wait(timeout=20))["step"] == 1  # the stray changed nothing

    waiting = await client.submit([{"tool": "asks", "input": {}}])
    await waiting.wait_for(lambda record: record.status.value == "waiting", timeout=20)
    current = {"task_id": waiting.task_id, "step": 0, "tool": "slow", "generation": 1}
    await raw.js.publish(names.work_subject("fast"), json.dumps(current).encode())
    with pytest.raises(TaskFailedError) as failed:
        await waiting.wait(timeout=20)
    assert failed.value.error is not None and failed.value.error.type == "InvalidMessage"


# -- 5. generated garbage ------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
usable_ids = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)
generated_ids = st.one_of(usable_ids, usable_ids, st.text(max_size=140), json_values)
generated_steps = json_values | st.lists(
    st.fixed_dictionaries(
        {"tool": st.sampled_from(["fast", "nope", "", "a.b", "_x"]) | json_values},
        optional={"input": json_values, "timeout_ms": json_values, "retry": json_values},
    ),
    max_size=3,
)
near_misses = st.fixed_dictionaries(
    {"task_id": generated_ids},
    optional={"steps": generated_steps, "metadata": json_values, "deadline_ms": json_values},
)
garbage = st.one_of(st.binary(max_size=200), json_values, near_misses, near_misses)
"""Raw bytes, or a JSON value to encode (the test makes a usable task id unique first)."""


def as_payload(value: Any) -> tuple[bytes, str | None]:
    """The bytes to publish and the usable task id in them, if any."""
    if isinstance(value, bytes):
        return value, usable_id(value)
    task_id = value.get("task_id") if isinstance(value, dict) else None
    if isinstance(task_id, str) and is_task_id(task_id):
        value = {**value, "task_id": f"{task_id[:100]}-{uuid.uuid4().hex[:8]}"}
    data = json.dumps(value).encode()
    return data, usable_id(data)


def usable_id(data: bytes) -> str | None:
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return None
    task_id = value.get("task_id") if isinstance(value, dict) else None
    return task_id if isinstance(task_id, str) and is_task_id(task_id) else None


def is_task_id(text: str) -> bool:
    return re.fullmatch(TASK_ID, text) is not None


@pytest.fixture
async def submit_letters(store: Store, raw: Raw) -> AsyncIterator[DeadLetters]:
    """Dead letters of the submit subject for the whole test (hypothesis reuses it)."""
    async with dead_letters(raw, store.names, SUBMIT_DEAD_LETTER) as box:
        yield box


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=garbage)
async def test_generated_garbage_loses_nothing_and_the_dispatcher_keeps_serving(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
    submit_letters: DeadLetters,
    value: Any,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    data, task_id = as_payload(value)
    seen = len(submit_letters.of(data))

    seq = await publish_submit(raw, store.names, data)

    letter = await eventually(lambda: _outcome(store, submit_letters, data, seen, task_id, seq))
    event("accepted" if letter is None else "rejected, usable id" if task_id else "rejected, no id")
    if letter is None:  # by chance a valid task: accepted, and it runs to an end
        assert task_id is not None
        await client.handle(task_id).wait_until_done(timeout=15)
    else:
        assert letter.error.message, "a dead letter must say what is wrong"
        assert letter.task_id == task_id
        if task_id is not None:
            record = await eventually(lambda: failed_record(client, task_id))
            assert record.error is not None and record.error.message == letter.error.message
    await eventually(lambda: drained(raw, store.names.submit_stream))
    assert len(submit_letters.of(data)) == seen + (letter is not None)
    await valid_task_completes(client)


async def _outcome(
    store: Store, box: DeadLetters, data: bytes, seen: int, task_id: str | None, seq: int
) -> DeadLetter | None:
    """The new dead letter of `data`, or None if the submission was accepted as a task."""
    letters = box.of(data)
    if len(letters) > seen:
        return letters[-1]
    found = None if task_id is None else await store.records.get(task_id)
    if found is not None and found.record.submit_seq == seq and found.record.steps:
        return None
    raise AssertionError(f"submission {data[:80]!r} was neither accepted nor dead-lettered")


async def test_an_output_too_large_to_store_fails_the_task_clearly(
    client: Client, dispatcher: object, make_worker: MakeWorker, config: NatsConfig
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    # ~700 kB in: the step's output (its input echoed) plus the record outgrow max_payload.
    handle = await client.submit([{"tool": "fast", "input": "x" * 700_000}, "fast"])

    with pytest.raises(TaskFailedError) as failure:
        await handle.wait(timeout=20)

    assert failure.value.error is not None
    assert failure.value.error.type == "OutputTooLarge"
    assert "store large data elsewhere" in failure.value.error.message
