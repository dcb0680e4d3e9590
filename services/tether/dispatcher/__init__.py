"""The dispatcher: accepts submissions from `tether.submit`."""

from tether.dispatcher.dispatcher import Dispatcher

__all__ = ["Dispatcher"]
