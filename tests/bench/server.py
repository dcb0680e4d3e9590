"""The bench's nats-server counters: W4 reads how many messages the server moved."""

from __future__ import annotations

import json
import urllib.request

from tether import NatsServer


def server_messages(server: NatsServer) -> int:
    """Messages the server has taken in and sent out since it started, from its /varz
    (blocking: call it through `asyncio.to_thread`). The server needs `monitor=True`."""
    with urllib.request.urlopen(f"{server.monitor_url}/varz", timeout=10) as response:
        varz = json.load(response)
    return int(varz["in_msgs"]) + int(varz["out_msgs"])
