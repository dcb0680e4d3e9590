"""`Session`: one conversation with one agent across many runs, keyed on the app's own id."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import msgspec

from tether.errors import (
    InvalidTaskError,
    MessageRefusedError,
    MessageTakenError,
    RevisionConflictError,
    SessionClosedError,
    SessionError,
    TaskTimeoutError,
)
from tether.nats.sessions import Stored
from tether.nats.store import Store
from tether.schemas.ids import InvalidNameError, validate_message_id, validate_session_id
from tether.schemas.sessions import SessionMessage, SessionState
from tether.sessions.following import SessionUpdate, follow
from tether.sessions.runner import unknown_agent_reason


class _Waitable(Protocol):
    async def wait(self, timeout: float | None = None) -> Any: ...


LOOK_EVERY = (0.02, 0.5)
"""Seconds between looks while `taken` waits for a dispatcher: the first, the longest."""


class Session:
    """A conversation with an agent that outlives its runs, its client and its workers.

    ```python
    async with Client() as client:
        chat = client.session("chat-42", agent="researcher")
        sent = await chat.send("What is JetStream?")
        print(await chat.answer(sent))
    ```

    A message to an idle session starts a run (a task that continues the last run's
    conversation by reference); one sent while a run is under way steers it (it reads it
    before its next model call), or waits for the next turn with `queue=True`. Every
    message is stored before `send` returns, and can be edited or withdrawn until a run
    takes it.
    """

    def __init__(
        self,
        store: Store,
        session_id: str,
        agent: str | None,
        handle: Callable[[str], _Waitable],
    ) -> None:
        """Made by `Client.session`; `handle`: the client's, a run's task by its id."""
        try:
            self.id = validate_session_id(session_id)
        except InvalidNameError as exc:
            raise InvalidTaskError(str(exc)) from exc
        self.agent = agent
        self._store = store
        self._sessions = store.sessions
        self._handle = handle

    def __repr__(self) -> str:
        return f"Session({self.id!r}, agent={self.agent!r})"

    async def state(self) -> SessionState | None:
        """The session as the dispatchers keep it (None: no message started it yet)."""
        found = await self._sessions.get(self.id)
        return None if found is None else found.state

    async def send(self, text: str, *, queue: bool = False, message_id: str | None = None) -> str:
        """Store `text` in the session's inbox and return its message id (`message_id`:
        yours, so that sending it again is the same message). `queue=True`: for the next
        turn, not for the run under way. Raises SessionClosedError on a closed session,
        InvalidTaskError for an agent no worker registered."""
        if not isinstance(text, str):
            raise InvalidTaskError(f"a session message is text, not {type(text).__name__}")
        message_id = _message_id(message_id)
        await self._check_open()
        message = SessionMessage(text=text, agent=self.agent, queue=queue)
        try:
            await self._sessions.put(self.id, message_id, message)
        except RevisionConflictError:
            stored = await self._sessions.latest(self.id, message_id)
            if stored is None or stored.message.text != text:
                raise SessionError(
                    self.id,
                    f"message id {message_id!r} is used already in session {self.id!r}: "
                    "edit that message, or send this one with another id",
                ) from None
        return message_id

    async def send_input(self, data: Any, *, message_id: str | None = None) -> str:
        """Answer what the run under way asks (an approval, `{"approved": True}`; a tool's
        question) through the inbox, as every message goes: stored first, given once, to
        the question the run waits on when a dispatcher takes it; `taken` says which run
        took it, and a refusal (nothing asked, an answer that does not fit) says why."""
        if data is None:
            raise InvalidTaskError("an answer cannot be None: send the value the run asks for")
        message_id = _message_id(message_id)
        await self._check_open()
        await self._sessions.put(self.id, message_id, SessionMessage(input=data))
        return message_id

    async def edit(self, message_id: str, text: str) -> None:
        """Replace a message no run has taken yet; MessageTakenError once one has."""
        await self._change(message_id, lambda message: _replace(message, text=text))

    async def withdraw(self, message_id: str) -> None:
        """Take back a message no run has taken yet; MessageTakenError once one has."""
        await self._change(message_id, lambda message: _replace(message, withdrawn=True))

    async def close(self) -> None:
        """Close the session: later messages are refused (those sent before still get
        their turn)."""
        found = await self._sessions.get(self.id)
        if found is not None and found.state.closed:
            return
        message = SessionMessage(agent=self.agent, close=True)
        await self._sessions.put(self.id, f"close-{uuid.uuid4().hex}", message)

    async def message(self, message_id: str) -> SessionMessage | None:
        """A message as it is now: `taken_by` names the run that took it, `refused` why
        none did."""
        stored = await self._sessions.latest(self.id, _message_id(message_id))
        return None if stored is None else stored.message

    async def taken(self, message_id: str, timeout: float = 30.0) -> str:
        """The task of the run that took the message, once one has; MessageRefusedError
        if the session refused it, TaskTimeoutError if no dispatcher took it in time."""
        deadline = time.monotonic() + timeout
        wait = LOOK_EVERY[0]
        while True:
            stored = await self._sessions.latest(self.id, _message_id(message_id))
            if stored is not None and stored.message.refused is not None:
                raise MessageRefusedError(self.id, message_id, stored.message.refused)
            if stored is not None and stored.message.taken_by is not None:
                return stored.message.taken_by
            if stored is not None and stored.message.withdrawn:
                raise MessageTakenError(self.id, message_id, "it was withdrawn")
            if time.monotonic() + wait > deadline:
                raise TaskTimeoutError(
                    self.id,
                    f"no run of session {self.id!r} took message {message_id!r} within "
                    f"{timeout}s: is a dispatcher running (tether dispatcher)?",
                )
            await asyncio.sleep(wait)
            wait = min(wait * 2, LOOK_EVERY[1])

    async def answer(self, message_id: str, timeout: float = 300.0) -> Any:
        """The answer of the run that took the message (its final answer, when the
        message steered a run under way)."""
        task_id = await self.taken(message_id, timeout)
        return await self._handle(task_id).wait(timeout)

    def follow(self, after: str | None = None) -> AsyncIterator[SessionUpdate]:
        """Every update of the session (run boundaries, each run's events and text) from
        its first run, or after the `position` of an update seen before, without end."""
        return follow(self._store, self.id, after)

    async def _check_open(self) -> None:
        found = await self._sessions.get(self.id)
        if found is not None and found.state.closed:
            raise SessionClosedError(self.id)
        if found is not None:
            if self.agent is not None and found.state.agent != self.agent:
                raise SessionError(
                    self.id,
                    f"session {self.id!r} is bound to agent {found.state.agent!r}, not "
                    f"{self.agent!r}: use another session id for another agent",
                )
            return
        if self.agent is None:
            raise InvalidTaskError(
                f"session {self.id!r} does not exist yet: name the agent that answers it, "
                "client.session(id, agent=...)"
            )
        info = await self._store.tools.get(self.agent)
        if info is None or not info.agent:
            raise InvalidTaskError(unknown_agent_reason(self.agent, info is not None))

    async def _change(self, message_id: str, change: Any) -> None:
        message_id = _message_id(message_id)
        while True:
            stored = await self._sessions.latest(self.id, message_id)
            if stored is None:
                raise SessionError(self.id, f"session {self.id!r} has no message {message_id!r}")
            if stored.message.settled:
                raise MessageTakenError(self.id, message_id, _how(stored))
            try:
                await self._sessions.put(self.id, message_id, change(stored.message), stored.seq)
            except RevisionConflictError:
                continue  # taken (or changed) just now: read it again
            return


def _how(stored: Stored) -> str:
    message = stored.message
    if message.taken_by is not None:
        return f"run {message.taken_by!r} took it"
    if message.refused is not None:
        return f"it was refused ({message.refused})"
    return "it was withdrawn"


def _message_id(message_id: str | None) -> str:
    try:
        return validate_message_id(uuid.uuid4().hex if message_id is None else message_id)
    except InvalidNameError as exc:
        raise InvalidTaskError(str(exc)) from exc


def _replace(message: SessionMessage, **changes: Any) -> SessionMessage:
    replaced: SessionMessage = msgspec.structs.replace(message, **changes)
    return replaced
