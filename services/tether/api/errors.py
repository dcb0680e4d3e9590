"""The API's own error: a request body of the wrong shape."""

from __future__ import annotations

from tether.errors import InvalidTaskError

# moved to tether.schemas.api; kept for one round
from tether.schemas.api import error_reply as error_reply
from tether.schemas.api import raised as raised


class InvalidRequestError(InvalidTaskError):
    """A request body that is not the verb's JSON shape."""
