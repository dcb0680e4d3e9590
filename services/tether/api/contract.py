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
from tether.schemas.events import AnyStatusEvent
from tether.schemas.names import DEFAULT_NAMES, Names
from tether.schemas.tasks import (
    Checkpoint,
    DeadLetter,
    Heartbeat,
    HeldStep,
    TaskRecord,
    TaskSubmit,
    TokenChunk,
    ToolInfo,
    WorkerBeat,
    WorkMessage,
)

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
    "HeldStep": HeldStep,
    "TokenChunk": TokenChunk,
    "ErrorReply": ErrorReply,
    **{verb.request.__name__: verb.request for verb in VERBS.values()},
    **{verb.reply.__name__: verb.reply for verb in VERBS.values()},
}


def json_schemas() -> dict[str, dict[str, Any]]:
    """One self-contained JSON Schema per public wire message, by file stem."""
    return {name: msgspec.json.schema(kind) for name, kind in sorted(MESSAGES.items())}


def _channels(names: Names) -> list[tuple[str, str, str, str, str]]:
    """(title, address, direction, payload, description) of every channel."""
    channels = [
        (
            "submit",
            names.submit_subject,
            "receive",
            "TaskSubmit",
            "Submit a task (JetStream, stream TETHER_SUBMIT). Set Nats-Msg-Id to the task id.",
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
            "One step to run (stream TETHER_WORK, durable consumer tool-<tool>). "
            "Nats-Msg-Id is <task_id>.<step>.",
        ),
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
                "_INBOX.{reply_to}",
                "send",
                f"{verb.reply.__name__}|ErrorReply",
                f"Reply to {names.api_subject(verb.name)}: the result or an error.",
            )
        )
    return channels


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
    for key, message in document["components"]["messages"].items():
        names = payloads[key.split(":")[0]].split("|")
        refs = [{"$ref": f"#/components/schemas/{_schema_name(n)}"} for n in names]
        message["payload"] = refs[0] if len(refs) == 1 else {"oneOf": refs}
    document["components"]["schemas"] = dict(sorted(components.items()))
    return document


def _schema_name(message: str) -> str:
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
