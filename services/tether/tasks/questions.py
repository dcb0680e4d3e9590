"""What an agent task was asked (pure): its question or messages as submitted (the first
step's input), for the top of its dashboard page and `tether status`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.schemas.blobs import is_ref
from tether.schemas.plans import StepSpec

AGENT_KEYS = frozenset(
    {"input", "after", "token_budget", "cost_budget", "instructions", "settings"}
)
"""The keys of an agent's first step as a client submits it (`Client.submit_agent`)."""


@dataclass(frozen=True)
class Message:
    role: str
    text: str


@dataclass(frozen=True)
class Question:
    """An agent task's question: its messages (one user message for a plain question),
    the run's own instructions, and the task whose conversation it continues."""

    messages: list[Message] = field(default_factory=list)
    instructions: str | None = None
    after: str | None = None
    blob: Mapping[str, Any] | None = None
    """The question when it was too big to travel inline: a blob reference."""


def question(spec: StepSpec | None, agent: bool | None) -> Question | None:
    """The question of a task whose first step is `spec`; `agent`: whether its tool runs
    an agent (None: unknown, so the input's shape decides). None for other tasks."""
    given = None if spec is None else spec.input
    if agent and is_ref(given):  # the whole first input was stored as a blob
        return Question(blob=given)
    if not isinstance(given, dict) or "input" not in given:
        return None
    if agent is False or (agent is None and not set(given) <= AGENT_KEYS):
        return None
    asked, instructions, after = given["input"], given.get("instructions"), given.get("after")
    messages: list[Message] = []
    if isinstance(asked, str):
        messages.append(Message("user", asked))
    elif isinstance(asked, list):
        messages.extend(_message(m) for m in asked if isinstance(m, dict))
    return Question(
        messages=messages,
        instructions=instructions if isinstance(instructions, str) else None,
        after=after if isinstance(after, str) else None,
        blob=asked if is_ref(asked) else None,
    )


def _message(message: Mapping[str, Any]) -> Message:
    return Message(str(message.get("role", "user")), text(message.get("content")))


def text(content: Any) -> str:
    """A chat message's content as text: a string, or its text parts joined (other parts,
    an image say, as JSON)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            if isinstance(part, dict) and isinstance(part.get("text"), str)
            else json.dumps(part, default=str)
            for part in content
        )
    return "" if content is None else json.dumps(content, default=str)


def last_question(plan: Sequence[StepSpec]) -> str | None:
    """The text of an agent task's last user message (its question); None for a plan of
    tools."""
    asked = question(plan[0] if plan else None, None)
    if asked is None:
        return None
    users = [m.text for m in asked.messages if m.role == "user"]
    return users[-1] if users else None
