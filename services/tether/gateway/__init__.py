"""The MCP gateway: Tether tools as MCP tools, Tether tasks as MCP tasks (both generations)."""

from tether.gateway.backend import GatewayOptions
from tether.gateway.gateway import DEFAULT_PORT, Gateway, GatewayError
from tether.gateway.protocol import TASKS_EXTENSION
from tether.gateway.tools import RUN_PLAN

__all__ = [
    "DEFAULT_PORT",
    "RUN_PLAN",
    "TASKS_EXTENSION",
    "Gateway",
    "GatewayError",
    "GatewayOptions",
]
