"""Hostile input must get a clear outcome and never take a Tether process off NATS (issue 10).

Sizes at the NATS seam (the server counts payload plus headers against max_payload; nats-py
checks only the payload), deeply nested JSON, retry overrides without an upper bound, a
record too large to list, duplicates after a nats-server restart, and a checkpointed step
that must not run again on a delivery that looks like a first one. Every size is computed
from the server's max_payload. After each hostile input the same dispatcher, worker or API
process must still serve a normal task.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import nats.errors
import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st
from nats.js.api import Header
from nats.js.errors import NotFoundError

from tests.apps.tools import app, read_executions
from tests.conftest import (
    APP,
    MakeWorker,
    Raw,
    inline_only,
    raw_connection,
    start_worker,
    stop_worker,
)
from tests.integration.test_bad_input import (
    VALID,
    VALID_RESULT,
    DeadLetters,
    dead_letters,
    drained,
    failed_record,
    nothing_published,
    publish_submit,
    submission,
    submit_subject,
    valid_task_completes,
)
from tether import Client, Dispatcher, InvalidTaskError, NatsConfig, TaskFailedError, Worker
from tether.api import ApiService
from tether.nats.server import NatsServer
from tether.nats.store import Store
from tether.schemas.api import ErrorCode
from tether.schemas.codec import encode
from tether.schemas.names import SUBMIT_DEAD_LETTER, Names
from tether.schemas.plans import StepSpec, TaskSubmit
from tether.schemas.records import Checkpoint, TaskRecord, TaskStatus
from tether.schemas.work import DeadLetter
from tether.testing import eventually, wait_until

STORED_MARGIN = 16 * 1024
"""Tether bounds every stored value (record, checkpoint, work message) to max_payload - 16 KiB,
so any reply that carries one fits."""
LIST_MARGIN = 4096
"""A record larger than max_payload - 4 KiB cannot be listed (the issue's `list` bug)."""
HEADER_WINDOW_OFFSETS = (200, 160, 130, 118, 106, 94, 82, 40, 1)
"""`sized` outputs of max_payload - N bytes. A checkpoint adds ~80 bytes to the output and
its compare-and-set header 52, so some of these land in the window where the payload fits
and payload + headers does not (the issue's 1,048,470-byte output is max_payload - 106)."""
SUBMIT_OFFSETS = (*range(400, 0, -25), 1)
"""Raw submissions of max_payload - N bytes: the record adds ~200 bytes, so 25-byte steps
put at least one record in the 52-byte header window (the issue's was max_payload - 279)."""
STABLE_CODES = {code.value for code in ErrorCode}
REPLY_TIMEOUT = 5.0


@pytest.fixture
async def client(config: NatsConfig) -> AsyncIterator[Client]:
    async with Client(config, layout=inline_only(config)) as c:
        yield c


# -- helpers -------------------------------------------------------------------


def _padded(head: str, tail: bytes, size: int) -> bytes:
    data = head.encode()
    data += b"k" * (size - len(data) - len(tail)) + tail
    assert len(data) == size
    return data


def padded_submit(task_id: str, size: int, tool: str = "fast") -> bytes:
    """`{"task_id":…,"steps":[{"tool":…,"input":"k…k"}]}`, exactly `size` bytes."""
    return _padded(f'{{"task_id":"{task_id}","steps":[{{"tool":"{tool}","input":"', b'"}]}', size)


def padded_work(task_id: str, size: int, tool: str = "fast") -> bytes:
    """A work message for step 0 of `task_id`, exactly `size` bytes."""
    return _padded(f'{{"task_id":"{task_id}","step":0,"tool":"{tool}","input":"', b'"}', size)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def nested_submit(task_id: str, depth: int) -> bytes:
    return (
        f'{{"task_id":"{task_id}","steps":[{{"tool":"fast","input":'.encode()
        + nested(depth)
        + b"}]}"
    )


def nested_work(task_id: str, depth: int) -> bytes:
    return (
        f'{{"task_id":"{task_id}","step":0,"tool":"fast","input":'.encode() + nested(depth) + b"}"
    )


def legacy_record(task_id: str, size: int) -> bytes:
    """A completed record of exactly `size` bytes, as an older Tether could have stored it."""
    now = datetime.now(UTC)

    def build(result: str) -> bytes:
        record = TaskRecord(
            task_id=task_id,
            status=TaskStatus.COMPLETED,
            steps=[StepSpec(tool="fast")],
            current_step=1,
            result=result,
            created_at=now,
            updated_at=now,
        )
        return encode(record)

    data = build("x" * (size - len(build(""))))
    assert len(data) == size
    return data


async def write_legacy_record(
    client: Client, store: Store, raw: Raw, task_id: str, size: int
) -> None:
    """Put a record straight into the tasks bucket (a KV put carries no headers)."""
    assert size <= client.max_payload
    kv = await raw.js.key_value(store.names.tasks_bucket)
    await kv.put(task_id, legacy_record(task_id, size))


async def api_call(
    raw: Raw, names: Names, verb: str, body: Any, timeout: float = REPLY_TIMEOUT
) -> Any:
    """A raw request on `<prefix>.api.<verb>` (bytes as they are, else JSON); the JSON reply."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    subject = names.api_subject(verb)
    try:
        reply = await raw.nc.request(subject, data, timeout=timeout)
    except nats.errors.TimeoutError:
        raise AssertionError(
            f"no reply to {verb} ({len(data):,} bytes) within {timeout}s: "
            "has the API lost its connection?"
        ) from None
    return json.loads(reply.data)


def is_error_reply(reply: Any) -> bool:
    """An ErrorReply has `error` only (a failed task's record has an `error` too)."""
    return isinstance(reply, dict) and set(reply) == {"error"}


def error_of(reply: Any, what: str) -> tuple[str, str]:
    assert is_error_reply(reply), f"{what}: not an error reply: {str(reply)[:500]}"
    error = reply["error"]
    assert error["code"] in STABLE_CODES and error["message"], f"{what}: {error}"
    return error["code"], error["message"]


def letter_for(box: DeadLetters, subject: str, task_id: str, data: bytes) -> DeadLetter | None:
    """The dead letter of the message `data` on `subject` (its data may be cut short)."""
    for letter in box.letters:
        if letter.subject != subject:
            continue
        if letter.task_id == task_id:
            return letter
        if len(letter.data) >= min(len(data), 32) and data.startswith(letter.data):
            return letter
    return None


async def streams_drained(raw: Raw, names: Names) -> None:
    await drained(raw, names.submit_stream)
    await drained(raw, names.work_stream)


async def publish_all(raw: Raw, names: Names, datas: Sequence[bytes], chunk: int = 100) -> None:
    for start in range(0, len(datas), chunk):
        await asyncio.gather(
            *(publish_submit(raw, names, data) for data in datas[start : start + chunk])
        )


# -- 1a. the worker: outputs near max_payload ----------------------------------


async def test_a_checkpoint_in_the_header_window_fails_the_task_and_the_worker_keeps_serving(
    client: Client, dispatcher: object, make_worker: MakeWorker, config: NatsConfig
) -> None:
    """Used to: the checkpoint's payload fit, payload + header did not, the server closed the
    worker's connection and the task stayed running for ever."""
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    limit = client.max_payload
    for offset in HEADER_WINDOW_OFFSETS:
        plan = [{"tool": "sized", "input": limit - offset}, "fast"]
        handle = await client.submit(plan, task_id=f"window-{offset}")

        with pytest.raises(TaskFailedError) as failure:
            await handle.wait(timeout=10)

        error = failure.value.error
        assert error is not None and error.type == "OutputTooLarge", (offset, error)
        await valid_task_completes(client, f"after-window-{offset}")


async def test_an_output_over_the_stored_value_bound_fails_with_output_too_large(
    client: Client, dispatcher: object, make_worker: MakeWorker, config: NatsConfig
) -> None:
    """A bit over max_payload - 16 KiB: it would fit a message, but no reply could carry it.
    As the last step (the record's result) and as an earlier one (a checkpoint)."""
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    size = client.max_payload - STORED_MARGIN + 64
    plans: dict[str, list[Any]] = {
        "last-step": [{"tool": "sized", "input": size}],
        "not-last-step": [{"tool": "sized", "input": size}, "fast"],
    }
    for task_id, plan in plans.items():
        handle = await client.submit(plan, task_id=task_id)

        with pytest.raises(TaskFailedError) as failure:
            await handle.wait(timeout=10)

        error = failure.value.error
        assert error is not None and error.type == "OutputTooLarge", (task_id, error)
        await valid_task_completes(client, f"after-{task_id}")


# -- 1b. the dispatcher: submissions near max_payload --------------------------


async def test_submissions_just_under_max_payload_are_rejected_and_the_dispatcher_keeps_serving(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
) -> None:
    """Used to: a record in the header window closed the dispatcher's connection unacked, and
    the redelivery closed the next dispatcher's: no submission was accepted any more."""
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    limit = client.max_payload
    names = store.names
    async with dead_letters(raw, names, SUBMIT_DEAD_LETTER) as box:
        for offset in SUBMIT_OFFSETS:
            task_id = f"h-k{offset}"
            await publish_submit(raw, names, padded_submit(task_id, limit - offset))

            record = await eventually(lambda task_id=task_id: failed_record(client, task_id))
            assert record.error is not None, offset
            assert record.error.type == "InvalidTask", (offset, record.error)
            assert "too large" in record.error.message.lower(), (offset, record.error)
            letter = await eventually(lambda task_id=task_id: box.for_task(task_id))
            assert letter.subject == names.submit_subject(task_id)
            assert "too large" in letter.error.message.lower(), (offset, letter.error)
            await eventually(lambda: drained(raw, names.submit_stream))
            await valid_task_completes(client, f"after-h-k{offset}")


# -- 1c. the API: replies near max_payload --------------------------------------


async def test_get_answers_for_a_task_that_failed_with_output_too_large(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
    api: ApiService,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    plan = [{"tool": "sized", "input": client.max_payload - 106}, "fast"]
    handle = await client.submit(plan, task_id="too-large")
    with pytest.raises(TaskFailedError):
        await handle.wait(timeout=10)

    reply = await api_call(raw, names, "get", {"task_id": "too-large"})

    assert reply.get("status") == TaskStatus.FAILED.value, reply
    assert reply["error"]["type"] == "OutputTooLarge", reply["error"]
    await valid_task_completes(client, "normal")
    assert (await api_call(raw, names, "get", {"task_id": "normal"}))["status"] == "completed"


async def test_get_of_a_legacy_record_too_large_to_reply_is_an_error_and_the_api_keeps_answering(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
    api: ApiService,
) -> None:
    """Used to: the record fit the KV write, record + the reply's headers did not, and the
    server closed the API's connection: `get` stopped answering for everyone."""
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    await write_legacy_record(client, store, raw, "legacy", client.max_payload - 40)

    reply = await api_call(raw, names, "get", {"task_id": "legacy"})

    code, message = error_of(reply, "get of a record too large to reply")
    assert code == ErrorCode.INVALID.value and "too large" in message.lower(), reply
    await valid_task_completes(client, "normal")
    assert (await api_call(raw, names, "get", {"task_id": "normal"}))["status"] == "completed"
    assert (
        error_of(await api_call(raw, names, "get", {"task_id": "ghost"}), "ghost")[0] == "not_found"
    )


# -- 2. deeply nested JSON -----------------------------------------------------


async def test_a_deeply_nested_submission_is_dead_lettered_not_redelivered(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    data = nested_submit("d1", 10_000)

    async with dead_letters(raw, names, SUBMIT_DEAD_LETTER) as box:
        await publish_submit(raw, names, data)
        letter = await eventually(lambda: box.one_of(data))

    assert letter.tool == SUBMIT_DEAD_LETTER
    assert "nested" in letter.error.message.lower(), letter.error
    await eventually(lambda: drained(raw, names.submit_stream))
    await valid_task_completes(client)


async def test_a_deeply_nested_work_message_is_dead_lettered_not_redelivered(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    data = nested_work("d2", 10_000)

    async with dead_letters(raw, names, "fast") as box:
        await raw.js.publish(names.work_subject("fast"), data)
        letter = await eventually(lambda: box.one_of(data))

    assert letter.tool == "fast" and letter.subject == names.work_subject("fast")
    assert letter.error.message, "a dead letter must say what is wrong"
    await eventually(lambda: drained(raw, names.work_stream))
    await valid_task_completes(client)


async def test_a_flood_of_nested_submissions_cannot_fill_the_dispatcher(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
) -> None:
    """1,100 submissions nested 1,200 deep: more than the consumer's 1,000 unacked slots."""
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    datas = [nested_submit(f"flood-{n:04d}", 1200) for n in range(1100)]
    wanted = set(datas)

    async def all_dead_lettered(box: DeadLetters) -> None:
        lettered = {letter.data for letter in box.letters} & wanted
        assert len(lettered) == len(wanted), f"{len(lettered)} of {len(wanted)} dead-lettered"

    async with dead_letters(raw, names, SUBMIT_DEAD_LETTER) as box:
        await publish_all(raw, names, datas)
        await eventually(lambda: all_dead_lettered(box), timeout=20)

    await eventually(lambda: drained(raw, names.submit_stream))
    await valid_task_completes(client, "after-the-flood")


# -- 3. retry overrides and durations without an upper bound --------------------

HUGE_OVERRIDES = {
    "initial_backoff_ms": {"retry": {"initial_backoff_ms": 100_000_000_000_000_000}},
    "max_backoff_ms": {"retry": {"max_backoff_ms": 100_000_000_000_000_000}},
    "max_attempts": {"retry": {"max_attempts": 10**9}},
    "timeout_ms": {"timeout_ms": 10**18},
}


async def test_raw_submissions_with_unbounded_overrides_are_rejected(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
) -> None:
    """Used to: accepted, then the worker's backoff overflowed on every delivery and the task
    stayed pending for ever (or a count of 10**9 attempts was taken as a policy)."""
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    async with dead_letters(raw, names, SUBMIT_DEAD_LETTER) as box:
        for field, override in HUGE_OVERRIDES.items():
            task_id = f"huge-{field}"
            steps = [{"tool": "fast", "input": {}, **override}]
            await publish_submit(raw, names, submission(task_id=task_id, steps=steps))

            record = await eventually(lambda task_id=task_id: failed_record(client, task_id))
            letter = await eventually(lambda task_id=task_id: box.for_task(task_id))
            assert record.error is not None and record.error.type == "InvalidTask", record.error
            assert field in record.error.message, (field, record.error.message)
            assert letter.error == record.error
            await eventually(lambda: drained(raw, names.submit_stream))
            await valid_task_completes(client, f"after-huge-{field}")


async def test_api_submits_with_unbounded_overrides_are_invalid(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
    api: ApiService,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    names = store.names
    for field, override in HUGE_OVERRIDES.items():
        body = {"task_id": f"huge-{field}", "steps": [{"tool": "fast", **override}]}

        reply = await api_call(raw, names, "submit", body, timeout=10)

        code, message = error_of(reply, f"submit with a huge {field}")
        assert code == ErrorCode.INVALID.value and field in message, reply
        normal = await api_call(raw, names, "submit", {"steps": VALID}, timeout=10)
        assert set(normal) == {"task_id"}, normal
        assert await client.handle(normal["task_id"]).wait(timeout=15) == VALID_RESULT


async def test_the_client_refuses_unbounded_overrides_before_publishing(
    client: Client, store: Store, raw: Raw, registered: None
) -> None:
    for field, override in HUGE_OVERRIDES.items():
        with pytest.raises(InvalidTaskError, match=field):
            await client.submit([{"tool": "fast", **override}])

    await nothing_published(raw, store.names)


def _has_key(node: Any, key: str) -> bool:
    if isinstance(node, dict):
        return key in node or any(_has_key(value, key) for value in node.values())
    if isinstance(node, list):
        return any(_has_key(value, key) for value in node)
    return False


def _properties_named(node: Any, name: str) -> list[Any]:
    found = []
    if isinstance(node, dict):
        properties = node.get("properties")
        if isinstance(properties, dict) and name in properties:
            found.append(properties[name])
        for value in node.values():
            found.extend(_properties_named(value, name))
    elif isinstance(node, list):
        for value in node:
            found.extend(_properties_named(value, name))
    return found


@pytest.mark.parametrize("field", list(HUGE_OVERRIDES))
def test_the_task_submit_json_schema_states_an_upper_bound(field: str) -> None:
    path = Path(__file__).resolve().parents[2] / "schemas" / "jsonschema" / "TaskSubmit.json"
    schema = json.loads(path.read_text())

    found = _properties_named(schema, field)

    assert found, f"{path.name} has no property {field!r}"
    for prop in found:
        assert _has_key(prop, "maximum") or _has_key(prop, "exclusiveMaximum"), (field, prop)


# -- 4. `list` pages past a record too large to list ----------------------------


async def test_list_pages_past_a_record_too_large_to_list(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
    api: ApiService,
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    normal = [f"n{n}" for n in range(5)]
    for task_id in normal[:2]:
        await valid_task_completes(client, task_id)
    await write_legacy_record(
        client, store, raw, "oversized", client.max_payload - LIST_MARGIN // 2
    )
    assert await store.records.reindex() == 3  # as `tether gc --reindex` does
    for task_id in normal[2:]:
        await valid_task_completes(client, task_id)

    seen: list[str] = []
    omitted: list[str] = []
    body: dict[str, Any] = {"limit": 2}
    for _ in range(20):
        reply = await api_call(raw, store.names, "list", body)
        assert "error" not in reply, f"list {body}: {reply['error']}"
        seen.extend(record["task_id"] for record in reply["tasks"])
        omitted.extend(reply.get("omitted") or [])
        if reply["next_cursor"] is None:
            break
        body = {"limit": 2, "cursor": reply["next_cursor"]}
    else:
        raise AssertionError(f"list did not end after 20 pages: {seen}")

    assert seen == normal
    assert set(omitted) == {"oversized"}, omitted
    listed = [record.task_id for record in await client.list()]
    assert listed == [*normal[:2], "oversized", *normal[2:]]


# -- 5. the duplicate flag after a nats-server restart ---------------------------


@pytest.mark.slow
async def test_a_resubmit_after_a_server_restart_runs_nothing_twice(
    tmp_path: Path, executions: Path
) -> None:
    """The WorkQueue stream drops acked submissions, so after a restart the server may not
    know the msg id any more (`duplicate: false`); the dispatcher's record check must."""
    with NatsServer(tmp_path / "nats") as server:
        config = NatsConfig(url=server.url, names=Names(prefix="restart"))
        async with (
            Dispatcher(config),
            Worker(app, config),
            Client(config) as client,
            raw_connection(config.url) as raw,
        ):
            subject = config.names.submit_subject("dup")
            data = encode(TaskSubmit(task_id="dup", steps=[StepSpec(tool="fast", input={"x": 1})]))
            headers = {Header.MSG_ID: "dup"}
            await raw.js.publish(subject, data, headers=headers)
            await client.handle("dup").wait(timeout=15)
            before = await client.get("dup")

            server.stop()
            server.start()

            async def republish() -> Any:
                try:
                    return await raw.js.publish(subject, data, headers=headers, timeout=2)
                except (nats.errors.Error, TimeoutError) as exc:
                    raise AssertionError(f"publish after the restart failed: {exc!r}") from exc

            ack = await eventually(republish, timeout=20)
            await eventually(lambda: streams_drained(raw, config.names), timeout=15)
            after = await client.get("dup")

    assert after == before, f"duplicate={ack.duplicate}: the record changed"
    assert (after.status, after.submit_seq) == (TaskStatus.COMPLETED, before.submit_seq)
    assert read_executions(executions)[("dup", 0)] == 1, f"duplicate={ack.duplicate}"


# -- 6. a checkpointed step never runs again ------------------------------------


async def test_a_first_delivery_whose_checkpoint_exists_does_not_run_the_step(
    client: Client,
    store: Store,
    raw: Raw,
    config: NatsConfig,
    dispatcher: object,
    registered: None,
    executions: Path,
) -> None:
    """What a redelivery looks like after a nats-server restart lost the consumer's state:
    num_delivered 1, and the step's output already stored."""
    names = store.names
    handle = await client.submit([{"tool": "fast", "input": 0}, "fast", "fast"], task_id="ckpt")
    record = await client.get("ckpt")
    assert (record.status, record.current_step) == (TaskStatus.PENDING, 0)
    consumer = await raw.js.consumer_info(names.work_stream, names.tool_consumer("fast"))
    assert consumer.num_pending == 1 and consumer.num_ack_pending == 0, consumer
    assert consumer.delivered.consumer_seq == 0, "step 0's message was delivered already"

    stored = Checkpoint(output={"step": 0, "payload": "from-checkpoint"}, time=datetime.now(UTC))
    assert await store.checkpoints.create("ckpt", 0, stored) == stored

    async with Worker(app, config):
        result = await handle.wait(timeout=15)

    counts = read_executions(executions)
    assert [counts[("ckpt", step)] for step in range(3)] == [0, 1, 1], counts
    assert result == {"step": 2, "payload": {"step": 1, "payload": stored.output}}


@pytest.mark.slow
@pytest.mark.parametrize("state", ["as-restored", "lost"])
async def test_a_checkpoint_stored_just_before_a_server_crash_is_not_run_again(
    tmp_path: Path, executions: Path, monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    """A worker SIGKILLed right after step 1's checkpoint, then nats-server SIGKILLed and
    restarted, then a survivor worker.

    A SIGKILLed server may lose recent state, but whether it does is timing. With `lost`
    the test makes the loss certain, as in the issue's chaos run: the tool's consumer is
    deleted (the survivor creates it again, so step 1's message comes back as a first
    delivery) and the record's move past step 1 is undone (as if that write had been lost
    in the outage): only the checkpoint says that step 1 ran.
    """
    task_id = "crash-restart"
    with NatsServer(tmp_path / "nats") as server:
        config = NatsConfig(url=server.url, names=Names(prefix="crash"))
        async with Client(config) as client, Dispatcher(config):
            async with Worker(app, config):
                pass  # registers the tools; the real workers are processes
            handle = await client.submit(
                [{"tool": "fast", "input": 0}, "fast", "fast"], task_id=task_id
            )
            monkeypatch.setenv("TETHER_CRASH_AT", f"checkpointed:{task_id}:1")
            doomed_log = tmp_path / "doomed.log"
            doomed = start_worker(
                config,
                APP,
                log=doomed_log,
                entry=[sys.executable, "-m", "tests.apps.crashing_worker"],
            )
            await wait_until(
                lambda: doomed.poll() is not None,
                timeout=20,
                interval=0.002,  # kill the server as soon as possible after the checkpoint
                message="the worker to kill itself",
            )
            assert doomed.returncode == -9, doomed_log.read_text()
            monkeypatch.delenv("TETHER_CRASH_AT")

            server.kill()
            server.start()
            if state == "lost":
                async with raw_connection(config.url) as raw:
                    await eventually(lambda: _lose_state(client, raw, task_id, 1), timeout=20)

            survivor = start_worker(config, APP, log=tmp_path / "survivor.log")
            try:
                result = await handle.wait(timeout=30)
            finally:
                stop_worker(survivor)

    assert result["step"] == 2
    counts = read_executions(executions)
    assert [counts[(task_id, step)] for step in range(3)] == [1, 1, 1], counts


async def _lose_state(client: Client, raw: Raw, task_id: str, step: int) -> None:
    """Delete the `fast` consumer and move the record back to `step`; its checkpoint stays."""
    store = client._store
    names = store.names
    try:
        assert await store.checkpoints.get(task_id, step) is not None, "no checkpoint to keep"
        try:
            await raw.js.delete_consumer(names.work_stream, names.tool_consumer("fast"))
        except NotFoundError:
            pass  # an earlier try that timed out deleted it
        await store.records.update(
            task_id,
            lambda record: (
                msgspec.structs.replace(record, current_step=step)
                if record.current_step == step + 1
                else None
            ),
        )
    except (nats.errors.Error, TimeoutError) as exc:
        raise AssertionError(f"NATS after the restart: {exc!r}") from exc


# -- 7. a fuzz pass over sizes and nesting depths ---------------------------------

TARGETS = ["submit", "api.submit", "api.get", "work"]
shapes = st.one_of(
    st.tuples(st.just("size"), st.integers(1, 600)),  # bytes under max_payload
    st.tuples(st.just("size"), st.integers(-64, 0)),  # at it, or over it
    st.tuples(st.just("depth"), st.integers(1, 20_000)),
)


@pytest.fixture
async def boxes(store: Store, raw: Raw) -> AsyncIterator[dict[str, DeadLetters]]:
    """Dead letters of submissions and of `fast` for the whole test (hypothesis reuses it)."""
    names = store.names
    async with contextlib.AsyncExitStack() as stack:
        submit = await stack.enter_async_context(dead_letters(raw, names, SUBMIT_DEAD_LETTER))
        work = await stack.enter_async_context(dead_letters(raw, names, "fast"))
        yield {"submit": submit, "work": work}


# Shrinking is off: the processes are shared by every example (that is the point), so after
# a failure they are broken for the examples shrinking would run too.
@settings(
    max_examples=20,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(target=st.sampled_from(TARGETS), shape=shapes)
@example(target="submit", shape=("size", 279))
@example(target="api.submit", shape=("size", 100))
@example(target="api.get", shape=("size", 300))
@example(target="work", shape=("depth", 10_000))
async def test_hostile_sizes_and_depths_get_a_clear_outcome_and_everything_keeps_serving(
    client: Client,
    store: Store,
    raw: Raw,
    dispatcher: object,
    make_worker: MakeWorker,
    config: NatsConfig,
    api: ApiService,
    boxes: dict[str, DeadLetters],
    target: str,
    shape: tuple[str, int],
) -> None:
    await make_worker(app, layout=inline_only(config))  # limits of inline values
    kind, amount = shape
    task_id = f"fz-{uuid.uuid4().hex[:8]}"
    size = client.max_payload - amount if kind == "size" else 0
    event(f"{target} by {kind}")

    if target == "submit":
        data = padded_submit(task_id, size) if kind == "size" else nested_submit(task_id, amount)
        await _fuzz_submit(client, store, raw, boxes["submit"], task_id, data)
    elif target == "api.submit":
        data = padded_submit(task_id, size) if kind == "size" else nested_submit(task_id, amount)
        await _fuzz_api_submit(client, store, raw, task_id, data)
    elif target == "api.get":
        await _fuzz_api_get(client, store, raw, task_id, kind, size, amount)
    else:
        data = padded_work(task_id, size) if kind == "size" else nested_work(task_id, amount)
        await _fuzz_work(client, store, raw, boxes["work"], task_id, data)

    await eventually(lambda: streams_drained(raw, store.names))
    await valid_task_completes(client)


def _too_large_to_send(client: Client, data: bytes) -> bool:
    """nats-py refuses a payload over max_payload before sending (the sender's clear outcome)."""
    return len(data) > client.max_payload


async def _fuzz_submit(
    client: Client, store: Store, raw: Raw, box: DeadLetters, task_id: str, data: bytes
) -> None:
    names = store.names
    if _too_large_to_send(client, data):
        with pytest.raises(nats.errors.MaxPayloadError):
            await publish_submit(raw, names, data)
        event("refused by nats-py")
        return
    seq = await publish_submit(raw, names, data)
    subject = submit_subject(names, data)

    async def outcome() -> str:
        letter = letter_for(box, subject, task_id, data)
        if letter is not None:
            assert letter.error.message, "a dead letter must say what is wrong"
            return "dead-lettered"
        found = await store.records.get(task_id)
        if found is not None and found.record.submit_seq == seq and found.record.steps:
            return "accepted"
        raise AssertionError(f"{len(data):,}-byte submission neither accepted nor dead-lettered")

    result = await eventually(outcome)
    event(result)
    if result == "accepted":
        await client.handle(task_id).wait_until_done(timeout=15)


async def _fuzz_api_submit(
    client: Client, store: Store, raw: Raw, task_id: str, data: bytes
) -> None:
    names = store.names
    if _too_large_to_send(client, data):
        with pytest.raises(nats.errors.MaxPayloadError):
            await api_call(raw, names, "submit", data)
        event("refused by nats-py")
        return
    reply = await api_call(raw, names, "submit", data, timeout=10)
    if is_error_reply(reply):
        event(f"error reply: {error_of(reply, 'api submit')[0]}")
        return
    assert reply == {"task_id": task_id}, reply
    event("accepted")
    await client.handle(task_id).wait_until_done(timeout=15)


async def _fuzz_api_get(
    client: Client, store: Store, raw: Raw, task_id: str, kind: str, size: int, depth: int
) -> None:
    """By size: a task whose output is `size` bytes, then `get` of its record. By depth:
    a `get` request carrying a nested field."""
    if kind == "size":
        handle = await client.submit([{"tool": "sized", "input": size}], task_id=task_id)
        await handle.wait_until_done(timeout=15)
        body = json.dumps({"task_id": task_id}).encode()
    else:
        body = f'{{"task_id":"{task_id}","extra":'.encode() + nested(depth) + b"}"
    reply = await api_call(raw, store.names, "get", body)
    if is_error_reply(reply):
        event(f"error reply: {error_of(reply, 'api get')[0]}")
        return
    assert reply["task_id"] == task_id and TaskStatus(reply["status"]).is_terminal, reply
    event(f"record: {reply['status']}")


async def _fuzz_work(
    client: Client, store: Store, raw: Raw, box: DeadLetters, task_id: str, data: bytes
) -> None:
    subject = store.names.work_subject("fast")
    if _too_large_to_send(client, data):
        with pytest.raises(nats.errors.MaxPayloadError):
            await raw.js.publish(subject, data)
        event("refused by nats-py")
        return
    await raw.js.publish(subject, data)

    async def outcome() -> DeadLetter:
        letter = letter_for(box, subject, task_id, data)
        assert letter is not None, f"no dead letter for a {len(data):,}-byte work message"
        return letter

    letter = await eventually(outcome)
    assert letter.error.message, "a dead letter must say what is wrong"
    event("dead-lettered")
