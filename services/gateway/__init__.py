"""The MCP gateway: Tether tools as MCP tools, Tether tasks as MCP tasks (both generations)."""

from services.gateway.backend import GatewayOptions
from services.gateway.gateway import DEFAULT_PORT, Gateway, GatewayError
from services.gateway.protocol import TASKS_EXTENSION
from services.gateway.tools import RUN_PLAN

__all__ = [
    "DEFAULT_PORT",
    "RUN_PLAN",
    "TASKS_EXTENSION",
    "Gateway",
    "GatewayError",
    "GatewayOptions",
]
