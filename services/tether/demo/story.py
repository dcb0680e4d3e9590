"""`tether demo`: run the research agent, kill its worker mid-step, watch it carry on."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from tether import Client, Dispatcher, NatsConfig, NatsServer
from tether.nats.cancellation import raise_if_cancelled
from tether.schemas.events import AnyStatusEvent, Completed, Failed, StepCompleted, StepStarted
from tether.testing import wait_until

QUERY = "durable execution for AI agents"
PLAN: list[dict[str, Any]] = [
    {"tool": "search", "input": {"query": QUERY}},
    {"tool": "summarize"},
    {"tool": "write_report"},
]
CRASH_STEP = 1
CRASH_AT = 0.5


class Demo:
    def __init__(self, console: Console, data_dir: Path, out_dir: Path, pace: float) -> None:
        self.console = console
        self.data_dir = data_dir
        self.out_dir = out_dir
        self.pace = pace
        self.workers: list[subprocess.Popen[bytes]] = []
        self.starts: Counter[int] = Counter()
        self.killed_pid: int | None = None

    def say(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True)

    async def run(self) -> int:
        started = time.monotonic()
        self.say("[bold]Tether demo[/]: a research agent whose worker is killed halfway through.\n")
        with NatsServer(self.data_dir / "nats") as server:
            self.say(
                f"[dim]1.[/] Embedded nats-server with JetStream at [cyan]{server.url}[/]"
                f" (data in {self.data_dir})"
            )
            config = NatsConfig(url=server.url, name="tether-demo")
            try:
                async with Dispatcher(config), Client(config) as client:
                    code = await self._story(client, config)
            finally:
                self._stop_workers()
        self.say(f"\n[dim]Done in {time.monotonic() - started:.1f}s.[/]")
        return code

    async def _story(self, client: Client, config: NatsConfig) -> int:
        worker = self._start_worker(config)
        self.say(f"[dim]2.[/] Dispatcher started; worker process started (pid {worker.pid})")
        await wait_until(lambda: _registered(client), timeout=30, message="the worker to start")
        task_id = f"demo-{uuid.uuid4().hex[:8]}"
        handle = await client.submit(
            PLAN, task_id=task_id, metadata={"pace": self.pace, "out_dir": str(self.out_dir)}
        )
        self.say(
            f"[dim]3.[/] Submitted task [bold]{task_id}[/]: search → summarize → write_report\n"
        )
        with Progress(
            TextColumn("  {task.description:<12}"),
            BarColumn(),
            TextColumn("{task.fields[note]}"),
            console=self.console,
            transient=True,
        ) as progress:
            chaos = asyncio.create_task(self._crash_midway(client, config, task_id, progress))
            try:
                outcome = await self._follow(handle.events(timeout=60), progress, client, task_id)
            finally:
                chaos.cancel()
        return await self._epilogue(client, task_id, outcome)

    async def _follow(
        self,
        events: AsyncIterator[AnyStatusEvent],
        progress: Progress,
        client: Client,
        task_id: str,
    ) -> AnyStatusEvent:
        bars: dict[int, TaskID] = {}
        poll = asyncio.create_task(self._show_progress(client, task_id, progress, bars))
        try:
            async for event in events:
                self._narrate(event, progress, bars)
                if isinstance(event, Completed | Failed):
                    return event
        finally:
            poll.cancel()
        raise RuntimeError("the event stream ended without an outcome")

    def _narrate(self, event: AnyStatusEvent, progress: Progress, bars: dict[int, TaskID]) -> None:
        if isinstance(event, StepStarted) and event.step is not None:
            self.starts[event.step] += 1
            again = (
                " [yellow](again: it was running when the worker died)[/]"
                if event.attempt and event.attempt > 1
                else ""
            )
            self.say(f"  [blue]▶[/] {event.tool} started, attempt {event.attempt}{again}")
            if event.step in bars:
                progress.remove_task(bars.pop(event.step))
            bars[event.step] = progress.add_task(str(event.tool), total=1.0, note="")
        elif isinstance(event, StepCompleted) and event.step is not None:
            if event.step in bars:
                progress.remove_task(bars.pop(event.step))
            self.say(
                f"  [green]✓[/] {event.tool} completed and [bold]checkpointed[/]"
                f" ({_describe(event.output)})"
            )
        elif isinstance(event, Failed):
            self.say(f"  [red]✗ task failed[/]: {event.error}")

    async def _show_progress(
        self, client: Client, task_id: str, progress: Progress, bars: dict[int, TaskID]
    ) -> None:
        while True:
            raise_if_cancelled()
            beat = await client.store.get_heartbeat(task_id)
            if beat is not None and beat.step in bars and beat.progress is not None:
                progress.update(bars[beat.step], completed=beat.progress, note=beat.message or "")
            await asyncio.sleep(0.1)

    async def _crash_midway(
        self, client: Client, config: NatsConfig, task_id: str, progress: Progress
    ) -> None:
        async def midway() -> bool:
            beat = await client.store.get_heartbeat(task_id)
            return beat is not None and beat.step == CRASH_STEP and (beat.progress or 0) >= CRASH_AT

        await wait_until(midway, timeout=60, interval=0.05, message="the middle of summarize")
        victim = self.workers[-1]
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        self.killed_pid = victim.pid
        self.say(
            f"  [red bold]💥 killed the worker (pid {victim.pid}) with SIGKILL[/]"
            " in the middle of summarize"
        )
        fresh = self._start_worker(config)
        self.say(
            f"  [cyan]↻[/] started a fresh worker (pid {fresh.pid});"
            " JetStream redelivers the unacknowledged step"
        )

    async def _epilogue(self, client: Client, task_id: str, outcome: AnyStatusEvent) -> int:
        record = await client.get(task_id)
        if not isinstance(outcome, Completed) or self.killed_pid is None:
            self.say(
                "[red]The demo did not go as planned[/]: "
                + (str(record.error) if record.error else "no crash happened")
            )
            return 1
        self.say("\n[bold]What happened[/]")
        self.say(
            f"  • search ran [bold]{self.starts[0]}[/] time: it was checkpointed before the crash,"
            " so the fresh worker [green]did not run it again[/]"
        )
        self.say(
            f"  • summarize ran [bold]{self.starts[1]}[/] times:"
            " the crash cost only the step that was running"
        )
        self.say(
            f"  • write_report ran [bold]{self.starts[2]}[/] time;"
            " the task finished on the fresh worker"
        )
        self.say(f"\n[bold]Report:[/] {record.result['path']}")
        return 0

    def _start_worker(self, config: NatsConfig) -> subprocess.Popen[bytes]:
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
                "4",
            ],
            stdout=log,
            stderr=log,
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


async def _registered(client: Client) -> bool:
    return await client.store.get_tool("write_report") is not None


def _describe(output: object) -> str:
    if isinstance(output, dict) and "hits" in output:
        return f"{len(output['hits'])} documents found"
    if isinstance(output, dict) and "points" in output:
        return f"{len(output['points'])} key sentences"
    if isinstance(output, dict) and "path" in output:
        return f"{output['words']} words written"
    return "done"
