"""Moved to `tether.deploys.rollout`; kept for one round."""

from tether.deploys.rollout import MOVE_EVERY, Rollout

__all__ = ["MOVE_EVERY", "Rollout"]
