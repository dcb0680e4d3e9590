"""Load the App objects named on the command line as MODULE:ATTR."""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from tether.errors import DefinitionError, TetherError
from tether.tools.app import App


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
    except SyntaxError as exc:
        where = f"{exc.filename}:{exc.lineno}" if exc.filename else module_name
        raise AppLoadError(f"{where}: {exc.msg}: fix the syntax of {module_name!r}") from exc
    except DefinitionError as exc:
        raise AppLoadError(str(exc)) from exc
    except Exception as exc:  # the module's own code failed: say where, in one line
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        raise AppLoadError(
            f"importing {module_name!r} raised {type(exc).__name__}: {exc}{where}"
        ) from exc
    if not hasattr(module, attr):
        names = sorted(n for n, v in vars(module).items() if isinstance(v, App))
        hint = f": it has {', '.join(names)}" if names else ""
        raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}{hint}")
    found = getattr(module, attr)
    if not isinstance(found, App):
        raise AppLoadError(f"{spec!r} is not a tether App (found {type(found).__name__})")
    return found


def load_apps(specs: list[str]) -> list[App]:
    """The apps named, which must serve at least one tool between them."""
    apps = [load_app(spec) for spec in specs]
    if not any(app.tools for app in apps):
        raise AppLoadError(
            f"{', '.join(specs)}: no tools to serve: register some with @app.tool() or "
            "app.add(Agent(...)), or name the App that has them"
        )
    return apps
