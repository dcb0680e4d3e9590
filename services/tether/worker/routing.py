"""Moved to `tether.deploys.routing`; kept for one round."""

from tether.deploys.routing import Fleet, Refuse, place, ramped, started_on

__all__ = ["Fleet", "Refuse", "place", "ramped", "started_on"]
