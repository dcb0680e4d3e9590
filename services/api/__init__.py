"""The request/reply API on `tether.api.<verb>`, discoverable via `$SRV.*`."""

from services.api.service import ApiService

__all__ = ["ApiService"]
