"""The dispatcher: accepts submissions from `tether.submit.<task_id>`."""

from tether.dispatcher.dispatcher import Dispatcher

__all__ = ["Dispatcher"]
