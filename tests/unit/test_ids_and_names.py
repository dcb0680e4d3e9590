"""Task id and tool name validation, and every name built by `tether.schemas.names.Names`."""

from __future__ import annotations

import re

import pytest

from tether.schemas.ids import (
    MAX_TASK_ID_LENGTH,
    MAX_TOOL_NAME_LENGTH,
    InvalidNameError,
    validate_task_id,
    validate_tool_name,
)
from tether.schemas.names import DEFAULT_NAMES, SUBMIT_DEAD_LETTER, Names

# -- task ids -----------------------------------------------------------------


@pytest.mark.parametrize(
    "task_id",
    ["a", "report-42", "A_b-C_9", "0", "-leading-dash", "_leading_underscore", "x" * 128],
)
def test_valid_task_ids_are_returned_unchanged(task_id: str) -> None:
    assert validate_task_id(task_id) == task_id


def test_invalid_name_error_is_a_value_error() -> None:
    assert issubclass(InvalidNameError, ValueError)


def test_max_task_id_length_matches_design() -> None:
    assert MAX_TASK_ID_LENGTH == 128


@pytest.mark.parametrize(
    "task_id",
    [
        "a.b",
        "a*",
        "a>b",
        ">",
        "*",
        "has space",
        " lead",
        "trail ",
        "tab\there",
        "new\nline",
        "ümlaut",
        "a/b",
        "a:b",
    ],
)
def test_task_id_with_forbidden_characters_is_rejected_with_a_fix(task_id: str) -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_task_id(task_id)
    message = str(info.value)
    assert repr(task_id) in message  # names the offending id
    assert "not a valid id" in message  # says what is wrong
    assert "letters, digits, '-' or '_'" in message  # says how to fix it
    assert "no '.', '*', '>' or spaces" in message


def test_empty_task_id_is_rejected_with_a_fix() -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_task_id("")
    message = str(info.value)
    assert "empty" in message
    assert "1 to 128" in message


def test_task_id_one_over_the_limit_is_rejected_with_length_and_limit() -> None:
    too_long = "x" * 129
    with pytest.raises(InvalidNameError) as info:
        validate_task_id(too_long)
    message = str(info.value)
    assert "129 characters" in message
    assert "limit is 128" in message
    # a long id is shortened in the message rather than dumped whole
    assert too_long not in message
    assert "..." in message


@pytest.mark.parametrize("value", [None, 42, 4.2, b"bytes", ["a"], {"a": 1}])
def test_non_string_task_id_is_rejected_naming_the_type(value: object) -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_task_id(value)
    message = str(info.value)
    assert "must be a string" in message
    assert type(value).__name__ in message


# -- tool names ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["search", "write_report", "llm", "a", "9lives", "tool-1", "X" * 64]
)
def test_valid_tool_names_are_returned_unchanged(name: str) -> None:
    assert validate_tool_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["_private", "-dash", "_submit", "", "a.b", "a*", "a>", "has space", "x" * 65, "é"],
)
def test_invalid_tool_names_are_rejected_with_a_fix(name: str) -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_tool_name(name)
    message = str(info.value)
    assert "not valid" in message
    assert f"1 to {MAX_TOOL_NAME_LENGTH}" in message
    assert "starting with a letter or digit" in message


@pytest.mark.parametrize("value", [None, 1, ["search"]])
def test_non_string_tool_name_is_rejected_naming_the_type(value: object) -> None:
    with pytest.raises(InvalidNameError, match=f"must be a string, got {type(value).__name__}"):
        validate_tool_name(value)


def test_submit_dead_letter_tool_can_never_clash_with_a_real_tool() -> None:
    with pytest.raises(InvalidNameError):
        validate_tool_name(SUBMIT_DEAD_LETTER)


# -- names --------------------------------------------------------------------


def test_default_names_match_design() -> None:
    names = Names()
    assert names == DEFAULT_NAMES
    assert names.prefix == "tether"
    # subjects
    assert names.submit_subject("t-1") == "tether.submit.t-1"
    assert names.submit_subjects == "tether.submit.*"
    assert names.submitted_id("tether.submit.t-1") == "t-1"
    assert names.work_subject("search") == "tether.work.search"
    assert names.work_subjects == "tether.work.>"
    assert names.status_subject("report-42") == "tether.status.report-42"
    assert names.status_subjects == "tether.status.>"
    assert names.dead_letter_subject("search") == "tether.dead.search"
    assert names.dead_letter_subjects == "tether.dead.>"
    assert names.api_subject("submit") == "tether.api.submit"
    # streams
    assert names.submit_stream == "TETHER_SUBMIT"
    assert names.work_stream == "TETHER_WORK"
    assert names.status_stream == "TETHER_STATUS"
    assert names.dead_letter_stream == "TETHER_DLQ"
    # buckets
    assert names.tasks_bucket == "tether-tasks"
    assert names.checkpoints_bucket == "tether-checkpoints"
    assert names.heartbeats_bucket == "tether-heartbeats"
    assert names.blobs_bucket == "tether-blobs"
    assert names.tools_bucket == "tether-tools"


def _all_names(names: Names) -> list[str]:
    return [
        names.submit_subjects,
        names.work_subject("search"),
        names.work_subjects,
        names.status_subject("T"),
        names.status_subjects,
        names.dead_letter_subject("search"),
        names.dead_letter_subjects,
        names.api_subject("get"),
        names.submit_stream,
        names.work_stream,
        names.status_stream,
        names.dead_letter_stream,
        names.tasks_bucket,
        names.checkpoints_bucket,
        names.heartbeats_bucket,
        names.blobs_bucket,
        names.tools_bucket,
    ]


def test_prefix_changes_every_subject_stream_and_bucket() -> None:
    names = Names(prefix="acme")
    assert names.submit_subject("t") == "acme.submit.t"
    assert names.submitted_id("acme.submit.t") == "t"
    assert names.work_subject("search") == "acme.work.search"
    assert names.work_subjects == "acme.work.>"
    assert names.status_subject("T") == "acme.status.T"
    assert names.status_subjects == "acme.status.>"
    assert names.dead_letter_subject("search") == "acme.dead.search"
    assert names.dead_letter_subjects == "acme.dead.>"
    assert names.api_subject("get") == "acme.api.get"
    assert names.submit_stream == "ACME_SUBMIT"
    assert names.work_stream == "ACME_WORK"
    assert names.status_stream == "ACME_STATUS"
    assert names.dead_letter_stream == "ACME_DLQ"
    assert names.tasks_bucket == "acme-tasks"
    assert names.checkpoints_bucket == "acme-checkpoints"
    assert names.heartbeats_bucket == "acme-heartbeats"
    assert names.blobs_bucket == "acme-blobs"
    assert names.tools_bucket == "acme-tools"
    # nothing still carries the default prefix
    for name in _all_names(names):
        assert "tether" not in name.lower(), name


def test_two_prefixes_share_no_name() -> None:
    assert not set(_all_names(Names(prefix="one"))) & set(_all_names(Names(prefix="two")))


def test_prefix_with_dash_gives_valid_stream_names() -> None:
    names = Names(prefix="my-app")
    assert names.submit_stream == "MY_APP_SUBMIT"
    assert names.dead_letter_stream == "MY_APP_DLQ"
    assert names.tasks_bucket == "my-app-tasks"
    assert names.submit_subject("t") == "my-app.submit.t"
    for stream in (
        names.submit_stream,
        names.work_stream,
        names.status_stream,
        names.dead_letter_stream,
    ):
        assert re.fullmatch(r"[A-Z0-9_]+", stream), stream


def test_consumer_names() -> None:
    assert DEFAULT_NAMES.tool_consumer("search") == "tool-search"
    assert DEFAULT_NAMES.dispatcher_consumer == "dispatcher"


def test_step_key_and_once_key() -> None:
    assert Names.step_key("report-42", 0) == "report-42.0"
    assert Names.step_key("T", 12) == "T.12"
    assert Names.once_key("T", 3, "send-email") == "T.3.once.send-email"


@pytest.mark.parametrize(
    ("generation", "expected"),
    [(1, "T.4"), (0, "T.4"), (2, "T.4.g2"), (3, "T.4.g3"), (10, "T.4.g10")],
)
def test_step_msg_id_carries_generation_after_the_first(generation: int, expected: str) -> None:
    assert Names.step_msg_id("T", 4, generation) == expected


def test_step_msg_id_default_generation_is_first() -> None:
    assert Names.step_msg_id("report-42", 0) == "report-42.0"
    assert DEFAULT_NAMES.step_msg_id("report-42", 1) == "report-42.1"


def test_generations_never_collide() -> None:
    ids = {Names.step_msg_id("T", step, gen) for step in range(5) for gen in range(1, 5)}
    assert len(ids) == 20


def test_resume_msg_id_differs_from_the_step_msg_id() -> None:
    assert Names.resume_msg_id("T", 2) == "T.2.input"
    assert Names.resume_msg_id("T", 2, 3) == "T.2.g3.input"
    assert Names.resume_msg_id("T", 2) != Names.step_msg_id("T", 2)


def test_event_msg_id() -> None:
    assert Names.event_msg_id("T", "submitted", None, 1) == "T.task.submitted.g1.0"
    assert Names.event_msg_id("T", "step_retrying", 2, 3, n=4) == "T.2.step_retrying.g3.4"
    assert Names.event_msg_id("T", "completed", None, 1) != Names.event_msg_id(
        "T", "completed", None, 2
    )
