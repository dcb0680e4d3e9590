"""A fresh worker's start is its recovery when it replaces a dead one (a Kubernetes
restart, an autoscaler): what it imports before it serves is time no step runs. The
model client (`openai`) and the MCP client (`mcp`) load at the first call that needs them."""

from __future__ import annotations

import subprocess
import sys

STARTS = (
    "import tether, tether.cli.main, tether.worker.worker, tether.agents.llm_turn, "
    "tether.agents.runtime, tether.integrations.pydantic_ai; "
    "from tether import Agent, OpenAIModel; "
    "import sys; print(sorted(m for m in ('openai', 'mcp', 'mcp_types') if m in sys.modules))"
)


def test_a_worker_serving_tethers_agent_and_a_pydantic_ai_agent_starts_without_openai_or_mcp() -> (
    None
):
    loaded = subprocess.run(
        [sys.executable, "-c", STARTS], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]", f"imported at start: {loaded}"
