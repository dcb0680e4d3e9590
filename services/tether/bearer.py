"""Bearer tokens on Tether's HTTP endpoints (the MCP gateway, the dashboard): one reading
of the `Authorization` header, one constant-time comparison."""

from __future__ import annotations

import hmac
from collections.abc import Iterable


def presented_token(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (None for any other)."""
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def matching(presented: str | None, tokens: Iterable[str]) -> str | None:
    """The one of `tokens` that `presented` is, compared in constant time; else None."""
    if presented is None:
        return None
    found = None
    for token in tokens:
        if hmac.compare_digest(presented.encode(), token.encode()):
            found = token
    return found
