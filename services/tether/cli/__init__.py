"""The `tether` command."""

from tether.cli.main import app, main

__all__ = ["app", "main"]
