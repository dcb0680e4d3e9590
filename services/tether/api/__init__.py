"""The request/reply API on `tether.api.<verb>`, discoverable via `$SRV.*`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.api.service import ApiService

__all__ = ["ApiService"]


def __getattr__(name: str) -> Any:
    # FastStream loads only when the service is used: the CLI imports `api.errors` alone.
    if name == "ApiService":
        from tether.api.service import ApiService

        return ApiService
    raise AttributeError(f"module 'tether.api' has no attribute {name!r}")
