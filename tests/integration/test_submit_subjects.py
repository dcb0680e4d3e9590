"""A raw submission names its task in its subject (`tether.submit.<task_id>`): one whose
payload is another task's is refused with a dead letter and touches no task, and the
bare `tether.submit` is no longer stored at all."""

from __future__ import annotations

import json

import pytest
from nats.js.api import Header
from nats.js.errors import NoStreamResponseError

from tests.apps.tools import app
from tests.conftest import MakeWorker, Raw
from tests.integration.test_bad_input import (
    VALID,
    VALID_RESULT,
    dead_letters,
    drained,
    find_record,
)
from tether import Client, TaskNotFoundError
from tether.nats.store import Store
from tether.schemas.names import SUBMIT_DEAD_LETTER
from tether.testing import eventually


async def test_a_payload_for_another_task_is_refused_and_that_task_is_untouched(
    client: Client, store: Store, raw: Raw, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    names = store.names
    victim = await client.submit(VALID, task_id="victims-task")
    assert await victim.wait(timeout=15) == VALID_RESULT
    before = await client.get("victims-task")
    forged = json.dumps({"task_id": "victims-task", "steps": [{"tool": "fast"}]}).encode()
    unknown = json.dumps({"task_id": "nobodys-task", "steps": [{"tool": "fast"}]}).encode()

    async with dead_letters(raw, names, SUBMIT_DEAD_LETTER) as box:
        for data in (forged, unknown):
            await raw.js.publish(
                names.submit_subject("mine"), data, headers={Header.MSG_ID: f"x{len(box.letters)}"}
            )
            letter = await eventually(lambda data=data: box.one_of(data))
            assert letter.subject == names.submit_subject("mine")
            assert "is for task" in letter.error.message, letter.error.message
            assert f"publish it on {names.prefix}.submit." in letter.error.message

    await eventually(lambda: drained(raw, names.submit_stream))
    assert await client.get("victims-task") == before  # no failed record over its own
    for task_id in ("mine", "nobodys-task"):
        with pytest.raises(TaskNotFoundError):
            await client.get(task_id)


async def test_a_submission_on_its_own_subject_runs(
    client: Client, store: Store, raw: Raw, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(app)
    body = json.dumps({"task_id": "on-its-own", "steps": VALID}).encode()
    await raw.js.publish(store.names.submit_subject("on-its-own"), body)
    await eventually(lambda: find_record(client, "on-its-own"))
    assert await client.handle("on-its-own").wait(timeout=15) == VALID_RESULT


async def test_the_bare_submit_subject_is_not_stored(
    raw: Raw, client: Client, store: Store
) -> None:
    body = json.dumps({"task_id": "old-style", "steps": VALID}).encode()
    with pytest.raises(NoStreamResponseError):  # no stream captures it
        await raw.js.publish(store.names.prefix + ".submit", body)
