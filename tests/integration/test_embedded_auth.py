"""The embedded nats-server of `tether.run` is its owner's alone: another local user
(uid 65534) can neither connect to it nor read or list its data dir, while the owner's
other processes (the CLI, a client) find it and its token in `.tether/`."""

from __future__ import annotations

from pathlib import Path

from tests.intruder import assert_kept_out, intrude, needs_root, open_folder, owners_cli
from tether import Client, NatsConfig
from tether.local_server import SharedServer
from tether.nats.embedded import PID_FILE, live_holder

pytestmark = needs_root()


async def test_another_local_user_cannot_reach_a_scripts_embedded_server() -> None:
    with open_folder() as folder:
        data_dir = folder / ".tether"
        data_dir.mkdir()
        data_dir.chmod(0o755)  # as an earlier Tether left it
        server = SharedServer(data_dir)
        url = await server.open()
        try:
            seen = await intrude(server.port, data_dir)

            assert_kept_out(seen)
            assert data_dir.stat().st_mode & 0o777 == 0o700
            token = (data_dir / "nats-token").read_text().strip()
            assert (data_dir / "nats-token").stat().st_mode & 0o777 == 0o600
            pid = live_holder(data_dir / "nats" / PID_FILE)
            assert pid is not None  # whose command line any local user can read:
            assert token not in Path(f"/proc/{pid}/cmdline").read_text()
            async with Client(NatsConfig(url=url, embedded_dir=str(data_dir))) as client:
                assert await client.find("none") is None
            await owners_cli(folder, "ls", "--nats", url)  # finds the token in .tether/
        finally:
            await server.close()
