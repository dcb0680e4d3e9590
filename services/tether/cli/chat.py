"""`tether chat ID --agent NAME`: a terminal chat with an agent, kept as a session.

The conversation lives in NATS, not in this process: Ctrl-C leaves it (a run under way
goes on), and `tether chat ID` again shows it from the start, then goes on live. A line
typed while the agent works steers it; `/queue TEXT` waits for its next turn instead;
`/input JSON` answers what the run asks (`/input {"approved": true}`); `/close` closes
the session. At the end of input (a pipe) it waits for the answers to
what it sent, then exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import uuid
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tether.cli.common import DEFAULT_NATS, DEFAULT_PREFIX, NatsOption, PrefixOption
from tether.cli.running import ExitCode, connected, run

if TYPE_CHECKING:
    from tether.client import Client
    from tether.sessions import Session, SessionUpdate

ANSWER_TIMEOUT = 600.0
"""Seconds the end of input waits for the answers to what was sent."""


class _Screen:
    """What the follower prints: each message of the conversation once, each answer as
    the model writes it (or whole, for a run whose text is no longer kept)."""

    def __init__(self, session: Session, agent: str, echoed: bool) -> None:
        self._session = session
        self._agent = agent
        self._echoed = echoed
        """Whether the terminal shows what is typed (else each message is printed)."""
        self._wrote: set[str] = set()
        self._attempts: dict[tuple[str, int], int] = {}
        self._step: tuple[str, int] | None = None
        self.typed: set[str] = set()
        """Ids, and texts, of the messages typed here."""
        self.ended: set[str] = set()
        self.moved = asyncio.Event()

    async def show(self, update: SessionUpdate) -> None:
        if update.kind == "run_started" and update.started is not None:
            for message_id in update.started.messages:
                message = await self._session.message(message_id)
                if message is not None:
                    self._said(message_id, message.text)
        elif update.kind == "event" and update.event is not None:
            if update.event.kind == "message_sent":
                self._said(None, str(getattr(update.event, "text", "")))
        elif update.kind == "text" and update.chunk is not None and update.text:
            self._text(update.task_id, update.chunk.step, update.chunk.attempt, update.text)
        elif update.kind == "run_ended":
            self._end(update)

    def _text(self, task_id: str, step: int, attempt: int, text: str) -> None:
        """A piece of an answer: each turn's text on a line of its own."""
        last = self._attempts.setdefault((task_id, step), attempt)
        if attempt > last:  # a worker was lost mid-answer: the step's text starts over
            self._attempts[(task_id, step)] = attempt
            _write(f"\n(a worker was lost; {self._agent} answers again)\n{self._agent}: ")
        elif self._step != (task_id, step):
            self._close_line()
            _write(f"{self._agent}: ")
        self._step = (task_id, step)
        self._wrote.add(task_id)
        _write(text)

    def _said(self, message_id: str | None, text: str) -> None:
        """A message of the conversation, unless the terminal showed it as it was typed
        (a message told a run under way is known by its text)."""
        if self._echoed and (message_id or text) in self.typed:
            self.typed.discard(message_id or text)
            return
        self._close_line()
        _write(f"you: {text}\n")

    def _close_line(self) -> None:
        """End the line an answer's text was being written on."""
        if self._step is not None:
            _write("\n")
            self._step = None

    def _end(self, update: SessionUpdate) -> None:
        record = update.record
        if update.task_id in self._wrote:
            self._close_line()
        elif record is not None and record.result is not None:
            _write(f"{self._agent}: {record.result}\n")  # its streamed text has expired
        if record is not None and record.error is not None:
            _write(f"(run {update.run} {record.status.value}: {record.error.message})\n")
        self.ended.add(update.task_id)
        self.moved.set()


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


async def _chat(nats: str, prefix: str, session_id: str, agent: str | None) -> ExitCode:
    async with connected(nats, prefix) as client:
        session = client.session(session_id, agent=agent)
        state = await session.state()
        name = agent or (state.agent if state else "agent")
        screen = _Screen(session, name, echoed=sys.stdin.isatty())

        async def follow() -> None:
            async for update in session.follow():
                await screen.show(update)

        follower = asyncio.create_task(follow())
        try:
            sent = await _read_lines(session, screen)
            await _wait_for_answers(client, session, screen, sent)
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
    return ExitCode.OK


async def _read_lines(session: Session, screen: _Screen) -> list[str]:
    """Send each line typed until the end of input; the ids of what was sent."""
    sent: list[str] = []
    lines = _lines()
    while line := await lines.get():
        text = line.strip()
        if not text:
            continue
        if text == "/close":
            await session.close()
            _write("(session closed)\n")
            continue
        if text.startswith("/input "):
            sent.append(await session.send_input(_json(text.removeprefix("/input "))))
            continue
        queue = text.startswith("/queue ")
        text = text.removeprefix("/queue ").strip() if queue else text
        message_id = uuid.uuid4().hex
        screen.typed |= {message_id, text}
        sent.append(await session.send(text, queue=queue, message_id=message_id))
    return sent


def _json(text: str) -> Any:
    """An answer typed as JSON (`{"approved": true}`), or as the text it is."""
    import msgspec

    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text


def _lines() -> asyncio.Queue[str]:
    """The lines of stdin as they come ("" at its end), read by a daemon thread: Ctrl-C
    must not wait for a read that blocks (as `asyncio.to_thread`'s would)."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str] = asyncio.Queue()

    def read() -> None:
        while True:
            line = sys.stdin.readline()
            loop.call_soon_threadsafe(lines.put_nowait, line)
            if not line:
                return

    threading.Thread(target=read, name="tether-chat-input", daemon=True).start()
    return lines


async def _wait_for_answers(
    client: Client, session: Session, screen: _Screen, sent: list[str]
) -> None:
    """Each run that took a message sent here, and the session's latest run, has ended
    and its end was shown."""
    from tether.schemas.names import Names

    runs = [await session.taken(message_id, timeout=ANSWER_TIMEOUT) for message_id in sent]
    state = await session.state()
    if state is not None and state.runs:
        runs.append(Names.run_task_id(session.id, state.runs))
    for task_id in runs:
        await client.handle(task_id).wait_until_done(ANSWER_TIMEOUT)
        while task_id not in screen.ended:
            screen.moved.clear()
            await asyncio.wait_for(screen.moved.wait(), ANSWER_TIMEOUT)


def chat(
    session_id: Annotated[
        str, typer.Argument(metavar="ID", help="The session's id (your app's id for the chat).")
    ],
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent", metavar="NAME", help="The agent that answers (a new session needs one)."
        ),
    ] = None,
    nats: NatsOption = DEFAULT_NATS,
    prefix: PrefixOption = DEFAULT_PREFIX,
) -> None:
    """Chat with an agent in a session that outlives this command: Ctrl-C and run it
    again, and the conversation is there. A line typed while the agent works steers it;
    '/queue TEXT' waits for its next turn; '/input JSON' answers what it asks
    ('/input {"approved": true}'); '/close' closes the session."""
    run(_chat(nats, prefix, session_id, agent))


def register(app: typer.Typer) -> None:
    app.command()(chat)
