"""The web dashboard: `tether ui`, and in `tether dev`."""

from tether.ui.dashboard import DEFAULT_PORT, Dashboard, DashboardError

__all__ = ["DEFAULT_PORT", "Dashboard", "DashboardError"]
