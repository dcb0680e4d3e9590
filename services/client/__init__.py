"""The Python SDK: submit tasks and follow them."""

from services.client.client import Client
from services.client.handle import TaskHandle

__all__ = ["Client", "TaskHandle"]
