"""Moved to `tether.deploys.compat`; kept for one round."""

from tether.deploys.compat import input_changes, output_changes

__all__ = ["input_changes", "output_changes"]
