"""The pure parts of what the CLI tells a person: how to answer a waiting task, a
duration, an agent task's question, and whether an answer was streamed already."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tether.agents.budget import BUDGET_ANSWER
from tether.agents.turns import approval_schema
from tether.cli.asking import answer_command, waiting_line
from tether.cli.event_views import streamed
from tether.cli.running import ExitCode
from tether.cli.statuses import told
from tether.clock import utcnow
from tether.durations import human
from tether.schemas.events import Waiting
from tether.schemas.plans import StepSpec
from tether.schemas.records import InputRequest, TaskRecord, TaskStatus
from tether.tasks.questions import last_question


@pytest.mark.parametrize(
    ("schema", "command"),
    [
        (approval_schema(["call_1"], {}), """tether input T '{"approved":true}'"""),
        (BUDGET_ANSWER, """tether input T '{"tokens":100000}'"""),  # worth copying, not 1
        (
            {"type": "object", "properties": {"why": {"type": "string"}}, "required": ["why"]},
            """tether input T '{"why":"text"}'""",
        ),
        ({}, """tether input T '"text"'"""),  # any JSON: the prompt says what
    ],
    ids=["approval", "budget", "required", "no-schema"],
)
def test_the_command_that_answers_fits_the_question(schema: dict[str, Any], command: str) -> None:
    assert answer_command("T", schema) == command


def test_only_a_question_to_a_person_gets_a_line() -> None:
    now = utcnow()
    request = InputRequest(prompt="Spent:\nraise  it?")
    asked = Waiting(task_id="T", status=TaskStatus.WAITING, time=now, input_request=request)
    line = waiting_line(asked)
    assert line is not None and "T waits for a person: Spent: raise it?" in line
    assert """answer with: tether input T '"text"'""" in line and "still following" in line
    timer = Waiting(task_id="T", status=TaskStatus.WAITING, time=now)
    assert waiting_line(timer) is None  # a timer, a child task


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (timedelta(days=7), "7 d"),
        (3 * 3600 + 5 * 60, "3 h 5 min"),
        (timedelta(days=1, minutes=5), "1 d"),  # never `1 d 5 min`, skipping the hours
        (timedelta(days=1, hours=2, seconds=9), "1 d 2 h"),
        (45, "45 s"),
        (0, "0 s"),
    ],
)
def test_human_durations(value: timedelta | float, said: str) -> None:
    assert human(value) == said


def test_the_question_of_an_agent_task_and_of_a_plan_of_tools() -> None:
    asked = StepSpec(tool="researcher", input={"input": "Why?", "token_budget": 10})
    chat = [{"role": "user", "content": "Hi"}, {"role": "user", "content": [{"text": "And?"}]}]
    assert last_question([asked]) == "Why?"
    assert last_question([StepSpec(tool="researcher", input={"input": chat})]) == "And?"
    assert last_question([StepSpec(tool="search", input={"input": "x", "depth": 3})]) is None
    assert last_question([StepSpec(tool="fast", input=1)]) is None and last_question([]) is None


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (TaskStatus.COMPLETED, ExitCode.OK),
        (TaskStatus.FAILED, ExitCode.FAILED),
        (TaskStatus.CANCELLED, ExitCode.CANCELLED),
        (TaskStatus.RUNNING, ExitCode.OK),
        (TaskStatus.WAITING, ExitCode.OK),
    ],
)
def test_status_exits_with_the_outcome_of_an_ended_task(status: TaskStatus, code: int) -> None:
    now = utcnow()
    record = TaskRecord(task_id="T", status=status, steps=[], created_at=now, updated_at=now)
    assert told(record) == code


def test_an_answer_streamed_already_is_not_repeated() -> None:
    assert streamed("one two\nthree", "Thinking.\none two three")  # wrapped on screen
    assert not streamed("something else", "one two three")
    assert not streamed({"a": 1}, "{'a': 1}")  # not a string: printed as JSON
