"""The wire shape of a blob reference: `{"$blob": "sha256:<hex>", "size": <bytes>}`."""

from __future__ import annotations

from typing import Any

REF_KEY = "$blob"
PREFIX = "sha256:"


def is_ref(value: Any) -> bool:
    """Whether `value` is a blob reference (as decoded JSON)."""
    return (
        isinstance(value, dict)
        and len(value) == 2
        and isinstance(value.get(REF_KEY), str)
        and value[REF_KEY].startswith(PREFIX)
        and isinstance(value.get("size"), int)
    )
