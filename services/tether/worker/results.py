"""What a tool may return besides a plain value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from tether.schemas.tasks import InputRequest, StepSpec


class NextSteps(msgspec.Struct, frozen=True, kw_only=True):
    """Finish this step with `output` and run `steps` right after it (an agent's next calls)."""

    steps: Sequence[StepSpec]
    output: Any = None


class NeedsInput(msgspec.Struct, frozen=True, kw_only=True):
    """Pause the task until someone answers `prompt`; the answer becomes this step's output."""

    prompt: str
    schema: dict[str, Any] = msgspec.field(default_factory=dict)

    def request(self) -> InputRequest:
        return InputRequest(prompt=self.prompt, schema=self.schema)
