"""OpenAI's Responses API, for models that ask for it (`OpenAIModel(api="responses")`).

The conversation stays in Chat Completions' shape, in the checkpoints and everywhere
else: a call converts it to Responses input items, and the streamed response back to
one assistant message, so a task may even change API between turns. Nothing is kept
on OpenAI's side (`store: false`): every call sends the whole conversation, as a chat
call does, so a crash or another worker loses nothing.
"""

from __future__ import annotations

from typing import Any

from tether.errors import RetryableError
from tether.schemas.records import Usage

_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
"""An incomplete response's reason, as a chat call's finish_reason."""


def request(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], options: dict[str, Any]
) -> dict[str, Any]:
    """The `responses.create` arguments for a chat-shaped call."""
    system = [_text(m) for m in messages if m.get("role") == "system"]
    body: dict[str, Any] = {"input": input_items(messages), "store": False}
    if system:
        body["instructions"] = "\n\n".join(system)
    if tools:
        body["tools"] = [_tool(t) for t in tools]
    for name, value in options.items():
        if name in ("max_tokens", "max_completion_tokens"):
            body["max_output_tokens"] = value
        elif name == "response_format":
            body["text"] = {"format": _format(value)}
        elif name == "tool_choice":
            body["tool_choice"] = _tool_choice(value)
        else:
            body[name] = value
    return body


def input_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            continue
        if role == "tool":
            output = _text(message)
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": output,
                }
            )
            continue
        if role == "assistant":
            if message.get("content"):
                items.append({"role": "assistant", "content": _text(message)})
            for call in message.get("tool_calls") or []:
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function.get("arguments") or "",
                    }
                )
            continue
        items.append({"role": role or "user", "content": message.get("content") or ""})
    return items


class Accumulated:
    """A streamed response put back together as a chat reply: text, calls, usage."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.text: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.usage = Usage(requests=1, model=model)
        self.finish_reason: str | None = None

    def add(self, event: Any) -> str:
        """Take one stream event; the text it adds."""
        kind = getattr(event, "type", "")
        if kind == "response.output_text.delta":
            self.text.append(event.delta)
            return str(event.delta)
        if (
            kind == "response.output_item.done"
            and getattr(event.item, "type", "") == "function_call"
        ):
            item = event.item
            function = {"name": item.name, "arguments": item.arguments or ""}
            self.calls.append({"id": item.call_id, "type": "function", "function": function})
        elif kind in ("response.completed", "response.incomplete"):
            response = event.response
            self.usage = _usage(response.usage, self.model)
            if kind == "response.completed":
                self.finish_reason = "tool_calls" if self.calls else "stop"
            else:
                details = response.incomplete_details
                reason = getattr(details, "reason", None) if details is not None else None
                self.finish_reason = _REASONS.get(reason or "", reason or "length")
        elif kind in ("response.failed", "error"):
            error = getattr(getattr(event, "response", None), "error", None) or event
            raise RetryableError(f"the response failed: {getattr(error, 'message', error)}")
        return ""

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            message["tool_calls"] = self.calls
        return message


def _usage(usage: Any, model: str) -> Usage:
    if usage is None:
        return Usage(requests=1, model=model)
    details = getattr(usage, "input_tokens_details", None)
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cached_tokens=(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0,
        requests=1,
        model=model,
    )


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function") or {}
    converted: dict[str, Any] = {
        "type": "function",
        "name": function.get("name"),
        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
        "strict": bool(function.get("strict", False)),
    }
    if function.get("description"):
        converted["description"] = function["description"]
    return converted


def _format(response_format: dict[str, Any]) -> dict[str, Any]:
    if response_format.get("type") != "json_schema":
        return dict(response_format)
    schema = response_format.get("json_schema") or {}
    return {"type": "json_schema", **schema}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "name": (choice.get("function") or {}).get("name")}
    return choice


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""
