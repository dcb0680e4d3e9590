"""What a graph's step does next, told from where its thread stands (pure).

A step of a graph's task runs the graph once on its thread: with the task's input, with
a person's answer to an `interrupt()`, or on from the thread's last checkpoint. Every
attempt of the step decides again from the thread as the checkpointer holds it, so a
crash anywhere costs only the super-step that was running:

- A step that brings input applies it only while the thread is where the step found
  it (`started_at`, journaled by its first attempt); once the thread has moved, the
  input is in it, and the step goes on from the last checkpoint instead.
- A step that brings an answer applies it only while its interrupt is still pending;
  once the interrupted node has run with it, the step goes on instead (a node that
  asks again raises a new interrupt, with a new id, which is asked for).
- Going on: a pending interrupt is asked for (the task waits, holding no worker);
  pending nodes run (finished super-steps are not run again, and the writes a finished
  node left in an unfinished super-step are kept); nothing pending is the answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Wait:
    """An `interrupt()` the thread waits on: its id, and what to ask a person."""

    id: str
    prompt: str
    schema: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Thread:
    """A thread's latest checkpoint, as far as the next move depends on it."""

    checkpoint: str | None
    """Its id (None: the thread has no checkpoint yet)."""
    next: tuple[str, ...] = ()
    """Nodes that still have to run."""
    waits: tuple[Wait, ...] = ()
    """Interrupts nobody answered yet, in the order LangGraph lists them."""


@dataclass(frozen=True)
class Start:
    """Run the graph on the step's input."""


@dataclass(frozen=True)
class Answer:
    """Resume the interrupt `id` with the person's answer."""

    id: str


@dataclass(frozen=True)
class GoOn:
    """Run the nodes pending at the last checkpoint (input None)."""


@dataclass(frozen=True)
class Ask:
    """Ask a person to answer `wait`; the step ends and the task waits."""

    wait: Wait


@dataclass(frozen=True)
class Done:
    """The graph has finished: its final state is the step's output."""


Move = Start | Answer | GoOn | Ask | Done


def first_move(thread: Thread, started_at: str | None, answering: str | None) -> Move:
    """The move of an attempt of a step that began at checkpoint `started_at`, with the
    answer to interrupt `answering` (None: a step that brings input)."""
    if answering is not None:
        if any(wait.id == answering for wait in thread.waits):
            return Answer(answering)
        return going_on(thread)
    if thread.checkpoint == started_at:
        return Start()
    return going_on(thread)


def going_on(thread: Thread) -> Ask | GoOn | Done:
    """The move from the thread's last checkpoint once the step's own input is in."""
    if thread.waits:
        return Ask(thread.waits[0])
    if thread.next:
        return GoOn()
    return Done()
