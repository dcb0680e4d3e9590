"""The worker host: serves an app's tools, one message and one attempt at a time, with
custody, succession and liveness. What a tool author imports lives in `tether.tools`."""

from tether.worker.liveness import Liveness
from tether.worker.worker import Worker

__all__ = ["Liveness", "Worker"]
