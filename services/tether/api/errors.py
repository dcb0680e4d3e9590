"""The API's own error: a request body of the wrong shape."""

from __future__ import annotations

from tether.errors import InvalidTaskError


class InvalidRequestError(InvalidTaskError):
    """A request body that is not the verb's JSON shape."""
