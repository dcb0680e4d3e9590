"""The API's verbs: request and reply types, in one table the routes and the contract share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.schemas.api import (
    BlobReply,
    BlobRequest,
    ContinueRequest,
    ForkRequest,
    InputAnswer,
    ListReply,
    ListRequest,
    MessageRequest,
    ResultReply,
    ResultRequest,
    SubmitReply,
    SubmitRequest,
    TaskRequest,
    UpdateAgentRequest,
)
from tether.schemas.builds import BuildsReply, BuildsRequest, DeployRequest
from tether.schemas.records import TaskRecord


@dataclass(frozen=True)
class Verb:
    name: str
    request: type[Any]
    reply: type[Any]
    description: str
    operator: bool = False
    """Only the operator's NATS user may ask it: no other role of deploy/nats/roles.conf
    (or app user of tenants.conf) may publish to its subject, whatever the API checks."""


VERBS = {
    verb.name: verb
    for verb in [
        Verb("submit", SubmitRequest, SubmitReply, "Start a task (id generated if left out)."),
        Verb("get", TaskRequest, TaskRecord, "The task record."),
        Verb("result", ResultRequest, ResultReply, "The outcome, waiting up to timeout_ms for it."),
        Verb("list", ListRequest, ListReply, "Tasks, oldest first, by status, a page at a time."),
        Verb("cancel", TaskRequest, TaskRecord, "Cancel an unfinished task."),
        Verb("input", InputAnswer, TaskRecord, "Answer a task that is waiting for input."),
        Verb("retry", TaskRequest, TaskRecord, "Run a failed task again from its failed step."),
        Verb("fork", ForkRequest, TaskRecord, "A new task that runs a task again from a step."),
        Verb("continue", ContinueRequest, SubmitReply, "Ask a finished agent task a follow-up."),
        Verb("message", MessageRequest, TaskRecord, "Tell a running agent task something."),
        Verb("update_agent", UpdateAgentRequest, TaskRecord, "Change a running agent's settings."),
        Verb("blob", BlobRequest, BlobReply, "The value a blob reference names, if it fits."),
        Verb("builds", BuildsRequest, BuildsReply, "The builds workers run (a list only)."),
        Verb(
            "deploy",
            DeployRequest,
            BuildsReply,
            "The operator's: ramp, promote or roll back a build (where new tasks go).",
            operator=True,
        ),
    ]
}
