"""Tether's exceptions: every class below `TetherError`, wherever it lives (its module in
parentheses, `agents` for `tether.agents.errors`; the rest are here). A unit test fails
on a subclass this tree leaves out.

    TetherError
    ├── NatsUnavailableError       NATS could not be reached, or did not answer in time
    │   └── NotProvisionedError    no installation under the prefix (or it may not be made)
    ├── RevisionConflictError      a compare-and-set lost: the key changed since it was read
    ├── JetStreamError             JetStream refused a request (`code`, `err_code` kept)
    ├── NotAllowedError            NATS refused this user a subject (its role's permissions)
    ├── MessageTooLargeError       a message or stored value larger than NATS allows
    ├── BlobNotFoundError          a `{"$blob": ...}` reference to nothing stored
    ├── TaskError                  something about one task
    │   ├── TaskNotFoundError
    │   ├── TaskExistsError        a submit reused a task id
    │   ├── TaskConflictError      the task is not in a state that allows this
    │   ├── TaskFailedError        waited for a result, the task failed
    │   ├── TaskCancelledError     waited for a result, the task was cancelled
    │   └── TaskTimeoutError       waited for a result longer than the timeout
    ├── SessionError               something about one session
    │   ├── SessionClosedError     the session was closed: it takes no more messages
    │   ├── MessageTakenError      an edit or withdrawal of a message a run took already
    │   └── MessageRefusedError    the session refused a message (`reason` says why)
    ├── InvalidTaskError           a plan or input that cannot be run
    │   └── InvalidRequestError    (tether.api.errors) an API body of the wrong shape
    ├── InvalidNameError           (tether.schemas.ids) a task id or tool name unfit for subjects
    ├── NatsServerError            (tether.nats.server) the embedded nats-server did not start
    ├── GatewayError               (tether.gateway) the MCP gateway could not serve
    ├── AnswerError                (tether.gateway.inputs) an elicitation answer unfit to use
    ├── DashboardError             (tether.ui) the dashboard could not start
    ├── SaverNotSetUpError         (tether.integrations.langgraph) no checkpoint bucket yet
    ├── AppLoadError               (tether.cli.loading) MODULE:ATTR names no App
    ├── DefinitionError            a tool, agent or app defined so that it cannot run
    └── StepError                  raised by tools
        ├── TerminalError          fail the task now, do not retry
        │   ├── GuardrailTripped           an agent's guardrail refused its input or answer
        │   ├── BudgetExceeded             (agents) the task tree's budget is spent
        │   │   └── TokenBudgetExceeded    (agents) its token budget is spent
        │   ├── BudgetAboveCeiling         (agents) a run asked for more than its agent's
        │   ├── MaxTurnsExceeded           (agents) no answer within `max_turns` turns
        │   ├── InvalidOutput              (agents) answers unfit for the `output_type`
        │   ├── ForeignConversation        (agents) a follow-up of another caller's task
        │   ├── ModelAuthError             (agents) the endpoint refused the API key
        │   ├── ContextLengthExceeded      (agents) past the model's context window
        │   ├── ModelRequestError          (agents) the endpoint rejected the request
        │   │   └── StructuredOutputsRefused   (agents) it rejected `json_schema`
        │   ├── ModelOutputTruncated       (agents) cut off at the output token limit
        │   ├── ModelContentFiltered       (agents) stopped by the content filter
        │   ├── ModelQuotaExceeded         (agents) the account has no quota left
        │   └── JournalDiverged            (tether.integrations.journal) a foreign agent's
        │                                  run took another path than its journal
        └── RetryableError         retry the step, optionally after `retry_after`
            ├── RateLimited                (agents) a 429, waited out in place
            └── ModelUnreachable           (agents) no connection to the model's endpoint

Tools may raise any exception: everything but TerminalError is retried.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar

from tether.durations import as_timedelta

if TYPE_CHECKING:
    from tether.schemas.records import ErrorInfo


class TetherError(Exception):
    """Root of every error Tether raises."""


class NatsUnavailableError(TetherError):
    pass


class RevisionConflictError(TetherError):
    """A compare-and-set (or a create) found the key at another revision than expected:
    an ordinary outcome of a race, for the caller to decide on, never an outage."""

    def __init__(self, subject: str = "", description: str = "") -> None:
        where = f" on {subject}" if subject else ""
        super().__init__(f"lost a compare-and-set{where}: {description or 'wrong revision'}")
        self.subject = subject


class JetStreamError(TetherError):
    """JetStream answered a request with an error: `code` is its HTTP-like status,
    `err_code` JetStream's own number (see `tether.nats.codes`)."""

    def __init__(self, description: str, code: int | None, err_code: int | None) -> None:
        super().__init__(f"JetStream refused the request ({description}, err_code {err_code})")
        self.description = description
        self.code = code
        self.err_code = err_code


class NotAllowedError(TetherError):
    """The NATS server refused this connection's user a publish (a permissions
    violation): its role may not do this, so trying again cannot help."""

    def __init__(self, subject: str, refusal: str) -> None:
        super().__init__(
            f"NATS refused this user {subject!r} ({refusal}): its role may not do this; "
            "allow it to the user (deploy/nats/roles.conf) or act as a user that may"
        )
        self.subject = subject
        self.refusal = refusal


class NotProvisionedError(NatsUnavailableError):
    """No Tether installation (or only part of one) lives under the prefix, or this NATS
    user may not create or update it (`refused`: the server's words)."""

    def __init__(self, prefix: str, missing: list[str], refused: str | None = None) -> None:
        self.prefix = prefix
        self.missing = missing
        self.refused = refused
        what = "nothing of it is there" if len(missing) > 4 else "missing: " + ", ".join(missing)
        if refused is None:
            message = (
                f"no Tether installation under prefix {prefix!r} ({what}): check --prefix / "
                "TETHER_PREFIX, or create it with 'tether provision' (a dispatcher or worker "
                "also creates it when it starts)"
            )
        elif missing:
            message = (
                f"no Tether installation under prefix {prefix!r} ({what}), and this NATS "
                f"user may not create it ({refused}): an operator must run 'tether "
                "provision' as a user allowed to create streams, then start this again"
            )
        else:
            message = (
                f"this NATS user may not create or update the streams under prefix "
                f"{prefix!r} ({refused}): run 'tether provision' as a user allowed to "
                "(the operator in deploy/nats/roles.conf)"
            )
        super().__init__(message)


class InvalidTaskError(TetherError, ValueError):
    pass


class MessageTooLargeError(TetherError, ValueError):
    """Raised before sending, so the server never sees (and never disconnects over) it."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(
            f"{what} is {size:,} bytes; at most {limit:,} fit (the NATS server's "
            "max_payload, less room for headers and replies): store large data elsewhere "
            "and pass a reference"
        )
        self.size = size
        self.limit = limit


class BlobNotFoundError(TetherError, LookupError):
    def __init__(self, ref: str) -> None:
        super().__init__(f"blob {ref!r} not found in the Object Store (deleted, or never stored)")
        self.ref = ref


class TaskError(TetherError):
    def __init__(self, task_id: str, message: str) -> None:
        super().__init__(message)
        self.task_id = task_id


class TaskNotFoundError(TaskError, LookupError):
    def __init__(self, task_id: str) -> None:
        super().__init__(task_id, f"task {task_id!r} not found: check the id with 'tether ls'")


class TaskExistsError(TaskError):
    """The id names a task, or one `tether gc` removed so lately that JetStream still
    remembers its messages (`free_at`: when the id is free again)."""

    def __init__(self, task_id: str, free_at: datetime | None = None) -> None:
        message = (
            f"task {task_id!r} already exists: follow it with Client.get({task_id!r}) "
            "or submit with a new task_id"
        )
        if free_at is not None:
            message = (
                f"task id {task_id!r} was removed by gc so lately that JetStream's duplicate "
                "window still remembers its messages (a new task under it would hang): it is "
                f"free again at {free_at:%H:%M:%S} UTC; wait, or submit with a new task_id"
            )
        super().__init__(task_id, message)
        self.free_at = free_at


class TaskConflictError(TaskError):
    pass


class TaskFailedError(TaskError):
    def __init__(self, task_id: str, error: ErrorInfo | None) -> None:
        detail = f"{error.type}: {error.message}" if error else "unknown error"
        super().__init__(task_id, f"task {task_id!r} failed: {detail}")
        self.error = error


class TaskCancelledError(TaskError):
    def __init__(self, task_id: str) -> None:
        super().__init__(task_id, f"task {task_id!r} was cancelled")


class TaskTimeoutError(TaskError, TimeoutError):
    pass


class SessionError(TetherError):
    def __init__(self, session_id: str, message: str) -> None:
        super().__init__(message)
        self.session_id = session_id


class SessionClosedError(SessionError):
    def __init__(self, session_id: str) -> None:
        super().__init__(
            session_id,
            f"session {session_id!r} is closed: it takes no more messages (start another "
            "session id for a new conversation)",
        )


class MessageTakenError(SessionError):
    def __init__(self, session_id: str, message_id: str, how: str) -> None:
        super().__init__(
            session_id,
            f"message {message_id!r} of session {session_id!r} can no longer be changed: "
            f"{how} (send a new message instead)",
        )
        self.message_id = message_id


class MessageRefusedError(SessionError):
    def __init__(self, session_id: str, message_id: str, reason: str) -> None:
        super().__init__(
            session_id, f"message {message_id!r} of session {session_id!r} was refused: {reason}"
        )
        self.message_id = message_id
        self.reason = reason


class DefinitionError(TetherError, TypeError):
    """A tool, an agent or an app defined so that it cannot run: raised where it is
    defined, naming the file and line and what to write instead."""


class StepError(TetherError):
    """Base of the errors a tool raises to steer retries."""


class TerminalError(StepError):
    """Fail the task now: retrying cannot help (bad input, permission denied, ...)."""

    expected: ClassVar[bool] = False
    """An outcome the app expects (a guardrail said no), not a fault: the task fails with
    it all the same, but nothing is dead-lettered and the worker logs it at INFO,
    without a traceback (see `tether.worker.expected`)."""


class GuardrailTripped(TerminalError):
    """Raised by a guardrail (`Agent(..., input_guardrails=..., output_guardrails=...)`):
    the agent's task fails with this error and its reason: an expected outcome."""

    expected = True


class RetryableError(StepError):
    """Retry the step; `retry_after` overrides the policy's backoff for this attempt."""

    def __init__(self, message: str = "", retry_after: timedelta | float | None = None) -> None:
        super().__init__(message)
        self.retry_after = None if retry_after is None else as_timedelta(retry_after)


class UnservedToolWarning(UserWarning):
    """A task was submitted for a tool no running worker serves: it is kept, pending,
    and starts when one does (`strict=True` refuses a tool never registered instead)."""

    def __init__(self, task_id: str, tools: list[str]) -> None:
        names = ", ".join(repr(tool) for tool in tools)
        super().__init__(
            f"task {task_id!r} waits: no running worker serves {names}; it starts when "
            "one does ('tether worker MODULE:APP')"
        )
        self.task_id = task_id
        self.tools = tools
