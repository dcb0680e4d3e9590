"""A chat model's call in a graph's step, asked for what the budget needs (I/O): the
answer cap its reservation granted (`graph_meter`) goes to the model as `max_tokens`,
so the call cannot answer past the budget, and a streamed call asks for its usage
(`stream_usage`, which langchain-openai leaves off on any other `base_url` than
OpenAI's), so it is counted as the model reported it rather than estimated.

LangChain has no public hook that changes a call's request (a callback only sees it; a
`bind` is the graph author's), so the two methods through which `invoke`, `ainvoke` and
`batch` reach a model (`BaseChatModel._agenerate_with_cache`, `_generate_with_cache`)
are wrapped once, when a graph is added to an app. They change nothing unless the
call's callbacks hold a graph step's `Spending`, and then only what the model's class
has a field for: a model without `max_tokens` keeps its hold at the worst case. A node
that calls `model.astream()` itself is reserved and counted, but not capped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel

from .graph_meter import Spending

_WRAPPED = "__tether_caps__"


def install() -> None:
    """Wrap the two methods (once per process; a second call changes nothing)."""
    model: Any = BaseChatModel
    if getattr(model._agenerate_with_cache, _WRAPPED, False):
        return
    called_async = model._agenerate_with_cache
    called_sync = model._generate_with_cache

    @functools.wraps(called_async)
    async def agenerate(
        self: BaseChatModel, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        asked = asking(self, run_manager, kw, async_api=True)
        return await called_async(self, messages, stop, run_manager, **asked)

    @functools.wraps(called_sync)
    def generate(
        self: BaseChatModel, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        asked = asking(self, run_manager, kw, async_api=False)
        return called_sync(self, messages, stop, run_manager, **asked)

    setattr(agenerate, _WRAPPED, True)
    model._agenerate_with_cache = agenerate
    model._generate_with_cache = generate


def asking(
    model: BaseChatModel, run_manager: Any, kwargs: dict[str, Any], *, async_api: bool
) -> dict[str, Any]:
    """The call's keyword arguments, with the cap and the usage a step's budget needs."""
    handlers = getattr(run_manager, "handlers", None) or []
    spending = next((h for h in handlers if isinstance(h, Spending)), None)
    if spending is None:
        return kwargs
    fields = type(model).model_fields
    asked = dict(kwargs)
    cap = spending.cap(run_manager.run_id)
    if cap is not None and "max_tokens" in fields:
        asked["max_tokens"] = cap  # never above the model's own: the hold began from it
    unset = "stream_usage" in fields and getattr(model, "stream_usage", None) is None
    if unset and "stream_usage" not in kwargs and _streams(model, run_manager, kwargs, async_api):
        asked["stream_usage"] = True
    return asked


def _streams(model: Any, run_manager: Any, kwargs: dict[str, Any], async_api: bool) -> bool:
    """Whether LangChain streams this call, as `_agenerate_with_cache` decides it (a
    request that does not stream takes no `stream_usage`)."""
    deciders: list[Callable[..., bool]] = [
        getattr(model, name)
        for name in ("_should_use_protocol_streaming", "_should_stream")
        if hasattr(model, name)
    ]
    return any(
        decide(async_api=async_api, run_manager=run_manager, **kwargs) for decide in deciders
    )
