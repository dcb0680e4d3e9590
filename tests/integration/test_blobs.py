"""Large values by reference: outputs and submitted inputs over the threshold are stored
once in the Object Store and travel as {"$blob": "sha256:...", "size": n}."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from nats.js import JetStreamContext

from tests.apps.tools import app
from tests.conftest import MakeWorker, Raw
from tether import App, Client, Parallel, Step, StepContext
from tether.errors import BlobNotFoundError
from tether.nats.blobs import CHUNK_SIZE
from tether.nats.feeds import last_event
from tether.nats.store import Store
from tether.schemas import StepCompleted
from tether.tasks.sweep import Sweeper

LARGE = 300 * 1024
blobby = App("blobby")


@blobby.tool
async def big(ctx: StepContext, size: int) -> dict[str, Any]:
    """An output over the 256 KiB threshold."""
    return {"text": "x" * size, "step": ctx.step}


@blobby.tool
async def measure(ctx: StepContext, data: Any) -> dict[str, Any]:
    """What arrived, and how large (the tool sees values, never references)."""
    items = data if isinstance(data, list) else [data]
    return {"sizes": [len(item["text"]) for item in items], "refs": [_is_ref(i) for i in items]}


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and "$blob" in value


async def test_a_large_output_travels_by_reference_and_the_next_tool_gets_the_value(
    client: Client, store: Store, raw: Raw, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker([app, blobby])
    handle = await client.submit([Step(tool="big", input=LARGE), "measure"])

    assert await handle.wait(timeout=20) == {"sizes": [LARGE], "refs": [False]}

    checkpoint = await store.checkpoints.get(handle.task_id, 0)
    assert checkpoint is not None and _is_ref(checkpoint.output)
    encoded = msgspec.json.encode({"text": "x" * LARGE, "step": 0})
    assert checkpoint.output == {
        "$blob": "sha256:" + hashlib.sha256(encoded).hexdigest(),
        "size": len(encoded),
    }
    assert (await handle.output(0))["text"] == "x" * LARGE  # resolved for the client
    events = [e async for e in handle.events(timeout=5)]
    first = next(e for e in events if isinstance(e, StepCompleted) and e.step == 0)
    assert first.output == checkpoint.output  # the event carries the reference, not 300 KiB
    info = await raw.js.stream_info(f"OBJ_{store.names.blobs_bucket}")
    assert LARGE <= info.state.bytes < 2 * LARGE


async def test_a_large_result_is_resolved_by_wait_and_kept_by_reference_in_the_record(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker([app, blobby])
    handle = await client.submit([Step(tool="big", input=LARGE)])

    result = await handle.wait(timeout=20)

    assert result == {"text": "x" * LARGE, "step": 0}
    record = await handle.get()
    assert _is_ref(record.result)
    assert await client.resolve(record.result) == result


async def test_the_same_content_is_stored_once(
    client: Client, store: Store, raw: Raw, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker([app, blobby])
    for _ in range(3):
        await (await client.submit([Step(tool="big", input=LARGE)])).wait(timeout=20)
    info = await raw.js.stream_info(f"OBJ_{store.names.blobs_bucket}")
    assert info.state.bytes < 2 * LARGE  # three tasks, one object


async def test_parallel_branch_outputs_are_references_in_the_group_and_values_for_the_tool(
    client: Client, store: Store, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker([app, blobby])
    group = Parallel(Step(tool="big", input=LARGE), Step(tool="big", input=LARGE + 1))
    handle = await client.submit([group, "measure"])

    assert await handle.wait(timeout=20) == {"sizes": [LARGE, LARGE + 1], "refs": [False, False]}
    checkpoint = await store.checkpoints.get(handle.task_id, 0)
    assert checkpoint is not None and all(_is_ref(item) for item in checkpoint.output)


async def test_a_large_submitted_input_is_stored_once_and_the_tool_gets_the_value(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker([app, blobby])
    value = {"text": "y" * LARGE}
    handle = await client.submit([Step(tool="measure", input=value)])

    assert await handle.wait(timeout=20) == {"sizes": [LARGE], "refs": [False]}
    record = await handle.get()
    assert _is_ref(record.steps[0].input)  # the record holds the reference, not 300 KiB


async def test_the_api_resolves_a_reference_in_one_request(
    client: Client, store: Store, raw: Raw, dispatcher: object, make_worker: MakeWorker, api: None
) -> None:
    await make_worker([app, blobby])
    handle = await client.submit([Step(tool="big", input=LARGE)])
    await handle.wait(timeout=20)
    ref = (await handle.get()).result["$blob"]
    subject = store.names.api_subject("blob")

    reply = msgspec.json.decode((await raw.nc.request(subject, _ref(ref), timeout=5)).data)
    missing = msgspec.json.decode((await raw.nc.request(subject, _ref("sha256:0"), timeout=5)).data)

    assert reply == {"ref": ref, "data": {"text": "x" * LARGE, "step": 0}}
    assert missing["error"]["code"] == "not_found"


def _ref(ref: str) -> bytes:
    return msgspec.json.encode({"ref": ref})


async def test_values_past_max_payload_run_because_they_travel_by_reference(
    client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    """The same task fails with OutputTooLarge when blobs are off (test_bad_input.py)."""
    await make_worker([app, blobby])
    handle = await client.submit([{"tool": "fast", "input": "x" * 700_000}, "fast"])

    result = await handle.wait(timeout=30)

    assert result["payload"]["payload"] == "x" * 700_000


# -- retention: `tether gc` ------------------------------------------------------------


async def test_gc_removes_a_finished_task_past_retention_and_the_blob_only_it_used(
    client: Client, store: Store, raw: Raw, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker([app, blobby])
    old = await client.submit([Step(tool="big", input=LARGE), "measure"])
    await old.wait(timeout=20)
    shared = [await client.submit([Step(tool="big", input=LARGE + n)]) for n in (1, 1)]
    for handle in shared:
        await handle.wait(timeout=20)
    waiting = await client.submit([Step(tool="big", input=LARGE + 2), "asks"])
    await waiting.wait_for(lambda r: r.status.value == "waiting", timeout=20)
    sweeper = Sweeper(store)
    later = datetime.now(UTC) + timedelta(hours=2)  # past the blob grace

    report = await sweeper.sweep(retention=timedelta(hours=1), now=later, dry_run=True)
    assert sorted(report.tasks) == sorted([old.task_id, *(h.task_id for h in shared)])
    assert await store.records.get(old.task_id) is not None  # a dry run removes nothing

    report = await sweeper.sweep(retention=timedelta(hours=1), now=later)
    assert await store.records.get(old.task_id) is None
    assert await store.checkpoints.get(old.task_id, 0) is None
    assert await last_event(store, old.task_id) is None
    assert len(report.blobs) == 2  # the old task's and the shared one
    still = await waiting.get()  # a waiting task is never swept, nor what it refers to
    assert still.status.value == "waiting"
    assert (await waiting.output(0))["text"] == "x" * (LARGE + 2)
    assert report.kept_blobs == 1


async def test_gc_keeps_a_blob_younger_than_the_grace_even_with_no_reference(
    client: Client, store: Store, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker([app, blobby])
    handle = await client.submit([Step(tool="big", input=LARGE + 3)])
    await handle.wait(timeout=20)

    report = await Sweeper(store).sweep(retention=timedelta(0))

    assert handle.task_id in report.tasks  # finished, so past a zero retention
    assert report.blobs == [] and report.kept_blobs >= 1  # stored seconds ago


async def test_a_blob_read_sees_it_stored_again_and_says_when_its_chunks_are_gone(
    client: Client,
    store: Store,
) -> None:
    blobs, js = store.blobs, store.js
    data = msgspec.json.encode("y" * LARGE)
    ref = msgspec.json.decode(await blobs.by_reference(data))["$blob"]
    name = "sha256-" + ref.removeprefix("sha256:")
    bucket = store.names.blobs_bucket

    await _put_object(js, bucket, name, data)  # stored again: new chunks
    assert await blobs.load(ref) == data

    await js.purge_stream(f"OBJ_{bucket}", subject=f"$O.{bucket}.C.>")  # every chunk gone
    with pytest.raises(BlobNotFoundError):
        await asyncio.wait_for(blobs.load(ref), timeout=10)  # an error, never a hang


async def test_a_blob_stored_under_another_blobs_name_is_refused(
    client: Client, store: Store
) -> None:
    """A blob's name is its content's hash, so whoever may write blobs still cannot change
    what an existing reference means."""
    blobs, js = store.blobs, store.js
    data = msgspec.json.encode("z" * LARGE)
    ref = msgspec.json.decode(await blobs.by_reference(data))["$blob"]
    name = "sha256-" + ref.removeprefix("sha256:")
    forged = msgspec.json.encode("forged" * LARGE)
    await _put_object(js, store.names.blobs_bucket, name, forged)  # a valid object, wrong name

    with pytest.raises(BlobNotFoundError):
        await blobs.load(ref)


async def _put_object(js: JetStreamContext, bucket: str, name: str, data: bytes) -> None:
    """Store an object as nats-py's `ObjectStore.put` does, less its meta's rollup (the
    store refuses rollups): chunks under a new subject, then the meta message."""
    nuid = uuid.uuid4().hex
    for start in range(0, len(data), CHUNK_SIZE):
        await js.publish(f"$O.{bucket}.C.{nuid}", data[start : start + CHUNK_SIZE])
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
    meta = {"name": name, "bucket": bucket, "nuid": nuid, "size": len(data)}
    meta |= {
        "chunks": -(-len(data) // CHUNK_SIZE),
        "digest": f"SHA-256={digest}",
        "mtime": "2026-01-01T00:00:00Z",
    }
    subject = f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"
    await js.publish(subject, json.dumps(meta).encode())
