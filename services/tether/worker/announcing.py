"""Moved to `tether.deploys.announcing`; kept for one round."""

from tether.deploys.announcing import announce_build, refusal

__all__ = ["announce_build", "refusal"]
