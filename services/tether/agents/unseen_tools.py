"""Tools offered to a model that could not have seen them, said once in the task's status.

A small local model's chat template may have no place for tools (SmolLM2's drops them:
its prompt is the same with or without), and a server may ignore `tool_choice`; the agent
then answers in text as if it had no tools, and nothing else would say why. Two signs:
llama-server's `/props` says the template takes no tools (`chat_template_caps`), or
`tool_choice="required"` was sent and no tool call came back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.agents.agent import Agent
    from tether.agents.models import Reply

log = logging.getLogger("tether.agents")
PROPS_WITHIN = 2.0
"""Seconds to wait for `/props`: a server that has none answers 404 at once."""
FIX = (
    "serve a model whose chat template takes tools (llama.cpp: with --jinja), or run "
    "the tools as plan steps (client.submit([...])) and give the agent only what needs it"
)


async def takes_tools(base_url: str | None, known: dict[str, bool | None]) -> bool | None:
    """Whether the model's chat template takes tools, as llama-server's `/props` says;
    None when the server does not say (not llama.cpp, or not reached). Asked once per
    endpoint (`known`, kept per process)."""
    if base_url is None or "api.openai.com" in base_url:
        return None
    if base_url not in known:
        known[base_url] = await _props_say(base_url)
    return known[base_url]


async def _props_say(base_url: str) -> bool | None:
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        props = await asyncio.to_thread(_get_json, f"{root}/props")
    except (OSError, ValueError) as exc:  # refused, a 404 (HTTPError), not JSON
        log.debug("no /props at %s: %r", root, exc)
        return None
    caps = props.get("chat_template_caps") if isinstance(props, dict) else None
    said = caps.get("supports_tools") if isinstance(caps, dict) else None
    return said if isinstance(said, bool) else None


def _get_json(url: str) -> Any:
    """One GET, in a thread (the standard library's: no client to import at start)."""
    with urllib.request.urlopen(url, timeout=PROPS_WITHIN) as response:
        return json.loads(response.read())


def unseen(agent: Agent, takes: bool | None, options: dict[str, Any], reply: Reply) -> str | None:
    """What to say when the model could not have seen the tools it was offered (None:
    nothing to say)."""
    called = bool(reply.message.get("tool_calls"))
    where = f"agent {agent.name!r}: model {agent.llm.name!r}"
    if agent.llm.base_url:
        where += f" at {agent.llm.base_url}"
    if takes is False:
        return (
            f"{where} never saw its tools: its chat template has no place for them "
            "(the server's /props: chat_template_caps.supports_tools is false), so it "
            f"answered {'with a made-up call' if called else 'without them'}. To fix: {FIX}"
        )
    if options.get("tool_choice") == "required" and not called:
        return (
            f"{where} called no tool though tool_choice was 'required': the server or the "
            f"model ignores it, and its text was taken as the answer. To fix: {FIX}"
        )
    return None
