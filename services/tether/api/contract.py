"""Export the wire contract: a JSON Schema per public message and an AsyncAPI 3.0 document.

`python -m tether.api.contract` (`just schemas`) writes them under `schemas/`; a
test fails when the checked-in files are stale. FastStream generates the AsyncAPI
document's channels and operations; its payload schemas (pydantic-based, blind to
msgspec) are replaced by the msgspec-generated ones.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
from faststream.nats import NatsBroker
from faststream.specification import AsyncAPI

from tether.api.verbs import VERBS
from tether.schemas.api import ErrorReply
from tether.schemas.builds import BuildInfo, BuildTool, Deployment
from tether.schemas.events import AnyStatusEvent
from tether.schemas.failures import FailureType
from tether.schemas.names import DEFAULT_NAMES, Names
from tether.schemas.plans import TaskSubmit
from tether.schemas.records import Checkpoint, TaskRecord
from tether.schemas.runs import StepRun
from tether.schemas.sessions import RunStarted, SessionMessage, SessionState
from tether.schemas.work import DeadLetter, Timer, TokenChunk, WorkMessage
from tether.schemas.workers import Heartbeat, HeldStep, ToolInfo, WorkerBeat

OUT = Path(__file__).resolve().parents[3] / "schemas"
"""The repository's schemas/ folder: the any-language contract, beside its protocol page."""
VERSION = "0.1.0"

MESSAGES: dict[str, Any] = {
    "TaskSubmit": TaskSubmit,
    "StatusEvent": AnyStatusEvent,
    "TaskRecord": TaskRecord,
    "WorkMessage": WorkMessage,
    "Checkpoint": Checkpoint,
    "Heartbeat": Heartbeat,
    "DeadLetter": DeadLetter,
    "ToolInfo": ToolInfo,
    "WorkerBeat": WorkerBeat,
    "BuildInfo": BuildInfo,
    "BuildTool": BuildTool,
    "Deployment": Deployment,
    "HeldStep": HeldStep,
    "StepRun": StepRun,
    "TokenChunk": TokenChunk,
    "Timer": Timer,
    "SessionMessage": SessionMessage,
    "SessionState": SessionState,
    "RunStarted": RunStarted,
    "ErrorReply": ErrorReply,
    "FailureType": FailureType,
    **{verb.request.__name__: verb.request for verb in VERBS.values()},
    **{verb.reply.__name__: verb.reply for verb in VERBS.values()},
}


BARE: dict[str, dict[str, Any]] = {
    "Empty": {"description": "No payload: the subject is the message.", "maxLength": 0},
    "Bytes": {"description": "Raw bytes (an Object Store chunk or meta message)."},
}
"""Payloads that are no JSON message: in the AsyncAPI document only."""


def json_schemas() -> dict[str, dict[str, Any]]:
    """One self-contained JSON Schema per public wire message, by file stem."""
    return {name: msgspec.json.schema(kind) for name, kind in sorted(MESSAGES.items())}


def _channels(names: Names) -> list[tuple[str, str, str, str, str]]:
    """(title, address, direction, payload, description) of every channel."""
    channels = [
        (
            "submit",
            names.submit_subject("{task_id}"),
            "receive",
            "TaskSubmit",
            "Submit a task (JetStream, stream TETHER_SUBMIT) on its own id's subject; the "
            "payload's task_id must be that id. Set Nats-Msg-Id to the task id.",
        ),
        (
            "status",
            names.status_subject("{task_id}"),
            "send",
            "StatusEvent",
            "Status events of one task (stream TETHER_STATUS): replay for history, subscribe live.",
        ),
        (
            "work",
            names.work_subject("{tool}"),
            "receive",
            "WorkMessage",
            "One step to run (stream TETHER_WORK, durable consumer tool-<tool>). Nats-Msg-Id "
            "is <task_id>.<step>, then .b<branch> for a branch of a parallel step, then "
            ".g<N> for generation N >= 2, then .input for the message an answer sends to "
            "resume a waiting step (e.g. t1.3.b0.g2).",
        ),
        (
            "timers.request",
            names.schedule_subject,
            "send",
            "WorkMessage|Timer",
            "A request for a timer (stream TETHER_WORK, the dispatchers' durable consumer "
            "`schedules`): headers Tether-Timer (its id: a sleeping step's Nats-Msg-Id, "
            "<task_id>.deadline, <task_id>.<step>.input.g<N>), Tether-Timer-At (RFC 3339, "
            "UTC, whole seconds) and, for a sleeping step's WorkMessage, Tether-Wake (the "
            "work subject it goes to). A request again replaces the timer.",
        ),
        (
            "timers",
            names.timer_subject("{timer_id}"),
            "receive",
            "WorkMessage|Timer",
            "A message schedule in TETHER_TIMERS (Nats-Schedule headers, nats-server "
            "2.12+), written by the dispatchers alone from requests; fires onto "
            "<prefix>.fired.<timer_id>.",
        ),
        (
            "timers.fired",
            names.fired_subject("{timer_id}"),
            "receive",
            "WorkMessage|Timer",
            "A timer that fired (the dispatchers' durable consumer `timers` on "
            "TETHER_TIMERS): a WorkMessage (Tether-Wake set) goes to its work subject "
            "with Nats-Msg-Id <timer_id>; a Timer fails its task if it is still due.",
        ),
        (
            "control.cancelled",
            names.cancel_notice_subject("{task_id}"),
            "send",
            "Empty",
            "Core NATS, no payload: the task was cancelled; every worker stops its running "
            "step at once.",
        ),
        (
            "worker.alive",
            names.alive_subject("{worker}"),
            "receive",
            "Empty",
            "Core NATS request/reply, no payload, served by the worker whose key in "
            "<prefix>-workers is {worker} (if its WorkerBeat says answers): an empty reply "
            "means alive; the server's no responders (status 503) means its connection is gone.",
        ),
        (
            "ended",
            names.ended_subject("{task_id}", "{status}"),
            "send",
            "Empty",
            "Core NATS, no payload: the task's record became {status} (completed, failed or "
            "cancelled). Subscribe to <prefix>.ended.*.completed for every completion alone; "
            "a hint, so read the record.",
        ),
        (
            "index",
            names.index_subject("{status}", 0, "{task_id}").replace(
                "0000000000000000", "{created_us}"
            ),
            "send",
            "Empty",
            "The status index (stream TETHER_INDEX, one message per subject): a task's row "
            "under its status and creation time (microseconds, 16 digits). Whoever changes "
            "a record's status stores the new row (its payload the record's revision, with a "
            "PubAck) and deletes the old one by its sequence (no rollup: the stream refuses it).",
        ),
        *_buckets(names),
        (
            "tokens",
            names.tokens_subject("{task_id}"),
            "send",
            "TokenChunk",
            "Text a task's steps stream, e.g. an agent's tokens (stream TETHER_TOKENS, one "
            "hour). Replay from the start or resume after a stream sequence.",
        ),
        (
            "dead",
            names.dead_letter_subject("{tool}"),
            "send",
            "DeadLetter",
            "Steps and submissions Tether gave up on (stream TETHER_DLQ).",
        ),
        (
            "session.in",
            names.session_in_subject("{session_id}", "{message_id}"),
            "send",
            "SessionMessage",
            "A message to a session (stream TETHER_SESSIONS, one message per subject): "
            "publish with Nats-Expected-Last-Subject-Sequence 0 and Nats-Msg-Id "
            "<session_id>.<message_id>; edit or withdraw it by publishing again expecting "
            "its sequence, refused once a dispatcher rewrote it with taken_by or refused.",
        ),
        (
            "session.out",
            names.session_out_subject("{session_id}", "{run}"),
            "send",
            "RunStarted",
            "A session's run n began: its task, which follows by its own status and "
            "tokens subjects. Written once, by the dispatchers.",
        ),
    ]
    for verb in VERBS.values():
        channels.append(
            (
                f"api.{verb.name}",
                names.api_subject(verb.name),
                "receive",
                verb.request.__name__,
                f"Request/reply: {verb.description}",
            )
        )
        channels.append(
            (
                f"api.{verb.name}.reply",
                "{inbox}.{reply_to}",
                "send",
                f"{verb.reply.__name__}|ErrorReply",
                f"Reply to {names.api_subject(verb.name)}: the result or an error, on the "
                "requester's inbox (_INBOX by default; _INBOX_<user> under "
                "deploy/nats/roles.conf).",
            )
        )
    return channels


def _buckets(names: Names) -> list[tuple[str, str, str, str, str]]:
    """The key-value buckets and the Object Store, as the subjects their entries are."""
    kv = names.kv_subject
    return [
        (
            "kv.tasks",
            kv(names.tasks_bucket, "{task_id}"),
            "send",
            "TaskRecord",
            "A task's record: created create-only, then changed by compare-and-set only.",
        ),
        (
            "kv.checkpoints",
            kv(names.checkpoints_bucket, "{task_id}.{step}"),
            "send",
            "Checkpoint",
            "A step's output, written create-only; keys <task_id>.<step>, "
            "<task_id>.<step>.b<branch>, and <task_id>.<step>[.b<branch>].once.<name> "
            "for ctx.once.",
        ),
        (
            "kv.heartbeats",
            kv(names.heartbeats_bucket, "{task_id}"),
            "send",
            "Heartbeat",
            "The running step's worker and progress.",
        ),
        (
            "kv.runs",
            kv(names.heartbeats_bucket, "{task_id}={step}"),
            "send",
            "StepRun",
            "A step's last run that started, or failed: which attempt a delivery that "
            "came back is (keys <task_id>=<step> and <task_id>=<step>=b<branch>).",
        ),
        (
            "kv.tools",
            kv(names.tools_bucket, "{tool}"),
            "send",
            "ToolInfo",
            "A tool some worker serves.",
        ),
        (
            "kv.workers",
            kv(names.workers_bucket, "{worker}"),
            "send",
            "WorkerBeat",
            "A worker's beat, every half second while it runs.",
        ),
        (
            "kv.workers.held",
            kv(names.workers_bucket, "{worker}.{msg_id}"),
            "send",
            "HeldStep",
            "A step the worker holds (keyed by the step message's Nats-Msg-Id).",
        ),
        (
            "kv.builds",
            kv(names.builds_bucket, "{build}.{tool}"),
            "send",
            "BuildTool",
            "One tool of one build, written once (create-only) by the build's first worker "
            "that serves it: the bucket's stream refuses a second message on a key.",
        ),
        (
            "kv.sessions",
            kv(names.sessions_bucket, "{session_id}"),
            "send",
            "SessionState",
            "A session: its agent, runs and the messages waiting; written by the "
            "dispatchers only, by compare-and-set.",
        ),
        (
            "blobs",
            f"$O.{names.blobs_bucket}.>",
            "send",
            "Bytes",
            "The Object Store of values over the blob threshold, one object per value "
            "named sha256-<hex>: the value's JSON, exactly.",
        ),
    ]


def asyncapi(names: Names = DEFAULT_NAMES) -> dict[str, Any]:
    broker = NatsBroker("nats://localhost:4222")
    payloads = {}
    for title, address, direction, payload, description in _channels(names):
        payloads[title] = payload
        if direction == "receive":
            broker.subscriber(address, title=title, description=description)(_placeholder)
        else:
            broker.publisher(address, title=title, description=description, schema=dict)
    document: dict[str, Any] = (
        AsyncAPI(
            broker,
            title="Tether",
            version=VERSION,
            schema_version="3.0.0",
            description="Durable execution for AI agents on NATS JetStream: the wire contract.",
        )
        .to_specification()
        .to_jsonable()
    )
    return _with_msgspec_payloads(document, payloads)


async def _placeholder(body: dict[str, Any]) -> None:
    """Stands for a subscriber in the document; never run."""


def _with_msgspec_payloads(document: dict[str, Any], payloads: dict[str, str]) -> dict[str, Any]:
    kinds = list(MESSAGES.values())
    tops, components = msgspec.json.schema_components(
        kinds, ref_template="#/components/schemas/{name}"
    )
    for name, kind, top in zip(MESSAGES, kinds, tops, strict=True):
        if not isinstance(kind, type):  # a union has no component of its own
            components[_schema_name(name)] = top
    components.update(BARE)
    for key, message in document["components"]["messages"].items():
        names = payloads[key.split(":")[0]].split("|")
        refs = [{"$ref": f"#/components/schemas/{_schema_name(n)}"} for n in names]
        message["payload"] = refs[0] if len(refs) == 1 else {"oneOf": refs}
    document["components"]["schemas"] = dict(sorted(components.items()))
    return document


def _schema_name(message: str) -> str:
    if message in BARE:
        return message
    kind = MESSAGES[message]
    return message if isinstance(kind, type) else "AnyStatusEvent"


def files() -> dict[Path, str]:
    """Every exported file and its text."""
    out = {
        OUT / "jsonschema" / f"{name}.json": _dump(schema)
        for name, schema in json_schemas().items()
    }
    out[OUT / "asyncapi.json"] = _dump(asyncapi())
    return out


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def main() -> None:
    for path, text in files().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(OUT.parent)}", file=sys.stderr)


if __name__ == "__main__":
    main()
