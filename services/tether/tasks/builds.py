"""Moved to `tether.deploys.actions` (`answer`) and `tether.deploys.listing`; kept for one
round (`tether.client.reads` calls `builds.builds`)."""

from tether.deploys.actions import answer as builds

__all__ = ["builds"]
