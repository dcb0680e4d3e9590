"""The script a scripted model follows, and which turn of it answers a request."""

from __future__ import annotations

from typing import Any

import msgspec


class ToolCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A function call in a reply; `arguments` is a JSON object, or a string sent verbatim."""

    name: str
    arguments: dict[str, Any] | str = {}
    id: str | None = None
    """The call's id as sent (default `call_<turn>_<i>`): "" or a repeated one, as some
    OpenAI-compatible servers send."""


class Usage(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Token counts to report; a field left out is estimated (see `replies.usage_of`)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


class Fault(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """What goes wrong with one attempt at a turn: exactly one of `status`, `drop_after`
    (the connection breaks after n chunks), `end_after` (the body ends cleanly after n
    chunks: no finish_reason, no usage, no [DONE], as a proxy that gives up does),
    `stall_after` (with `seconds`), `empty` (a reply with no text and no tool call, as
    a model sometimes gives) or `ok`."""

    status: int | None = None
    retry_after: int | float | None = None
    code: str | None = None
    message: str | None = None
    drop_after: int | None = None
    end_after: int | None = None
    stall_after: int | None = None
    seconds: int | float | None = None
    empty: bool = False
    ok: bool = False

    def __post_init__(self) -> None:
        kinds = [self.status is not None, self.drop_after is not None]
        kinds += [self.end_after is not None, self.stall_after is not None, self.empty, self.ok]
        if sum(kinds) != 1:
            raise ValueError(
                "a fault is exactly one of {'status': S}, {'drop_after': n}, {'end_after': n}, "
                "{'stall_after': n, 'seconds': s}, {'empty': true} or {'ok': true}"
            )
        if self.stall_after is not None and self.seconds is None:
            raise ValueError("a stall_after fault needs 'seconds' (how long to stall)")


class Turn(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One assistant reply, and the faults of its first attempts (attempt n gets faults[n])."""

    content: str | None = None
    tool_calls: list[ToolCall] = []
    usage: Usage | None = None
    faults: list[Fault] = []
    finish_reason: str | None = None
    """Sent instead of `stop` / `tool_calls`: `length`, `content_filter`, ..."""
    raw_escapes: bool = False
    """The content's `\\uXXXX` texts go out as JSON escapes, as written: a lone surrogate,
    as a server that splits an emoji's pair sends it."""


class Conversation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The turns for requests whose first user message contains `match` (None: the default)."""

    turns: list[Turn]
    match: str | None = None

    @property
    def name(self) -> str:
        return "the default conversation" if self.match is None else f"conversation {self.match!r}"


class Script(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Conversations, or the shorthand `turns` for one default conversation."""

    conversations: list[Conversation] = []
    turns: list[Turn] | None = None
    chunk_delay: float = 0.0
    refuse_json_schema: bool = False
    """Answer 400 to `response_format` `json_schema`, as endpoints without structured
    outputs do."""
    template_tools: bool | None = None
    """Serve llama-server's `/props`, saying the chat template takes tools (true) or has
    no place for them (false, as SmolLM2-135M's); null: no `/props` (not llama.cpp)."""

    def __post_init__(self) -> None:
        if self.turns is not None and self.conversations:
            raise ValueError("a script has 'conversations' or the shorthand 'turns', not both")

    @property
    def all_conversations(self) -> list[Conversation]:
        if self.turns is not None:
            return [Conversation(turns=self.turns)]
        return self.conversations


class ScriptError(Exception):
    """The script has no reply for a request (the server answers 400 with this message)."""


_decoder = msgspec.json.Decoder(Script)


def decode_script(data: bytes) -> Script:
    """Parse a script; raise ScriptError naming the JSON path of what is wrong."""
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ScriptError(f"invalid script: {exc}") from exc


def message_text(message: dict[str, Any]) -> str:
    """The text of a message: its string content, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def first_user_text(messages: list[dict[str, Any]]) -> str:
    """What identifies a conversation: the text of its first user message ('' if none)."""
    return next((message_text(m) for m in messages if m.get("role") == "user"), "")


def turn_number(messages: list[dict[str, Any]]) -> int:
    """Which turn a request asks for: the number of assistant replies it already holds."""
    return sum(1 for m in messages if m.get("role") == "assistant")


def select_conversation(script: Script, first_user: str) -> Conversation:
    """The first conversation whose `match` is in `first_user`, else the first default."""
    conversations = script.all_conversations
    for conversation in conversations:
        if conversation.match is not None and conversation.match in first_user:
            return conversation
    for conversation in conversations:
        if conversation.match is None:
            return conversation
    matches = [c.match for c in conversations]
    raise ScriptError(
        f"no conversation in the script matches the first user message {first_user[:200]!r} "
        f"(matches: {matches}); add one whose 'match' is a substring of it, or a default "
        "conversation without 'match'"
    )


def select_turn(conversation: Conversation, k: int) -> Turn:
    """Turn `k` of `conversation`; raise ScriptError when the script ends before it."""
    if k >= len(conversation.turns):
        raise ScriptError(
            f"the script has no turn {k} for {conversation.name}: it has "
            f"{len(conversation.turns)} turn(s), and turn k answers a request holding k "
            "assistant messages"
        )
    return conversation.turns[k]
