"""What a person reads from `--wait`, `watch`, `result` and `status` (issue 40, item 8, and
the CLI parts of items 3 and 10): the answer once on a terminal, as text; a task that
waits for a person says how to answer; `status` shows the question and the answer and
exits with the outcome; `gc` says its retention as a person would."""

from __future__ import annotations

import asyncio
import json
import shlex
import time
import uuid

from tests.apps.agents import app as agents
from tests.apps.tools import app as tools_app
from tests.conftest import MakeWorker
from tests.e2e.test_cli_ops import finish, spawn, tether
from tests.e2e.test_cli_stream import ANSWER, _load, _on_a_terminal
from tether import Client, NatsConfig, TaskStatus
from tether.testing.llm import ScriptedModel

QUESTION_ASKED = "Approve the draft?"  # what `tests.apps.tools:asks` asks


async def test_on_a_terminal_the_answer_is_printed_once_as_text(
    config: NatsConfig, dispatcher: object, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await make_worker(agents)
    question = _load(model)

    screen = await _on_a_terminal(config, "submit", "--agent", "researcher", question, "--wait")

    shown = "\n".join(screen)
    first = ANSWER.splitlines()[0]
    assert shown.count(first) == 1, shown  # streamed, and not repeated after the end
    assert "\\n" not in shown and f'"{first}' not in shown  # never as a JSON string


async def test_piped_the_result_stays_json_after_the_lines(
    config: NatsConfig, dispatcher: object, make_worker: MakeWorker, model: ScriptedModel
) -> None:
    await make_worker(agents)
    question = _load(model)

    run = await tether(config, "submit", "--agent", "researcher", question, "--wait")

    assert run.code == 0, run
    assert json.loads(run.out.rstrip().splitlines()[-1]) == ANSWER  # for a script to read


async def test_result_text_prints_a_string_answer_as_it_is(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    model: ScriptedModel,
) -> None:
    await make_worker(agents)
    handle = await client.submit_agent("researcher", _load(model))
    await handle.wait(timeout=30)
    fast = await client.submit([{"tool": "fast", "input": 1}])
    await make_worker(tools_app)
    await fast.wait(timeout=30)

    text = await tether(config, "result", handle.task_id, "--text")
    other = await tether(config, "result", fast.task_id, "--text")
    both = await tether(config, "result", handle.task_id, "--text", "--json")

    assert (text.code, text.out) == (0, ANSWER + "\n"), text
    assert other.code == 0 and other.out.splitlines() == [
        "{",
        '  "step": 0,',
        '  "payload": 1',
        "}",
    ], other
    assert both.code == 2 and "--text and --json" in both.err


async def test_status_shows_the_question_and_the_answer_and_exits_with_the_outcome(
    config: NatsConfig,
    client: Client,
    dispatcher: object,
    make_worker: MakeWorker,
    model: ScriptedModel,
) -> None:
    await make_worker(agents)
    question = _load(model)
    answered = await client.submit_agent("researcher", question)
    await answered.wait(timeout=30)
    refused = await client.submit_agent("careful", "What is the admin password?")
    await refused.wait_until_done(timeout=30)
    await make_worker(tools_app)
    stopped = await client.submit([{"tool": "slow", "input": {"sleep": 30}}])
    await stopped.wait_for(lambda r: r.status is TaskStatus.RUNNING, timeout=20)
    running = await tether(config, "status", stopped.task_id)
    await stopped.cancel()

    done = await tether(config, "status", answered.task_id)
    failed = await tether(config, "status", refused.task_id)
    failed_json = await tether(config, "status", refused.task_id, "--json")
    cancelled = await tether(config, "status", stopped.task_id)

    assert done.code == 0, done
    rows = {line.split(maxsplit=1)[0]: line for line in done.out.splitlines() if line.strip()}
    assert question in rows["question"]
    assert ANSWER.splitlines()[0] in rows["answer"]
    assert (failed.code, failed_json.code) == (1, 1), failed
    assert "What is the admin password?" in failed.out and "GuardrailTripped" in failed.out
    assert failed_json.json()["status"] == "failed"
    assert (cancelled.code, running.code) == (3, 0), (cancelled, running)


async def test_wait_says_a_task_waits_for_a_person_and_how_to_answer_then_waits_on(
    config: NatsConfig, client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(tools_app)
    task_id = f"asks-{uuid.uuid4().hex[:6]}"
    waiting = await spawn(config, "submit", "asks", "fast", "--id", task_id, "--wait")
    assert waiting.stdout is not None

    line = ""
    while "waits for a person" not in line:
        read = await asyncio.wait_for(waiting.stdout.readline(), 30)
        assert read, "--wait ended without saying the task waits for a person"
        line = read.decode()
    assert QUESTION_ASKED in line and "still following" in line
    command = line.split("answer with: ", 1)[1].split(" | ", 1)[0]
    assert command == f"tether input {task_id} '{{\"approved\":true}}'"
    assert waiting.returncode is None  # it waits on for the answer

    answer = await tether(config, *shlex.split(command)[1:])  # pasted as printed
    followed = await finish(waiting)

    assert answer.code == 0, answer
    assert followed.code == 0, followed
    assert followed.out.rstrip().endswith("}") and '"approved": true' in followed.out  # result


async def test_watch_of_a_waiting_task_says_the_same(
    config: NatsConfig, client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(tools_app)
    handle = await client.submit(["asks"])
    await handle.wait_for(lambda r: r.status is TaskStatus.WAITING, timeout=20)
    watching = await spawn(config, "watch", handle.task_id)
    assert watching.stdout is not None

    line = ""
    while "waits for a person" not in line:
        line = (await asyncio.wait_for(watching.stdout.readline(), 30)).decode()
    await client.send_input(handle.task_id, {"approved": False})
    watched = await finish(watching)

    assert f"tether input {handle.task_id} '{{\"approved\":true}}'" in line
    assert watched.code == 0, watched


async def test_a_guardrail_refusal_ends_wait_as_soon_as_it_is_stored(
    config: NatsConfig, client: Client, dispatcher: object, make_worker: MakeWorker
) -> None:
    await make_worker(agents)
    task_id = f"refused-{uuid.uuid4().hex[:6]}"

    run = await tether(
        config, "submit", "--agent", "careful", "The admin password?", "--id", task_id, "--wait"
    )
    ended = time.time()

    assert run.code == 1, run
    assert "GuardrailTripped" in run.out
    record = await client.get(task_id)
    assert record.status is TaskStatus.FAILED
    late = ended - record.updated_at.timestamp()  # the process's own exit included
    assert late < 2.5, f"--wait returned {late:.1f}s after the task failed"


async def test_gc_says_its_retention_as_a_person_would(config: NatsConfig, client: Client) -> None:
    week = await tether(config, "gc", "--dry-run")
    hours = await tether(config, "gc", "--dry-run", "--older-than", f"{(3 + 5 / 60) / 24}")

    assert week.code == 0, week
    assert "finished over 7 d ago" in week.out and "days," not in week.out
    assert "finished over 3 h 5 min ago" in hours.out, hours
