"""What deploys read of a tool a worker serves: its name and shape, not the tool author's
API (`tether.tools.Tool` has them), so the deploy wing depends on no other."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from tether.schemas.builds import Versioning, WhenGone


class ServedTool(Protocol):
    """A tool as a build announces it, compares it and routes its steps."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def output_schema(self) -> dict[str, Any] | None: ...
    @property
    def returns(self) -> Any: ...
    @property
    def versioning(self) -> Versioning | None: ...
    @property
    def when_gone(self) -> WhenGone: ...
    @property
    def build_grace(self) -> timedelta: ...
    def input_schema(self) -> dict[str, Any]: ...
