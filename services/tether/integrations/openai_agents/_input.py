"""A run's input as the SDK takes it (pure): a question, or a conversation in the chat
format Tether's agents take, each message an input item of the Responses format the SDK
speaks (an assistant's `tool_calls` become `function_call` items, a `tool` message a
`function_call_output`), so the model gets every one of them. Items already in that
format pass as they are."""

from __future__ import annotations

from typing import Any


def input_items(given: str | list[dict[str, Any]] | None) -> str | list[dict[str, Any]]:
    """The input to give `Runner.run`."""
    if not isinstance(given, list):
        return given or ""
    items: list[dict[str, Any]] = []
    for message in given:
        items.extend(_items(message))
    return items


def _items(message: dict[str, Any]) -> list[dict[str, Any]]:
    role = message.get("role")
    if role == "tool":
        output = message.get("content")
        return [
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id", ""),
                "output": output if isinstance(output, str) else str(output or ""),
            }
        ]
    if role != "assistant" or "tool_calls" not in message:
        return [message]
    said = [{"role": "assistant", "content": message["content"]}] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        said.append(
            {
                "type": "function_call",
                "call_id": call.get("id", ""),
                "name": function.get("name", ""),
                "arguments": function.get("arguments") or "{}",
            }
        )
    return said
