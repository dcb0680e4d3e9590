"""Moved to `tether.tools.retry`; kept for one round."""

from tether.tools.retry import RetryPolicy as RetryPolicy
