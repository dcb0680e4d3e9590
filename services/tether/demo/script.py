"""What the demo's offline model says: three searches at once, then a streamed answer."""

from __future__ import annotations

from typing import Any

QUESTION = "How do durable AI agents survive crashes?"
SEARCHES = [
    {"query": "AI agents in production", "depth": 1},
    {"query": "durable execution checkpoint step", "depth": 3},
    {"query": "NATS JetStream acknowledge redelivered", "depth": 3},
]
ANSWER = (
    "Durable agents survive crashes by checkpointing every step before the next one "
    "starts. In Durable execution, a restarted worker continues from the last recorded "
    "step instead of from the beginning, so a crash costs one step, not the whole task "
    "(AI agents in production). NATS JetStream makes this work without a separate "
    "database: a step that is not acknowledged within its ack wait is delivered again, "
    "and key-value buckets hold the checkpoints and task records."
)


def script(chunk_delay: float) -> dict[str, Any]:
    """The scripted model's conversation for `QUESTION`."""
    plan = {
        "content": "I'll look at this from three sides at once.",
        "tool_calls": [{"name": "search", "arguments": args} for args in SEARCHES],
    }
    return {"chunk_delay": chunk_delay, "conversations": [{"turns": [plan, {"content": ANSWER}]}]}
