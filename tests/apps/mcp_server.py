"""A small real MCP server in its own process, for tests of agents that call MCP tools.

`python -m tests.apps.mcp_server --port N --log PATH` serves streamable HTTP at
`http://127.0.0.1:N/mcp` with four plain-text tools:

  lookup(query)           readOnlyHint                 -> "found: {query}"
  reserve(room)           idempotentHint               -> "reserved {room}"
  charge(account, cents)  destructiveHint (only)       -> "charged {cents} cents to {account}"
  fail(reason)            an error result (`isError`) with the reason in its text

Each call, as it starts, appends `{"tool": name, "arguments": {...}}` as one JSON line to
the log (one `write` on an O_APPEND descriptor: a line is whole or absent, even when the
server is killed). While `<log>.hold` (or `<log>.hold.<tool>`, for that tool's calls)
exists the call then waits, so a test can hold a call in flight, kill its caller and let
it go.

In tests: `with McpServer(tmp_path) as server:` (or the `mcp_server` fixture) gives
`server.url`, `server.calls()`, `server.count(tool, **arguments)` and `server.hold()` (or
`server.hold("charge")`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

ROOT = Path(__file__).resolve().parent.parent.parent
PATH = "/mcp"
HOLD_POLL = 0.02
"""Seconds between looks at the hold file while a call is held."""


def hold_file(log: Path, tool: str | None = None) -> Path:
    return log.with_name(log.name + ".hold" + ("" if tool is None else f".{tool}"))


def build(log: Path) -> MCPServer:
    """The server, its tools logging to `log`."""
    server: MCPServer = MCPServer("tether-test-tools", log_level="WARNING")
    held = hold_file(log)

    async def started(tool: str, arguments: dict[str, Any]) -> None:
        line = json.dumps({"tool": tool, "arguments": arguments}) + "\n"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        mine = hold_file(log, tool)
        while held.exists() or mine.exists():  # noqa: ASYNC110 - another process's file
            await anyio.sleep(HOLD_POLL)

    # structured_output=False: plain text results, no `outputSchema` (a `-> str` tool
    # would otherwise also return `structuredContent: {"result": ...}`).
    @server.tool(
        description="Look something up in the catalogue.",
        annotations=ToolAnnotations(read_only_hint=True),
        structured_output=False,
    )
    async def lookup(query: str) -> str:
        await started("lookup", {"query": query})
        return f"found: {query}"

    @server.tool(
        description="Reserve a room (reserving it again changes nothing).",
        annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True),
        structured_output=False,
    )
    async def reserve(room: str) -> str:
        await started("reserve", {"room": room})
        return f"reserved {room}"

    @server.tool(
        description="Charge an account, in cents (each call charges again).",
        annotations=ToolAnnotations(
            read_only_hint=False, idempotent_hint=False, destructive_hint=True
        ),
        structured_output=False,
    )
    async def charge(account: str, cents: int) -> str:
        await started("charge", {"account": account, "cents": cents})
        return f"charged {cents} cents to {account}"

    @server.tool(description="Fail with the reason given.", structured_output=False)
    async def fail(reason: str) -> str:
        await started("fail", {"reason": reason})
        raise ToolError(reason)  # ToolError: the reason reaches the caller (isError=true)

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.apps.mcp_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args(argv)
    build(args.log).run(
        "streamable-http", host=args.host, port=args.port, streamable_http_path=PATH
    )


# -- for tests -------------------------------------------------------------------------------
class McpServer:
    """The server as a child process: `with McpServer(tmp_path) as server: server.url`.

    Args:
        directory: where the call log (`mcp-calls.jsonl`), its hold file and the
            server's output (`mcp-server.out`) go.
        startup_timeout: seconds to wait for the server to answer HTTP.
        stop_timeout: seconds between SIGTERM and SIGKILL when stopping.
    """

    def __init__(
        self, directory: Path, *, startup_timeout: float = 20.0, stop_timeout: float = 3.0
    ) -> None:
        self.directory = Path(directory)
        self.log = self.directory / "mcp-calls.jsonl"
        self.output = self.directory / "mcp-server.out"
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT/mcp`."""
        if self._process is None:
            raise RuntimeError("the MCP server is not running: use `with McpServer(...)`")
        return f"http://127.0.0.1:{self.port}{PATH}"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the MCP server is not running: use `with McpServer(...)`")
        return self._process.pid

    def calls(self) -> list[dict[str, Any]]:
        """Every call started so far, oldest first: `{"tool": ..., "arguments": {...}}`."""
        try:
            text = self.log.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line]

    def count(self, tool: str, **arguments: Any) -> int:
        """How many calls of `tool` with these `arguments` started so far."""
        return sum(1 for c in self.calls() if c == {"tool": tool, "arguments": arguments})

    @contextlib.contextmanager
    def hold(self, tool: str | None = None) -> Iterator[None]:
        """Calls (of `tool`, else all) that start inside the block wait (after they are
        logged) until it ends."""
        held = hold_file(self.log, tool)
        held.touch()
        try:
            yield
        finally:
            held.unlink(missing_ok=True)

    def __enter__(self) -> McpServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        command = [sys.executable, "-m", "tests.apps.mcp_server"]
        command += ["--port", str(self.port), "--log", str(self.log)]
        existing = os.environ.get("PYTHONPATH")
        path = os.pathsep.join([str(ROOT), existing] if existing else [str(ROOT)])
        with self.output.open("ab") as out:
            self._process = subprocess.Popen(
                command,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": path},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_until_answering(self._process)
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop()

    def _wait_until_answering(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while not _answers(f"http://127.0.0.1:{self.port}{PATH}"):
            if (code := process.poll()) is not None:
                raise RuntimeError(
                    f"the MCP server exited with code {code} before answering:\n{self._output()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the MCP server did not answer within {self.startup_timeout:g}s:\n"
                    f"{self._output()}"
                )
            time.sleep(0.05)

    def _output(self) -> str:
        try:
            return self.output.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def _stop(self) -> None:
        process, self._process = self._process, None
        hold_file(self.log).unlink(missing_ok=True)
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(url: str) -> bool:
    """Whether an HTTP server answers at `url`, whatever its status (a bare GET is refused)."""
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


if __name__ == "__main__":
    main()
