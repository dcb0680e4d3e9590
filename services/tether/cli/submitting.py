"""What `tether submit` does once its options are parsed: the task to submit, from the
arguments, a file or an agent's question; then the submit, and with `--wait` the follow."""

from __future__ import annotations

import sys
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec

from tether.agents.conversation import as_step
from tether.cli import render
from tether.cli.common import fail
from tether.cli.following import follow
from tether.cli.running import ExitCode, connected
from tether.errors import UnservedToolWarning
from tether.schemas.api import SubmitReply, SubmitRequest
from tether.schemas.plans import StepSpec


def parse_step(arg: str) -> StepSpec:
    """`TOOL` or `TOOL=JSON`; a tool name never contains '='."""
    tool, sep, raw = arg.partition("=")
    if not sep:
        return StepSpec(tool=tool)
    try:
        return StepSpec(tool=tool, input=msgspec.json.decode(raw))
    except msgspec.DecodeError as exc:
        fail(
            f"the input of step {arg!r} is not JSON ({exc}): "
            'quote the whole step, e.g. \'search={"query": "AI"}\''
        )


def parse_json(raw: str, what: str) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        fail(f"{what} is not JSON ({exc}): quote it, e.g. '{{\"approved\": true}}'")


def parse_meta(pairs: list[str]) -> dict[str, str]:
    metadata = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--meta {pair!r} is not KEY=VALUE: write e.g. --meta user=alice")
        metadata[key] = value
    return metadata


def read_task_file(path: str) -> SubmitRequest:
    """A `TaskSubmit`-like document (the id may be left out); '-' reads stdin."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        fail(f"cannot read the task file {path!r}: {exc.strerror or exc}")
    try:
        return msgspec.json.decode(data, type=SubmitRequest)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        fail(
            f"the task file {path!r} is not a task ({exc}): "
            'write {"steps": [{"tool": "search", "input": {...}}, ...]}'
        )


def agent_step(agent: str, words: list[str], budget: int | None) -> StepSpec:
    """`tether submit --agent NAME QUESTION...`: the agent's first turn."""
    if not words:
        fail(f"no question: write e.g. tether submit --agent {agent} 'What changed in 2026?'")
    start: dict[str, Any] = {"input": " ".join(words)}
    if budget is not None:
        start["token_budget"] = budget
    return StepSpec(tool=agent, input=start)


def build_request(
    steps: list[str],
    file: str | None,
    task_id: str | None,
    meta: list[str],
    deadline: float | None,
    agent: str | None = None,
    budget: int | None = None,
    strict: bool = True,
) -> SubmitRequest:
    """The task to submit; options on the command line win over the file's fields."""
    if file is not None and (steps or agent):
        fail("give the steps either as arguments (or --agent) or with --file, not both")
    if file is None and not steps and agent is None:
        fail("no steps: name tools to run, e.g. 'tether submit search summarize', or use --file")
    if budget is not None and agent is None:
        fail("--budget is a token budget for an agent: use it with --agent NAME")
    if agent is not None:
        base = SubmitRequest(steps=[agent_step(agent, steps, budget)])
    elif file:
        base = read_task_file(file)
    else:
        base = SubmitRequest(steps=[parse_step(s) for s in steps])
    if deadline is not None and deadline <= 0:
        fail(f"--deadline {deadline} is not a positive number of seconds")
    return SubmitRequest(
        steps=base.steps,
        task_id=task_id or base.task_id,
        metadata={**base.metadata, **parse_meta(meta)},
        deadline_ms=int(deadline * 1000) if deadline is not None else base.deadline_ms,
        strict=strict,
    )


async def submit(
    nats: str,
    prefix: str,
    request: SubmitRequest,
    wait: bool,
    as_json: bool,
    follow_up: str | None = None,
) -> ExitCode:
    async with connected(nats, prefix) as client:
        deadline = request.deadline_ms
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", UnservedToolWarning)
            if follow_up is not None:
                start = as_step(request.steps[0].input)
                handle = await client.continue_agent(
                    follow_up,
                    start.input or "",
                    agent=request.steps[0].tool or None,
                    token_budget=start.token_budget,
                    new_task_id=request.task_id,
                    metadata=request.metadata,
                    deadline=None if deadline is None else timedelta(milliseconds=deadline),
                )
            else:
                handle = await client.submit(
                    request.steps,
                    task_id=request.task_id,
                    metadata=request.metadata,
                    deadline=None if deadline is None else timedelta(milliseconds=deadline),
                    strict=request.strict,
                )
        for warning in said:
            render.warn(str(warning.message))
        if as_json:
            render.print_json(SubmitReply(task_id=handle.task_id))
        else:
            render.print_lines([handle.task_id])
        if not wait:
            return ExitCode.OK
        view = render.event_view(as_json)
        return await follow(client, handle.task_id, view, submitted=True)
