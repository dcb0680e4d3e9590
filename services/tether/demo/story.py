"""`tether demo`: an agent plans three searches at once, its worker is killed in the
middle of them, a fresh worker finishes without repeating what was checkpointed, and
the answer streams to the terminal token by token."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from tether import Client, Dispatcher, NatsConfig, NatsServer, Step, TaskRecord
from tether.agents.agent import LLM_RETRY
from tether.cli.render import StreamedText, format_usage
from tether.clock import utcnow
from tether.demo.retries import again, failed_line, failure_line, retry_line, save_failure
from tether.demo.script import QUESTION, script
from tether.schemas.events import (
    AnyStatusEvent,
    Completed,
    Failed,
    StepCompleted,
    StepRetrying,
    StepStarted,
)
from tether.schemas.records import Usage
from tether.schemas.workers import Heartbeat
from tether.testing import wait_until
from tether.testing.llm import ScriptedModel

AGENT = "researcher"
CHUNK_DELAY = 0.03
"""Seconds between the scripted model's tokens: slow enough to watch them arrive."""


class Demo:
    def __init__(
        self,
        console: Console,
        data_dir: Path,
        out_dir: Path,
        pace: float,
        model: str | None = None,
        base_url: str | None = None,
    ) -> None:
        self.console = console
        self.data_dir = data_dir
        self.out_dir = out_dir
        self.pace = pace
        self.model = model
        self.base_url = base_url
        self.workers: list[subprocess.Popen[bytes]] = []
        self.runs: Counter[tuple[int, int | None]] = Counter()
        self.started: dict[tuple[int, int | None], datetime] = {}
        self.killed_pid: int | None = None
        self.killed_at: datetime | None = None
        self.streaming: tuple[int, int] | None = None
        """The turn whose answer streams now, and how many characters it has written."""
        self.scripted: ScriptedModel | None = None
        self.retried: dict[tuple[int, int | None], bool] = {}
        """Steps whose last attempt failed and was told: their next start is no news."""
        self.errors: dict[tuple[int, int | None], str | None] = {}
        """The error each step's last retry said: said again, it is only counted."""
        self.told_failure = False
        self._mid_line = False

    def say(self, text: str) -> None:
        self._end_line()
        self.console.print(text, highlight=False, soft_wrap=True)

    async def run(self) -> int:
        started = time.monotonic()
        self.say(
            "[bold]Tether demo[/]: an agent whose worker is killed in the middle of its work.\n"
        )
        server = NatsServer.embedded(self.data_dir)  # no other local user may connect
        with server, self._model() as (base_url, name):
            self.say(
                f"[dim]1.[/] Embedded nats-server with JetStream at [cyan]{server.url}[/]; model "
                f"[cyan]{name}[/] at {base_url or 'the OpenAI API'}"
            )
            config = NatsConfig(url=server.url, token=server.token, name="tether-demo")
            env = {**os.environ, "TETHER_DEMO_MODEL": name, "TETHER_DATA_DIR": str(self.data_dir)}
            if base_url:
                env["TETHER_DEMO_BASE_URL"] = base_url
                env["TETHER_DEMO_BASE_URL_FROM"] = (
                    "tether demo's offline model"
                    if self.model is None
                    else "tether demo --base-url"
                )
            try:
                async with Dispatcher(config), Client(config) as client:
                    code = await self._story(client, config, env)
            finally:
                self._stop_workers()
        self.say(f"\n[dim]Done in {time.monotonic() - started:.1f}s.[/]")
        return code

    @contextlib.contextmanager
    def _model(self) -> Iterator[tuple[str | None, str]]:
        """The scripted offline model, or the real one the user named."""
        if self.model is not None:
            yield self.base_url, self.model
            return
        with ScriptedModel(script(CHUNK_DELAY)) as scripted:
            self.scripted = scripted
            yield scripted.base_url, "scripted"

    async def _story(self, client: Client, config: NatsConfig, env: dict[str, str]) -> int:
        worker = self._start_worker(config, env)
        self.say(f"[dim]2.[/] Dispatcher started; worker process started (pid {worker.pid})")
        await wait_until(lambda: _registered(client), timeout=30, message="the worker to start")
        task_id = f"demo-{uuid.uuid4().hex[:8]}"
        handle = await client.submit_agent(
            AGENT, QUESTION, task_id=task_id, metadata={"pace": self.pace}
        )
        self.say(f"[dim]3.[/] Asked agent [bold]{AGENT}[/] (task {task_id}): {QUESTION}\n")
        helpers = [
            asyncio.create_task(self._crash_midway(client, config, env, task_id)),
            asyncio.create_task(self._show_tokens(client, task_id)),
        ]
        try:
            async for event in handle.events(timeout=120):
                self._narrate(event)
                if isinstance(event, Completed | Failed):
                    break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(helpers[1]), 5)
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
        return await self._epilogue(client, task_id)

    def _narrate(self, event: AnyStatusEvent) -> None:
        where = (event.step or 0, event.branch)
        if isinstance(event, StepStarted) and event.step is not None:
            self.runs[where] += 1
            self.started.setdefault(where, event.time)
            if self.retried.pop(where, False):
                return  # its retry line said which attempt comes next, and when
            why = again(False, self.killed_pid is not None) if (event.attempt or 1) > 1 else ""
            self.say(f"  [blue]▶[/] {_what(event)} started, attempt {event.attempt}{why}")
        elif isinstance(event, StepRetrying) and event.step is not None:
            self.retried[where] = True
            most = LLM_RETRY.max_attempts if event.tool == AGENT else None
            line = retry_line(event, most, self.errors.get(where))
            self.errors[where] = event.error.message if event.error is not None else None
            self.say(f"  [yellow]↻[/] {_what(event)} failed: {line}")
        elif isinstance(event, StepCompleted) and event.step is not None:
            self.say(f"  [green]✓[/] {_what(event)} [bold]checkpointed[/]{_describe(event)}")
        elif isinstance(event, Failed):
            self.told_failure = True
            self.say(f"  [red]✗ task failed[/]: {failure_line(event.error)}")

    async def _show_tokens(self, client: Client, task_id: str) -> None:
        """The answer as the model writes it; a cut-off attempt's text is marked."""
        text = StreamedText()
        headed: set[int] = set()
        async for chunk in client.handle(task_id).stream():
            if chunk.step not in headed:
                headed.add(chunk.step)
                self.say(f"  [magenta]✎ turn {chunk.step // 2 + 1} streams:[/]")
                self.console.print("    ", end="")
            for piece, style in text.add(chunk):
                self.console.print(Text(piece, style=style), end="", soft_wrap=True)
                self._mid_line = True
            written = self.streaming[1] if self.streaming and self.streaming[0] == chunk.step else 0
            self.streaming = None if chunk.done else (chunk.step, written + len(chunk.delta))
            if chunk.done:
                self._end_line()

    def _end_line(self) -> None:
        if self._mid_line:
            self.console.print()
            self._mid_line = False

    async def _crash_midway(
        self, client: Client, config: NatsConfig, env: dict[str, str], task_id: str
    ) -> None:
        """Kill the worker while the model's first tool calls run (once some have finished,
        when they were of different lengths), or, for a model that calls none, while its
        answer streams: whatever the model plans, something is in flight."""

        async def in_flight() -> bool:
            record = await client.get(task_id)
            if record.status.is_terminal:
                raise _TooLate()
            heartbeat = await client.heartbeat(task_id)
            return crash_point(record, heartbeat, self.streaming)

        try:
            await wait_until(in_flight, timeout=120, interval=0.05, message="a step in flight")
        except _TooLate:
            return  # the epilogue says there was no crash to show
        victim = self.workers[-1]
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        self.killed_pid, self.killed_at = victim.pid, utcnow()
        self.say(
            f"  [red bold]💥 killed the worker (pid {victim.pid}) with SIGKILL[/]"
            " while a step was running"
        )
        fresh = self._start_worker(config, env)
        self.say(
            f"  [cyan]↻[/] started a fresh worker (pid {fresh.pid});"
            " what was running comes back to it, what was checkpointed does not"
        )

    async def _epilogue(self, client: Client, task_id: str) -> int:
        record = await client.get(task_id)
        if record.status.value != "completed" or self.killed_pid is None:
            why = _NO_CRASH
            if record.error:
                saved = save_failure(self.out_dir / f"{task_id}-error.md", record)
                why = failed_line(record, self.told_failure, saved)
            self.say(f"[red]The demo did not go as planned[/]: {why}")
            return 1
        self.say(
            "\n[bold]What happened[/]: a checkpointed step never runs again; only the steps "
            "that were running when their worker died do"
        )
        sent = self._sent_per_turn()
        for (step, branch), count in sorted(self.runs.items(), key=_order):
            name = _name(step, branch)
            before = self.started[(step, branch)] < (self.killed_at or utcnow())
            if count > 1:
                why = f"ran {count} times: it was running when the worker died, so it ran again"
            elif before:
                why = "ran once: checkpointed before the crash, so it [green]did not run again[/]"
            else:
                why = "ran once, after the crash"
            if branch is None and sent is not None:
                times = sent[step // 2]
                why += f" (sent to the model {times} time{'s' * (times != 1)})"
            self.say(f"  • {name} {why}")
        if record.usage is not None:
            self.say(f"  • {calls_account(record.usage)}")
            self.say(f"  • usage: {format_usage(record.usage)}")
        path = _write(self.out_dir / f"{task_id}.md", record)
        self.say(f"\n[bold]Answer saved to:[/] {path}")
        return 0

    def _sent_per_turn(self) -> Counter[int] | None:
        """How many times the scripted model was sent each turn (a real one does not say)."""
        if self.scripted is None:
            return None
        return Counter(request["turn"] for request in self.scripted.requests())

    def _start_worker(self, config: NatsConfig, env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.data_dir / "worker.log").open("ab")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tether.cli",
                "worker",
                "tether.demo.research:app",
                "--nats",
                config.url,
                "--concurrency",
                "8",
            ],
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
        self.workers.append(process)
        return process

    def _stop_workers(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                process.terminate()
        for process in self.workers:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


class _TooLate(Exception):
    """The task ended before anything could be caught in flight."""


_NO_CRASH = (
    "no crash happened: the model answered before anything could be caught in flight "
    "(it called no tool, and its answer was short); run it again, or try a model that "
    "calls the search tool"
)
HALFWAY = 0.5
STREAMED_ENOUGH = 80
"""Characters of a turn's answer after which the demo may kill its worker: a few words
that come before tool calls ("I'll search for that") are not yet the answer."""


def crash_point(
    record: TaskRecord, heartbeat: Heartbeat | None, streaming: tuple[int, int] | None
) -> bool:
    """Whether the worker should die now, whatever the model planned: once some of its
    tool calls are checkpointed and others still run (calls of different lengths); else
    once a tool call is halfway (one call, or several alike); else, for a model that
    calls no tool, while its answer streams."""
    step = record.current_step
    if not record.has_step(step):
        return False
    spec = record.spec(step)
    if spec.tool == AGENT:
        return streaming is not None and streaming[0] == step and streaming[1] >= STREAMED_ENOUGH
    halfway = (
        heartbeat is not None and heartbeat.step == step and (heartbeat.progress or 0) >= HALFWAY
    )
    if spec.parallel is None:
        return halfway
    done, total = len(record.done_branches), len(spec.parallel)
    if 0 < done < total:
        return True
    return halfway and not (done == 0 and _staggered(spec.parallel))


def _staggered(branches: list[Step]) -> bool:
    """Whether the calls take different times (the offline model's do: some finish first)."""
    depths = {b.input.get("depth", 1) if isinstance(b.input, dict) else 1 for b in branches}
    return len(depths) > 1


def calls_account(usage: Usage) -> str:
    """`3 LLM calls: 2 finished (1,290 tokens), 1 cut off by the crash (tokens unknown)`:
    every call sent counts, the one the crash cut off too, though its tokens are unknown."""
    finished = usage.requests - usage.unfinished
    said = f"{usage.requests} LLM call{'s' * (usage.requests != 1)}: {finished} finished"
    said += f" ({usage.total_tokens:,} tokens)"
    if usage.unfinished:
        said += f", {usage.unfinished} cut off by the crash (tokens unknown)"
    return said


def _name(step: int, branch: int | None) -> str:
    turn = step // 2 + 1
    return f"LLM turn {turn}" if branch is None else f"search #{branch} (of turn {turn})"


async def _registered(client: Client) -> bool:
    return await client.tool(AGENT) is not None


def _what(event: AnyStatusEvent) -> str:
    if event.branch is not None:
        return f"  search #{event.branch}"
    if event.tool == AGENT:
        return f"LLM turn {(event.step or 0) // 2 + 1}"
    return "fan-in of the searches"


def _describe(event: StepCompleted) -> str:
    output: Any = event.output
    usage = f", {event.usage.total_tokens:,} tokens" if event.usage else ""
    if isinstance(output, dict) and "message" in output:
        calls = output["message"].get("tool_calls") or []
        asked = ", ".join(call["function"]["arguments"] for call in calls)
        if not calls:
            return f": the model answered{usage}"
        what = "1 search" if len(calls) == 1 else f"{len(calls)} searches at once"
        return f": the model asked for {what}{usage}: {asked}"
    if isinstance(output, dict) and "hits" in output:
        found = len(output["hits"])
        return f" ({found} document{'s' * (found != 1)} found)"
    if isinstance(output, list):
        return f": {len(output)} results go to the next turn"
    return usage


def _order(item: tuple[tuple[int, int | None], int]) -> tuple[int, int]:
    (step, branch), _ = item
    return step, -1 if branch is None else branch


def _write(path: Path, record: TaskRecord) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {QUESTION}\n\n{record.result}\n\n_Task `{record.task_id}`._\n")
    return path.resolve()
