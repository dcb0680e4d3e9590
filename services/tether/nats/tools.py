"""The tools workers advertise, in `<prefix>-tools`, and each tool's queue."""

from __future__ import annotations

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from tether.nats.failures import translating
from tether.nats.kv import Bucket
from tether.schemas.codec import encode
from tether.schemas.names import Names
from tether.schemas.workers import ToolInfo

_tool_decoder = msgspec.json.Decoder(ToolInfo)


@translating
class Tools:
    def __init__(self, bucket: Bucket, names: Names, js: JetStreamContext) -> None:
        self._bucket = bucket
        self._names = names
        self._js = js

    async def register(self, info: ToolInfo) -> None:
        await self._bucket.put(info.name, encode(info))

    async def get(self, name: str) -> ToolInfo | None:
        found = await self._bucket.get(name)
        return None if found is None else _tool_decoder.decode(found.value)

    async def list(self) -> list[ToolInfo]:
        """Every tool a worker has advertised, by name."""
        tools = [await self.get(key) for key in sorted(await self._bucket.keys())]
        return [tool for tool in tools if tool is not None]

    async def backlog(self, tool: str) -> tuple[int, int, int] | None:
        """A tool's queue, steps in flight and redeliveries, from its consumer (None when
        no worker has served it yet)."""
        try:
            info = await self._js.consumer_info(
                self._names.work_stream, self._names.tool_consumer(tool)
            )
        except NotFoundError:
            return None
        pending, in_flight = int(info.num_pending or 0), int(info.num_ack_pending or 0)
        return pending, in_flight, int(info.num_redelivered or 0)
