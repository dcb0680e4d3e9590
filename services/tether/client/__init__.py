"""The Python SDK: submit tasks and follow them."""

from tether.client.client import Client
from tether.client.handle import TaskHandle

__all__ = ["Client", "TaskHandle"]
