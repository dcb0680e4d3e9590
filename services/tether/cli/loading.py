"""Load the App objects named on the command line as MODULE:ATTR."""

from __future__ import annotations

import importlib
import os
import sys

from tether.errors import TetherError
from tether.worker.app import App


class AppLoadError(TetherError):
    pass


def load_app(spec: str) -> App:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise AppLoadError(f"{spec!r} is not MODULE:ATTR (for example 'myproject.tools:app')")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppLoadError(f"cannot import {module_name!r}: {exc}") from exc
    if not hasattr(module, attr):
        names = sorted(n for n, v in vars(module).items() if isinstance(v, App))
        hint = f": it has {', '.join(names)}" if names else ""
        raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}{hint}")
    found = getattr(module, attr)
    if not isinstance(found, App):
        raise AppLoadError(f"{spec!r} is not a tether App (found {type(found).__name__})")
    return found
