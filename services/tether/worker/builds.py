"""Moved to `tether.deploys.naming` and `tether.deploys.shapes`; kept for one round."""

from tether.deploys.naming import default_build, validate_build
from tether.deploys.shapes import new_tools, shape_differences

__all__ = ["default_build", "new_tools", "shape_differences", "validate_build"]
