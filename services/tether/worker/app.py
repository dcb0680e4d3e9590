"""Moved to `tether.tools.app` and `tether.tools.tool`; kept for one round."""

from tether.tools.app import App as App
from tether.tools.tool import Tool as Tool
