"""What the dashboard shows, worked out from records and events with no I/O: the
timeline of a task's steps and attempts, and the answer a form's fields make."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tether.agents.calls import cut_off_tokens
from tether.schemas.codec import to_builtins
from tether.schemas.events import (
    AnyStatusEvent,
    Failed,
    StepCompleted,
    StepRetrying,
    StepStarted,
    Submitted,
    Waiting,
)
from tether.schemas.plans import StepSpec
from tether.schemas.records import ErrorInfo, TaskRecord, TaskStatus, Usage
from tether.tasks.listing import counts as counts  # the pages name it from here
from tether.tasks.plans import current_tool as current_tool  # the pages name it from here


@dataclass
class Attempt:
    """One run of a step (or branch) by a worker."""

    number: int
    started: datetime
    ended: datetime | None = None
    outcome: str = "running"
    """running, completed, skipped, retrying, crashed (started again with no end: its
    worker died or its ack wait ran out), failed, waiting, cancelled, stopped (the task
    ended while it ran)."""
    error: ErrorInfo | None = None
    retry_in_ms: int | None = None

    def seconds(self, now: datetime) -> float:
        return ((self.ended or now) - self.started).total_seconds()


@dataclass
class Lane:
    """A row of the waterfall: one step, or one branch of a parallel step."""

    step: int
    branch: int | None
    tool: str
    attempts: list[Attempt] = field(default_factory=list)
    output: Any = None
    usage: Usage | None = None
    wake_at: datetime | None = None

    @property
    def key(self) -> str:
        return f"{self.step}" if self.branch is None else f"{self.step}.{self.branch}"

    @property
    def name(self) -> str:
        where = f"step {self.step}" if self.branch is None else f"step {self.step} [{self.branch}]"
        return f"{where} · {self.tool}"


@dataclass
class Bar:
    """An attempt placed on the waterfall, in percent of the task's span."""

    attempt: Attempt
    left: float
    width: float


@dataclass
class Timeline:
    start: datetime
    end: datetime
    lanes: list[Lane]

    @property
    def seconds(self) -> float:
        return max((self.end - self.start).total_seconds(), 1e-3)

    def bars(self, lane: Lane) -> list[Bar]:
        span = self.seconds
        bars = []
        for attempt in lane.attempts:
            left = (attempt.started - self.start).total_seconds() / span * 100
            width = attempt.seconds(self.end) / span * 100
            bars.append(Bar(attempt, round(max(left, 0.0), 2), round(max(width, 0.4), 2)))
        return bars


def timeline(
    events: Iterable[AnyStatusEvent], now: datetime, plan: Sequence[StepSpec] = ()
) -> Timeline:
    """The lanes of a task's events, in step then branch order (a parallel step's own
    lane, its fan-in, before its branches); `plan` names what the events do not."""
    lanes: dict[tuple[int, int | None], Lane] = {}
    start: datetime | None = None
    ended: datetime | None = None
    for event in events:
        start = start or event.time
        if isinstance(event, Submitted):
            start = event.time
        if event.status in FINISHED:
            ended = event.time
        if event.step is None:
            continue
        lane = lanes.get((event.step, event.branch))
        if lane is None:
            label = plan[event.step].label if event.step < len(plan) else "?"
            lane = lanes[event.step, event.branch] = Lane(event.step, event.branch, label)
        if event.tool:
            lane.tool = event.tool
        _apply(lane, event)
    if ended is not None:  # a task that ended leaves nothing running
        for lane in lanes.values():
            last = lane.attempts[-1] if lane.attempts else None
            if last is not None and last.ended is None:
                last.ended, last.outcome = ended, "stopped"
    ordered = sorted(
        lanes.values(), key=lambda lane: (lane.step, -1 if lane.branch is None else lane.branch)
    )
    return Timeline(start or now, ended or now, ordered)


FINISHED = (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)


def _apply(lane: Lane, event: AnyStatusEvent) -> None:
    last = lane.attempts[-1] if lane.attempts else None
    if isinstance(event, StepStarted):
        if last is not None and last.ended is None:
            last.ended, last.outcome = event.time, "crashed"
        lane.attempts.append(Attempt(event.attempt or len(lane.attempts) + 1, event.time))
        return
    if isinstance(event, StepRetrying) and (last is None or last.ended is not None):
        return  # a failed task retried by hand: its next attempt starts the step again
    if last is None or last.ended is not None:  # an end with no start seen (a checkpoint)
        last = Attempt(event.attempt or 1, event.time)
        lane.attempts.append(last)
    if isinstance(event, StepCompleted):
        last.ended, last.outcome = event.time, "skipped" if event.skipped else "completed"
        lane.output, lane.usage = event.output, event.usage
        lane.wake_at = event.wake_at
    elif isinstance(event, StepRetrying):
        last.ended, last.outcome = event.time, "retrying"
        last.error, last.retry_in_ms = event.error, event.retry_in_ms
    elif isinstance(event, Waiting):
        last.outcome = "waiting"
    elif isinstance(event, Failed):
        last.ended, last.outcome, last.error = event.time, "failed", event.error
    elif event.status is TaskStatus.CANCELLED:
        last.ended, last.outcome = event.time, "cancelled"


def step_input(plan: Sequence[StepSpec], step: int, branch: int | None) -> Any:
    """What a step (or branch) was given, from the whole plan."""
    if not 0 <= step < len(plan):
        return None
    spec = plan[step]
    if branch is not None and spec.parallel is not None and branch < len(spec.parallel):
        spec = spec.parallel[branch]
    return spec.input


def matches(record: TaskRecord, tool: str | None, text: str | None) -> bool:
    """The list's filters: a tool anywhere in what the record holds, text in its id or
    metadata."""
    if tool and not any(tool in _tools(spec) for spec in record.steps):
        return False
    if text:
        haystack = record.task_id + " " + json.dumps(record.metadata, default=str)
        return text.lower() in haystack.lower()
    return True


def _tools(spec: StepSpec) -> set[str]:
    found = {spec.tool} if spec.tool else set()
    for branch in spec.parallel or ():
        found |= _tools(branch)
    return found


class FormError(ValueError):
    """A form's fields do not make an answer its schema takes."""


def _resolved(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A schema whose root is a `$ref` into its own `$defs` (msgspec's way for a Struct)
    as the definition it names."""
    ref = schema.get("$ref")
    prefix = "#/$defs/"
    if isinstance(ref, str) and ref.startswith(prefix):
        found = (schema.get("$defs") or {}).get(ref[len(prefix) :])
        if isinstance(found, Mapping):
            return found
    return schema


def answer_from_form(schema: Mapping[str, Any], form: Mapping[str, str]) -> Any:
    """The answer an input form makes: its `json` field when given, else one field per
    property of an object schema, converted to the property's type."""
    schema = _resolved(schema)
    if form.get("json", "").strip():
        try:
            return json.loads(form["json"])
        except json.JSONDecodeError as exc:
            raise FormError(f"the answer is not JSON: {exc}") from None
    properties = schema.get("properties") or {}
    answer: dict[str, Any] = {}
    for name, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        raw = form.get(f"field.{name}")
        if kind == "boolean":
            answer[name] = raw in ("on", "true", "1", "yes")
            continue
        if raw is None or raw == "":
            continue
        answer[name] = _converted(name, kind, raw)
    missing = [name for name in schema.get("required", []) if name not in answer]
    if missing:
        raise FormError("missing: " + ", ".join(missing))
    return answer


def _converted(name: str, kind: Any, raw: str) -> Any:
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return float(raw)
        if kind in ("object", "array"):
            return json.loads(raw)
    except (ValueError, json.JSONDecodeError):
        raise FormError(f"{name}: {raw!r} is not a valid {kind}") from None
    return raw


def form_fields(schema: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The fields of a form for `schema`, or None when only a JSON box can say it."""
    schema = _resolved(schema)
    if schema.get("type") != "object" or not schema.get("properties"):
        return None
    required = set(schema.get("required", []))
    fields = []
    for name, prop in schema["properties"].items():
        prop = prop if isinstance(prop, dict) else {}
        fields.append(
            {
                "name": name,
                "type": prop.get("type", "string"),
                "enum": prop.get("enum"),
                "description": prop.get("description", ""),
                "required": name in required,
            }
        )
    return fields


def pretty(value: Any) -> str:
    """A value as indented JSON for a collapsible block."""
    return json.dumps(to_builtins(value), indent=2, ensure_ascii=False, default=str)


def ago(then: datetime | None, now: datetime) -> str:
    """`3s`, `4m`, `2h`, `5d`: how long since `then`."""
    if then is None:
        return "-"
    return duration((now - then).total_seconds())


def duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return (
                f"{seconds / size:.0f}{unit}"
                if seconds >= 10 * size
                else f"{seconds / size:.1f}{unit}"
            )
    return f"{seconds:.1f}s"


def plural(count: int, word: str, many: str | None = None) -> str:
    """`1 call`, `2 calls`: a count with its noun agreeing (`many` when not `word`+s)."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"


def usage_text(usage: Usage, model: bool = False) -> str:
    """`280 in · 34 out · 2 calls (1 cut off: its tokens unknown) · $0.0012`; a cost of
    None is unknown (a model with no price) and says so."""
    about = "~" if usage.streamed_tokens else ""  # counted from a cut-off call's stream
    parts = [f"{usage.input_tokens:,} in", f"{about}{usage.output_tokens:,} out"]
    if usage.cached_tokens:
        parts.append(f"{usage.cached_tokens:,} cached")
    unfinished: int = getattr(usage, "unfinished", 0)  # calls cut off mid-call
    if usage.requests or unfinished:
        calls = plural(usage.requests, "call")
        cut = f"{unfinished:,} cut off: {cut_off_tokens(usage)}"
        parts.append(calls + (f" ({cut})" if unfinished else ""))
    if model and usage.model:
        parts.append(usage.model)
    cost: float | None = usage.cost_usd
    if cost is not None:
        parts.append(f"${cost:.4f}")
    elif usage.input_tokens or usage.output_tokens or unfinished:
        parts.append("cost unknown")
    return " · ".join(parts)


def tokens(usage: Usage | None) -> str:
    if usage is None:
        return "-"
    total = usage.input_tokens + usage.output_tokens
    return f"{total:,}"
