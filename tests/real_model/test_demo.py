"""`tether demo` on the real model: its worker is killed mid-step and the task still
finishes, with the closing account printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether.local_model import LlamaServer

DEADLINE = 100.0


def test_the_demo_runs_on_the_real_model(llama: LlamaServer, tmp_path: Path) -> None:
    # no OPENAI_API_KEY, no OPENAI_BASE_URL: --base-url alone reaches a local server
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    command = [sys.executable, "-m", "tether.cli", "demo", "--out-dir", str(tmp_path)]
    command += ["--base-url", llama.base_url, "--model", llama.name]

    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE
    )

    told = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, told
    assert "killed the worker" in done.stdout, told
    assert "What happened" in done.stdout and "Answer saved to" in done.stdout, told
    assert list(tmp_path.glob("demo-*.md")), told


@pytest.mark.usefixtures("installed")
def test_the_demo_runs_on_a_local_model_it_serves_itself(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    command = [sys.executable, "-m", "tether.cli", "demo", "--local", "--out-dir", str(tmp_path)]

    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE
    )

    told = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, told
    assert "smollm2" in done.stdout and "killed the worker" in done.stdout, told
    assert list(tmp_path.glob("demo-*.md")), told
