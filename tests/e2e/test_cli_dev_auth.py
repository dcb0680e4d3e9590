"""`tether dev`'s embedded nats-server is its owner's alone: another local user (uid
65534) can neither connect to it nor read or list `.tether/`, while the owner's CLI,
run in the same directory, finds it and its token there."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys

import pytest

from tests.conftest import ROOT
from tests.intruder import assert_kept_out, intrude, needs_root, open_folder, owners_cli
from tether.testing import wait_until

pytestmark = [pytest.mark.slow, needs_root()]


async def test_another_local_user_cannot_reach_tether_devs_server() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    with open_folder() as folder:
        (folder / ".tether").mkdir()
        (folder / ".tether").chmod(0o755)  # as an earlier `tether dev` left it
        log = folder / "dev.log"
        with log.open("wb") as out:
            dev = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", "tether.cli", "dev", "--port", "0"),
                *("--gateway-port", "0", "--ui-port", "0"),
                cwd=folder,
                env={**env, "PYTHONPATH": str(ROOT)},
                stdout=out,
                stderr=out,
            )
        try:
            await wait_until(lambda: "Ctrl-C" in log.read_text(), timeout=60, message="dev")
            found = re.search(r"NATS\s+(nats://\S+)", log.read_text())
            assert found, log.read_text()
            url = found.group(1)

            seen = await intrude(int(url.rsplit(":", 1)[1]), folder / ".tether")

            assert_kept_out(seen)
            task_id = await owners_cli(folder, "submit", 'search={"query":"x"}', "--nats", url)
            assert task_id.strip() in await owners_cli(folder, "ls", "--nats", url)
        finally:
            dev.send_signal(signal.SIGINT)
            assert await asyncio.wait_for(dev.wait(), timeout=30) == 0, log.read_text()
