"""A run's input as Pydantic AI takes it (pure): a question, or a conversation in the
chat format Tether's agents take (`system`, `user`, `assistant` with `tool_calls`,
`tool` messages), whose last user message is the prompt and whose earlier messages are
the run's `message_history`, so the model gets every one of them."""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from tether.errors import TerminalError


def text_of(message: dict[str, Any]) -> str:
    """A message's content as text: a string, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return "" if content is None else str(content)


def prompt_and_history(
    given: str | list[dict[str, Any]] | None,
) -> tuple[str | None, list[ModelMessage]]:
    """The run's user prompt and its `message_history`."""
    if not isinstance(given, list):
        return given or "", []
    messages = list(given)
    prompt = None
    if messages and messages[-1].get("role", "user") == "user":
        prompt = text_of(messages.pop())
    return prompt, history(messages)


def history(messages: list[dict[str, Any]]) -> list[ModelMessage]:
    """Chat messages as Pydantic AI's: consecutive requests' parts (system, user, tool
    results) make one `ModelRequest`, each assistant message a `ModelResponse`."""
    built: list[ModelMessage] = []
    parts: list[ModelRequestPart] = []
    names: dict[str, str] = {}
    """The tool each call id named, for its result's part."""
    for number, message in enumerate(messages):
        role = message.get("role", "user")
        if role == "assistant":
            if parts:
                built.append(ModelRequest(parts=parts))
                parts = []
            built.append(_response(message, names))
        elif role == "tool":
            call = str(message.get("tool_call_id", ""))
            parts.append(ToolReturnPart(names.get(call, ""), text_of(message), call))
        elif role in ("system", "developer"):
            parts.append(SystemPromptPart(text_of(message)))
        elif role == "user":
            parts.append(UserPromptPart(text_of(message)))
        else:
            raise TerminalError(
                f"message {number} of the run's input has role {role!r}: give 'system', "
                "'user', 'assistant' or 'tool'"
            )
    if parts:
        built.append(ModelRequest(parts=parts))
    return built


def _response(message: dict[str, Any], names: dict[str, str]) -> ModelResponse:
    said: list[TextPart | ToolCallPart] = []
    if text := text_of(message):
        said.append(TextPart(text))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        name, id_ = str(function.get("name", "")), str(call.get("id", ""))
        names[id_] = name
        said.append(ToolCallPart(name, function.get("arguments"), id_))
    return ModelResponse(parts=said)
