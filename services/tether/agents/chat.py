"""A streamed Chat Completions reply put back together (pure), as `responses` does for
the Responses API: text, tool calls by stream index, usage, and text fit to store."""

from __future__ import annotations

import re
from typing import Any

from tether.schemas.records import Usage

_SURROGATE = re.compile("[\ud800-\udfff]")


class Accumulated:
    """A streamed reply put back together: text, tool calls by index, usage."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.content: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self._open: dict[int, dict[str, Any]] = {}
        """The call each stream index adds to now."""
        self.usage = Usage(requests=1, model=model)
        self.finish_reason: str | None = None
        self._held = ""
        """A high surrogate that ended the last piece of text: its pair may come next."""

    def add(self, chunk: Any) -> str:
        if chunk.usage is not None:
            details = chunk.usage.prompt_tokens_details
            self.usage = Usage(
                input_tokens=chunk.usage.prompt_tokens or 0,
                output_tokens=chunk.usage.completion_tokens or 0,
                cached_tokens=(details.cached_tokens or 0) if details is not None else 0,
                requests=1,
                model=self.model,
            )
        text = ""
        for choice in chunk.choices:
            self.finish_reason = choice.finish_reason or self.finish_reason
            delta = choice.delta
            if delta.content:
                text += delta.content
            for call in delta.tool_calls or []:
                self._add_call(call)
        text, self._held = _whole_text(self._held + text, final=self.finish_reason is not None)
        self.content.append(text)
        return text

    def _add_call(self, call: Any) -> None:
        entry = self._open.get(call.index)
        if entry is None or (call.id and entry["id"] and call.id != entry["id"]):
            # A new call (some servers reuse an index for the next call, with a new id).
            entry = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            self._open[call.index] = entry
            self.calls.append(entry)
        if call.id:
            entry["id"] = call.id
        if call.function is not None:
            if call.function.name:
                entry["function"]["name"] += call.function.name
            if call.function.arguments:
                entry["function"]["arguments"] += call.function.arguments

    def message(self) -> dict[str, Any]:
        """The assistant message, as it goes back into the conversation."""
        content = "".join(self.content) + _whole_text(self._held, final=True)[0]
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        for call in self.calls:
            function = call["function"]
            for part in ("name", "arguments"):
                function[part] = _whole_text(function[part], final=True)[0]
        if self.calls:
            message["tool_calls"] = unique_ids(self.calls)
        return message


def _whole_text(text: str, final: bool) -> tuple[str, str]:
    """(text fit to store, a trailing high surrogate held for the next piece). A lone
    UTF-16 surrogate (some servers send one, split from its pair or alone) becomes U+FFFD:
    it cannot be encoded, so it would fail every attempt the same way."""
    held = ""
    if not final and text and "\ud800" <= text[-1] <= "\udbff":
        text, held = text[:-1], text[-1]
    if _SURROGATE.search(text) is None:
        return text, held
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace"), held


def unique_ids(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls, each with an id no other has: an empty or repeated id (some compatible
    servers send them) is replaced by `tether_call_<i>`. The message is stored with these
    ids, so the model hears each call's own result under the id it is shown."""
    seen: set[str] = set()
    for i, call in enumerate(calls):
        if not call["id"] or call["id"] in seen:
            call["id"] = f"tether_call_{i}"
        seen.add(call["id"])
    return calls
