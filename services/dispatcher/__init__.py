"""The dispatcher: accepts submissions from `tether.submit`."""

from services.dispatcher.dispatcher import Dispatcher

__all__ = ["Dispatcher"]
