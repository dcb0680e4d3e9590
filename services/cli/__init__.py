"""The `tether` command."""

from services.cli.main import app, main

__all__ = ["app", "main"]
