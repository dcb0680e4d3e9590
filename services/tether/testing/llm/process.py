"""The scripted model as a child process, so tests can kill the workers that talk to it."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import msgspec

import tether

_LISTENING = "listening on "


class ScriptedModel:
    """The scripted server as a child process: `with ScriptedModel(script) as m: m.base_url`.

    Args:
        script: the script (see `tether.testing.llm.script.Script`); None: an empty one,
            to `load` per test.
        chunk_delay: seconds between stream chunks, overriding the script's `chunk_delay`.
        log: a JSON-lines file the server appends each request to (readable after it died).
        startup_timeout: seconds to wait for the server to listen.
    """

    def __init__(
        self,
        script: dict[str, Any] | None = None,
        *,
        chunk_delay: float | None = None,
        log: Path | None = None,
        startup_timeout: float = 15.0,
    ) -> None:
        self.script = script if script is not None else {"conversations": []}
        self.chunk_delay = chunk_delay
        self.log = log
        self.startup_timeout = startup_timeout
        self._url: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`, for `AsyncOpenAI(base_url=...)`."""
        if self._url is None:
            raise RuntimeError("the scripted model is not running: use `with ScriptedModel(...)`")
        return self._url

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the scripted model is not running: use `with ScriptedModel(...)`")
        return self._process.pid

    def requests(self, conversation: str | None = None) -> list[dict[str, Any]]:
        """The request log so far, oldest first (every chat request, faulted ones too);
        given a `conversation` (its first user message), only its requests."""
        with urllib.request.urlopen(self._root() + "/log", timeout=10) as response:
            entries: list[dict[str, Any]] = msgspec.json.decode(response.read())
        if conversation is None:
            return entries
        return [entry for entry in entries if entry["conversation"] == conversation]

    def conversation(self, *turns: dict[str, Any], **script: Any) -> str:
        """Load a script of one conversation with these turns (and `script`'s other
        fields); returns a new question that starts it."""
        question = f"question {uuid.uuid4().hex[:8]}"
        self.load({**script, "conversations": [{"match": question, "turns": list(turns)}]})
        return question

    def load(self, script: dict[str, Any]) -> None:
        """Replace the script and reset the fault counters (the request log is kept)."""
        request = urllib.request.Request(
            self._root() + "/script",
            data=msgspec.json.encode(script),
            headers={"content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10):
                pass
        except urllib.error.HTTPError as exc:
            message = msgspec.json.decode(exc.read())["error"]["message"]
            raise ValueError(f"the scripted model rejected the script: {message}") from None

    def __enter__(self) -> ScriptedModel:
        self._dir = tempfile.TemporaryDirectory(prefix="tether-llm-")
        folder = Path(self._dir.name)
        script = folder / "script.json"
        script.write_bytes(msgspec.json.encode(self.script))
        self._stderr = (folder / "stderr.log").open("w+b")
        # bufsize=0: `select` then sees every byte the child wrote, none hidden in a buffer.
        self._process = subprocess.Popen(
            self._command(script),
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=_child_env(),
            bufsize=0,
        )
        try:
            self._url = self._wait_for_url(self._process)
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

    def _command(self, script: Path) -> list[str]:
        command = [sys.executable, "-m", "tether.testing.llm", "--script", str(script)]
        command += ["--port", "0"]
        if self.chunk_delay is not None:
            command += ["--chunk-delay", str(self.chunk_delay)]
        if self.log is not None:
            command += ["--log", str(self.log)]
        return command

    def _wait_for_url(self, process: subprocess.Popen[bytes]) -> str:
        assert process.stdout is not None
        deadline = time.monotonic() + self.startup_timeout
        while (remaining := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([process.stdout], [], [], remaining)
            if not ready:
                break
            line = process.stdout.readline().decode()
            if not line:
                code = process.wait()
                raise RuntimeError(
                    f"the scripted model exited with code {code} before listening:\n"
                    f"{self._stderr_text()}"
                )
            if line.startswith(_LISTENING):
                return line.removeprefix(_LISTENING).strip()
        raise RuntimeError(
            f"the scripted model did not listen within {self.startup_timeout:g}s:\n"
            f"{self._stderr_text()}"
        )

    def _stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def _root(self) -> str:
        return self.base_url.removesuffix("/v1")

    def _stop(self) -> None:
        process, self._process, self._url = self._process, None, None
        if process is not None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


def _child_env() -> dict[str, str]:
    """The environment with the directory holding `tether` first on PYTHONPATH."""
    root = str(Path(tether.__file__).resolve().parent.parent)
    existing = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, existing] if existing else [root])}
