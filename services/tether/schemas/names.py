"""Every subject, stream, consumer and bucket name Tether uses, built in one place."""

from __future__ import annotations

import msgspec

from tether.schemas.jetstream_names import JetStreamNames

SUBMIT_DEAD_LETTER = "_submit"
"""Dead-letter 'tool' of rejected submissions (tool names never start with '_')."""


class Names(JetStreamNames, msgspec.Struct, frozen=True):
    """Names for one Tether installation; `prefix` lets several share a NATS account."""

    prefix: str = "tether"

    # -- streams -------------------------------------------------------------
    @property
    def submit_stream(self) -> str:
        return f"{self._upper}_SUBMIT"

    @property
    def work_stream(self) -> str:
        return f"{self._upper}_WORK"

    @property
    def status_stream(self) -> str:
        return f"{self._upper}_STATUS"

    @property
    def dead_letter_stream(self) -> str:
        return f"{self._upper}_DLQ"

    @property
    def tokens_stream(self) -> str:
        return f"{self._upper}_TOKENS"

    @property
    def index_stream(self) -> str:
        return f"{self._upper}_INDEX"

    @property
    def timers_stream(self) -> str:
        """The message schedules (sleeps, deadlines, input expiries) and the timers they
        fired. A stream that allows schedules must allow rollups (nats-server forces
        them), so it is apart from the work stream and only the dispatchers write it."""
        return f"{self._upper}_TIMERS"

    @property
    def sessions_stream(self) -> str:
        """Sessions' inboxes and run boundaries, one message per subject (an edit replaces)."""
        return f"{self._upper}_SESSIONS"

    @property
    def moving_stream(self) -> str:
        """Where `tether provision` keeps the work stream's messages while it makes the
        stream anew (layout 2 to 3): a stream's schedules cannot be turned off."""
        return f"{self._upper}_MOVING"

    # -- KV buckets and object store -----------------------------------------
    @property
    def tasks_bucket(self) -> str:
        return f"{self.prefix}-tasks"

    @property
    def checkpoints_bucket(self) -> str:
        return f"{self.prefix}-checkpoints"

    @property
    def heartbeats_bucket(self) -> str:
        return f"{self.prefix}-heartbeats"

    @property
    def workers_bucket(self) -> str:
        """Each worker's beat (`<worker>`) and the steps it holds (`<worker>.<step key>`);
        no TTL: a dead worker's entries stay until a survivor hands its steps on."""
        return f"{self.prefix}-workers"

    @property
    def tools_bucket(self) -> str:
        return f"{self.prefix}-tools"

    @property
    def builds_bucket(self) -> str:
        """A `BuildTool` per build and tool it serves, under `build_key`, written once by
        the build's first worker that serves the tool: its stream refuses a second message
        on a key, whoever sends it (`Layout`)."""
        return f"{self.prefix}-builds"

    @property
    def sessions_bucket(self) -> str:
        """Each session's `SessionState`, by id: the dispatchers', compare-and-set only."""
        return f"{self.prefix}-sessions"

    @property
    def blobs_bucket(self) -> str:
        return f"{self.prefix}-blobs"

    @property
    def graphs_bucket(self) -> str:
        """The threads of LangGraph graphs served as tools (`tether.integrations.langgraph`):
        each key starts with its thread's id, that of the task that began the thread. Made
        by `tether provision`, or on a graph's first step by a worker that may create
        streams, not with the buckets above: an installation without graphs has none."""
        return f"{self.prefix}-langgraph"

    @property
    def graph_blobs_bucket(self) -> str:
        """The Object Store of the graphs' large values, `<graphs bucket>-blobs` as a
        `JetStreamSaver` names its own: apart from `blobs_bucket`, whose sweep keeps only
        the blobs Tether's records and checkpoints refer to."""
        return f"{self.graphs_bucket}-blobs"

    # -- subjects ------------------------------------------------------------
    def submit_subject(self, task_id: str) -> str:
        """`<prefix>.submit.<task_id>`: a raw submission names its task in its subject,
        so a grant can be per id and what lands here from elsewhere (a push consumer's
        deliveries) is refused unless it is that task's (`Dispatcher`)."""
        return f"{self.prefix}.submit.{task_id}"

    @property
    def submit_subjects(self) -> str:
        return f"{self.prefix}.submit.*"

    def submitted_id(self, subject: str) -> str:
        """The task id a submission's subject names."""
        return subject[len(self.prefix) + len(".submit.") :]

    def work_subject(self, tool: str, build: str | None = None) -> str:
        """`<prefix>.work.<tool>`, which any worker of the tool takes, or
        `<prefix>.work.<tool>.<build>`, which only workers of that build take (a step
        routed to its build: see `tether.deploys.routing`)."""
        base = f"{self.prefix}.work.{tool}"
        return base if build is None else f"{base}.{build_token(build)}"

    def tool_of(self, subject: str) -> str:
        """The tool a work subject is for (routed to a build or not)."""
        return subject[len(self.prefix) + 6 :].split(".", 1)[0]

    @property
    def work_subjects(self) -> str:
        return f"{self.prefix}.work.>"

    def timer_subject(self, timer_id: str) -> str:
        """Where a timer waits as a message schedule in the timers stream: one subject per
        timer, since a schedule replaces the last on its subject. A sleeping step's timer
        is named by its work message's `Nats-Msg-Id`."""
        return f"{self.prefix}.timers.{timer_id}"

    @property
    def timer_subjects(self) -> str:
        return f"{self.prefix}.timers.>"

    def fired_subject(self, timer_id: str) -> str:
        """Where a timer's schedule fires, in the timers stream (a schedule fires onto a
        subject of its own stream): the dispatchers' `timers` consumer takes it."""
        return f"{self.prefix}.fired.{timer_id}"

    @property
    def fired_subjects(self) -> str:
        return f"{self.prefix}.fired.>"

    def fired_timer_id(self, subject: str) -> str:
        return subject[len(self.prefix) + len(".fired.") :]

    @property
    def schedule_subject(self) -> str:
        """Where any role asks for a timer, in the work stream (which refuses rollups):
        the dispatchers' `schedules` consumer turns each request into a schedule. No tool
        is named so: tool names cannot start with `_`."""
        return f"{self.prefix}.work._schedule"

    @property
    def schedules_consumer(self) -> str:
        return "schedules"

    @property
    def timers_work_subject(self) -> str:
        """Where timers fired in layout 2 (in the work stream): read only to move them."""
        return f"{self.prefix}.work._timers"

    @property
    def timers_consumer(self) -> str:
        """The dispatchers' consumer of fired timers, on the timers stream."""
        return "timers"

    @staticmethod
    def deadline_timer(task_id: str) -> str:
        """The timer id of a task's deadline."""
        return f"{task_id}.deadline"

    @staticmethod
    def input_timer(task_id: str, step: int, generation: int) -> str:
        """The timer id of the expiry of a step's input wait."""
        return f"{task_id}.{step}.input.g{generation}"

    def status_subject(self, task_id: str) -> str:
        return f"{self.prefix}.status.{task_id}"

    def inbox_subject(self, task_id: str) -> str:
        """`<prefix>.status.<task_id>.inbox`: what a running agent is told, in order (stored
        with the status events, on a subject of its own so the agent reads only these)."""
        return f"{self.prefix}.status.{task_id}.inbox"

    @property
    def status_subjects(self) -> str:
        return f"{self.prefix}.status.>"

    def ended_subject(self, task_id: str, status: str = "*") -> str:
        """`<prefix>.ended.<task_id>.<status>`: an empty core NATS notice that a task's
        record became `completed`, `failed` or `cancelled` (a hint: read the record)."""
        return f"{self.prefix}.ended.{task_id}.{status}"

    def index_subject(self, status: str, created_us: int, task_id: str) -> str:
        """The task's row in the status index: `<prefix>.index.<status>.<µs>.<task_id>`."""
        return f"{self.prefix}.index.{status}.{created_us:016d}.{task_id}"

    def index_filter(self, status: str | None = None) -> str:
        """The rows of one status (None: of all)."""
        return f"{self.prefix}.index.{status or '*'}.>"

    def index_rows_of(self, task_id: str) -> str:
        """Every row of one task, whatever its status."""
        return f"{self.prefix}.index.*.*.{task_id}"

    @property
    def index_subjects(self) -> str:
        return f"{self.prefix}.index.>"

    def tokens_subject(self, task_id: str) -> str:
        """Where a task's steps stream their text (`TokenChunk`s)."""
        return f"{self.prefix}.tokens.{task_id}"

    @property
    def tokens_subjects(self) -> str:
        return f"{self.prefix}.tokens.>"

    def dead_letter_subject(self, tool: str) -> str:
        return f"{self.prefix}.dead.{tool}"

    @property
    def dead_letter_subjects(self) -> str:
        return f"{self.prefix}.dead.>"

    def cancel_notice_subject(self, task_id: str) -> str:
        """Core NATS only (no stream): workers stop a cancelled task's steps at once."""
        return f"{self.prefix}.control.cancelled.{task_id}"

    def api_subject(self, verb: str) -> str:
        return f"{self.prefix}.api.{verb}"

    def alive_subject(self, worker_key: str) -> str:
        """`<prefix>.worker.<worker key>.alive`: core NATS only, served by that worker alone
        for as long as its connection is up; asked when its beat is late ("no responders"
        from the server: its connection is gone)."""
        return f"{self.prefix}.worker.{worker_key}.alive"

    def session_in_subject(self, session_id: str, message_id: str = "*") -> str:
        """`<prefix>.session.<id>.in.<message id>`: one message (an edit expects its seq)."""
        return f"{self.prefix}.session.{session_id}.in.{message_id}"

    def session_out_subject(self, session_id: str, run: int | str = "*") -> str:
        """`<prefix>.session.<id>.out.<run>`: run `run` began (`RunStarted`), written once."""
        return f"{self.prefix}.session.{session_id}.out.{run}"

    def session_subjects(self, session_id: str = "*") -> str:
        return f"{self.prefix}.session.{session_id}.>"

    def session_of(self, subject: str) -> tuple[str, str]:
        """The session id and the last token of a session subject."""
        parts = subject[len(self.prefix) + len(".session.") :].split(".")
        return parts[0], parts[-1]

    @staticmethod
    def run_task_id(session_id: str, run: int) -> str:
        """A session's run n is task `<session id>-r<n>`: started again, the same task."""
        return f"{session_id}-r{run}"

    # -- consumers -----------------------------------------------------------
    def tool_consumer(self, tool: str, build: str | None = None) -> str:
        """`tool-<tool>`, or `tool-<tool>@<build>` for the steps routed to a build."""
        base = f"tool-{tool}"
        return base if build is None else f"{base}@{build_token(build)}"

    @property
    def dispatcher_consumer(self) -> str:
        return "dispatcher"

    @property
    def sessions_consumer(self) -> str:
        return "sessions"

    # -- keys and message ids ------------------------------------------------
    DEPLOYMENT_KEY = "_deployment"
    """The key in the workers bucket of the `Deployment` (`tether builds`): one token that
    no worker's key is (theirs do not start with `_`)."""

    @staticmethod
    def build_key(build: str, tool: str) -> str:
        """The key in the builds bucket of a build's tool (its `BuildTool`):
        `<build token>.<tool>`, two tokens (a tool's name has no dot)."""
        return f"{build_token(build)}.{tool}"

    @staticmethod
    def build_keys(build: str | None = None) -> str:
        """The pattern of a build's keys in the builds bucket (of every build's: None)."""
        return f"{'*' if build is None else build_token(build)}.*"

    @staticmethod
    def build_of_key(key: str) -> str:
        """The build a key of the builds bucket is of."""
        return build_of_token(key.split(".", 1)[0])

    @staticmethod
    def step_key(task_id: str, step: int, branch: int | None = None) -> str:
        """Checkpoint key and idempotency key of one step, `<task_id>.<step>`, or of one
        branch of a parallel step, `<task_id>.<step>.b<branch>`."""
        return f"{task_id}.{step}" if branch is None else f"{task_id}.{step}.b{branch}"

    @staticmethod
    def run_key(task_id: str, step: int, branch: int | None = None) -> str:
        """Key of a step's last run in the heartbeats bucket: `<task_id>=<step>` or
        `<task_id>=<step>=b<branch>` (one token; `=` is in no task id)."""
        return f"{task_id}={step}" if branch is None else f"{task_id}={step}=b{branch}"

    @staticmethod
    def once_key(task_id: str, step: int, name: str, branch: int | None = None) -> str:
        """Checkpoint key of a memoized side effect inside one step (or branch)."""
        return f"{Names.step_key(task_id, step, branch)}.once.{name}"

    @staticmethod
    def step_msg_id(task_id: str, step: int, generation: int = 1, branch: int | None = None) -> str:
        """`Nats-Msg-Id` of a step's work message; re-runs carry their generation."""
        base = Names.step_key(task_id, step, branch)
        return base if generation <= 1 else f"{base}.g{generation}"

    @staticmethod
    def resume_msg_id(task_id: str, step: int, generation: int = 1) -> str:
        """`Nats-Msg-Id` of the message an answer sends to resume a waiting step."""
        return f"{Names.step_msg_id(task_id, step, generation)}.input"

    @staticmethod
    def event_msg_id(
        task_id: str,
        event: str,
        step: int | None,
        generation: int,
        n: int = 0,
        branch: int | None = None,
    ) -> str:
        """`Nats-Msg-Id` of a status event, so a replayed step does not repeat its events."""
        where = "task" if step is None else str(step) if branch is None else f"{step}.b{branch}"
        return f"{task_id}.{where}.{event}.g{generation}.{n}"

    @staticmethod
    def graph_thread_roots(thread_id: str) -> str:
        """The keys of the graphs bucket that point at a task's thread's newest checkpoints,
        one per namespace: `<thread>.l.<ns>` (`tether.integrations.langgraph.keys`; a
        task id is a key token as it is)."""
        return f"{thread_id}.l.*"

    @property
    def _upper(self) -> str:
        return self.prefix.upper().replace("-", "_")


def build_token(build: str) -> str:
    """A build's name as one subject token, a consumer name's part and a key's: its dots
    (`v1.2`) as `=`, which a build's name cannot hold (`tether.deploys.naming`)."""
    return build.replace(".", "=")


def build_of_token(token: str) -> str:
    return token.replace("=", ".")


DEFAULT_NAMES = Names()
